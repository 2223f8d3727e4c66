"""What this interpreter and this torch offer thread workers."""

from __future__ import annotations

import inspect
import sys

import torch

__all__ = ["gil_enabled", "torch_native_thread_workers_available"]


def gil_enabled() -> bool | None:
    """Return whether the GIL is active in this interpreter.

    Uses ``sys._is_gil_enabled()`` (Python 3.13+, meaningful on free-threaded builds). Where it
    does not exist the build is a standard one, which always has a GIL, so ``True`` is returned.
    ``None`` means the check itself failed.
    """
    probe = getattr(sys, "_is_gil_enabled", None)
    if probe is None:
        return True
    try:
        return bool(probe())
    except Exception:  # noqa: BLE001  (a private interpreter probe: its failure is the documented None)
        return None


def torch_native_thread_workers_available() -> bool:
    """Return True if the installed torch DataLoader takes ``worker_method``.

    Native thread workers exist only on torch's development branch; this inspects the signature
    rather than trusting a version number.
    """
    try:
        params = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    except (TypeError, ValueError):
        return False
    return "worker_method" in params
