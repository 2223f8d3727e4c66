"""Quiet, cached import of ``nvidia.nvimgcodec`` and non-initialising GPU detection.

Importing nvimgcodec on a machine without the CUDA libraries prints about ten
lines of "Failed to load nvjpeg library! ..." / "[ERROR] [nvjpeg-ext] ..." from
C code straight to file descriptor 2. ``PYNVIMGCODEC_VERBOSITY=0`` silences
only the ``[ERROR]`` half, so we redirect fd 2 to a temporary file for the
duration of the import, drop the known library-missing lines (kept at DEBUG
log level and used to tell whether nvJPEG loaded), and write anything else
back to stderr. Set ``MEMPROBE_NVIMGCODEC_QUIET=0`` to disable the capture.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import logging
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from types import ModuleType

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "install it with: pip install 'torch-memprobe[nvimgcodec]'  "
    "(or: pip install 'nvidia-nvimgcodec-cu12[nvjpeg]'; the nvjpeg extra is what GPU decoding needs)"
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Lines nvimgcodec prints when optional CUDA codec libraries are absent.
_NOISE = re.compile(
    r"Failed to load nv\w+ library"
    r"|^Note: If using nvImageCodec's Python distribution"
    r"|\[(nvjpeg-ext|nvjpeg2k_ext|nvtiff_ext)\] Failed to load"
)
_NVJPEG_MISSING = re.compile(r"Failed to load nvjpeg library|\[nvjpeg-ext\] Failed to load")


@dataclass(frozen=True)
class ImportState:
    """Outcome of the one-per-process nvimgcodec import."""

    module: ModuleType | None
    error: str | None  # why the import failed, with install hint
    captured: str  # what the import printed to fd 2 (empty if not captured)
    nvjpeg_missing: bool | None  # None when output was not captured


_lock = threading.Lock()
_state: ImportState | None = None


def _quiet_enabled() -> bool:
    return os.environ.get("MEMPROBE_NVIMGCODEC_QUIET", "1").strip().lower() not in ("0", "false", "no")


def _import_capturing_fd2() -> tuple[ModuleType | None, BaseException | None, str]:
    """Import nvimgcodec with fd 2 pointed at a temp file; return (module, exc, text)."""
    sys.stderr.flush()
    saved = os.dup(2)
    module: ModuleType | None = None
    exc: BaseException | None = None
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            module = importlib.import_module("nvidia.nvimgcodec")
        except Exception as e:  # noqa: BLE001 - reported through ImportState
            exc = e
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("utf-8", errors="replace")
    return module, exc, text


def _reemit_unexpected(text: str) -> None:
    """Write back captured lines that are not the known library-missing noise."""
    keep = [ln for ln in text.splitlines() if ln.strip() and not _NOISE.search(_ANSI.sub("", ln))]
    if keep:
        sys.stderr.write("\n".join(keep) + "\n")
        sys.stderr.flush()
    if text.strip():
        log.debug("nvimgcodec import output:\n%s", _ANSI.sub("", text))


def _do_import() -> ImportState:
    if _quiet_enabled():
        module, exc, text = _import_capturing_fd2()
        _reemit_unexpected(text)
        missing: bool | None = bool(_NVJPEG_MISSING.search(_ANSI.sub("", text)))
    else:
        text, missing = "", None
        try:
            module, exc = importlib.import_module("nvidia.nvimgcodec"), None
        except Exception as e:  # noqa: BLE001
            module, exc = None, e
    if module is None:
        error = f"nvidia.nvimgcodec is not importable ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
        return ImportState(None, error, text, missing)
    return ImportState(module, None, text, missing)


def import_state() -> ImportState:
    """Import nvimgcodec once per process (thread-safe) and return the outcome."""
    global _state
    if _state is None:
        with _lock:
            if _state is None:
                _state = _do_import()
    return _state


def nvimgcodec() -> ModuleType:
    """The ``nvidia.nvimgcodec`` module; ImportError with install hint if missing."""
    state = import_state()
    if state.module is None:
        raise ImportError(state.error)
    return state.module


def gpu_unavailable_reason() -> str | None:
    """None if nvimgcodec can probably decode on a GPU here, else why not.

    Deliberately does not call cuInit/cudaGetDeviceCount: initialising CUDA in
    the parent would poison any fork-started worker. Checks, in order:
    CUDA_VISIBLE_DEVICES, NVIDIA device nodes, libcuda loadability (dlopen
    only), nvimgcodec importability, and whether nvimgcodec found nvJPEG.
    """
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU"
    nodes = glob.glob("/dev/nvidia[0-9]*") + glob.glob("/proc/driver/nvidia/gpus/*") + glob.glob("/dev/dxg")
    if not nodes:
        return "no NVIDIA GPU found (no /dev/nvidia<N>, /proc/driver/nvidia/gpus or /dev/dxg)"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"CUDA driver library libcuda.so.1 not loadable ({exc})"
    state = import_state()
    if state.module is None:
        return state.error
    if state.nvjpeg_missing:
        return "nvimgcodec could not load nvJPEG; pip install nvidia-nvjpeg-cu12"
    return None
