"""glibc's heap in a process whose worker threads allocate and free large item buffers.

glibc serves an allocation above its mmap threshold with a fresh ``mmap`` and returns it on free;
below it, from the thread's heap, whose free top it hands back to the kernel (``madvise``) once it
exceeds the trim threshold. Both thresholds start small (128 KiB, 256 KiB) and move up only when a
block that was mmapped is freed: the threshold becomes that block's size, the trim threshold twice
that, up to 32 MiB / 64 MiB. A worker thread decoding images allocates ~1 MB per item; the first
such block freed sets the thresholds to ~1 MB / ~2 MB, and from then on the heap is trimmed after
nearly every item and the next item faults the same pages in again. Whether something later frees
a larger block (a batch under 32 MiB freed through ``malloc`` does) is luck: a batch stacked into
shared memory (torch's process workers) or larger than 32 MiB (64 decoded 640x408 images are 50
MB) never does. Measured on the decode scenario's Pillow runs, 2 worker threads: 285-350 minor
faults and 2.1-2.4 ms of CPU per image, a third of it in the kernel; after priming, 191 faults
(the 50 MB batch's own fresh pages) and 1.9-2.0 ms (docs/perf/threads.md).

:func:`prime` frees one block just under 32 MiB through ``malloc`` when the first worker thread
starts, which moves both thresholds where glibc's own rule would put them after such a block:
32 MiB and 64 MiB. It is glibc's documented adjustment (mallopt(3), ``M_MMAP_THRESHOLD``), made
once per process, and process-wide: blocks up to 32 MiB then come from the heaps, and each heap
keeps up to 64 MiB free at its top instead of returning it (measured: +10-30 MB of peak RSS on the
decode scenario). What the program chose itself wins: once ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES`` or ``mallopt`` set a threshold, glibc no longer
moves them and priming changes nothing. :func:`keep_freed_memory` (``False``) turns it off; on
other C libraries it does nothing.
"""

from __future__ import annotations

import ctypes
import threading

__all__ = ["keep_freed_memory", "prime"]

# glibc's DEFAULT_MMAP_THRESHOLD_MAX (4 MiB * sizeof(long): 32 MiB on 64-bit), minus room for the
# chunk header: a freed mmapped chunk above the maximum does not move the thresholds.
_PRIME_BYTES = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long) - 64 * 1024

_lock = threading.Lock()
_enabled = True
_primed = False


def keep_freed_memory(enabled: bool = True) -> None:
    """Whether worker threads prime glibc's heap thresholds (see the module doc); takes effect if
    called before the first ThreadDataLoader worker thread of the process starts."""
    global _enabled
    _enabled = enabled


def prime() -> bool:
    """Prime glibc's thresholds once per process; True if this call did it."""
    global _primed
    with _lock:
        if _primed or not _enabled:
            return False
        _primed = True
        libc = _glibc()
        if libc is None:
            return False
        block = libc.malloc(_PRIME_BYTES)
        if block:
            libc.free(block)
        return bool(block)


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (only glibc has it: musl and others are left alone)
    except (OSError, AttributeError):
        return None
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc
