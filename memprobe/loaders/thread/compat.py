"""What this interpreter and this torch offer thread workers."""

from __future__ import annotations

import inspect

import torch

from memprobe.vocabulary import gil_enabled

__all__ = ["gil_enabled", "torch_native_thread_workers_available"]


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
