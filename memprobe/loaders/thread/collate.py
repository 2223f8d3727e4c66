"""Batches made in worker threads stay in ordinary memory.

torch's ``default_collate`` stacks tensors into a new shared-memory file whenever
``torch.utils.data.get_worker_info()`` says it runs in a worker: a process worker hands the batch
to the main process that way without a copy. Worker threads also have worker info, so without this
module every batch a thread collates becomes a shared-memory file (created, truncated, mapped,
faulted in page by page, unmapped), to be read by the very process that wrote it.

That file costs more than its own syscalls. Because the batch never goes through ``malloc``,
glibc never sees a large block freed, so its dynamic mmap threshold stays where the item buffers
put it (Pillow's ~1 MB decoded images): every item's buffers are then served from the worker
thread's heap and handed back to the kernel as soon as they are freed (the heap top is trimmed with
``madvise(MADV_DONTNEED)`` about once per image), and the next item faults them in again.
Measured on the Pillow decode + resize workload (64 JPEGs 640x408, batch 64, 2 worker threads,
whole epochs of 1,024 images): 545 minor faults and 1.15 ms of kernel CPU per image with
shared-memory batches, 84 and 0.25 ms with ordinary ones, nearly all of those in the first batches
(``heap.py`` removes the rest; ``docs/perf/threads.md``). torch's process workers pay the same
per-image trimming (their batches must be shared); a thread has no reason to.

:func:`install` replaces torch's ``collate_tensor_fn`` in ``default_collate_fn_map`` (the table
``default_collate`` consults at every call, so collate functions that call ``default_collate``
are covered too) with :func:`collate_tensor`, which calls torch's own function with the worker
info hidden from it in worker threads, and exactly as before everywhere else (the main thread,
torch's process workers). The change is process-wide and permanent, made when the first worker
thread starts; a ``torch.Tensor`` entry the user put there is left alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data._utils import collate as torch_collate

from memprobe.loaders.thread import info

__all__ = ["collate_tensor", "install"]

_lock = threading.Lock()
_torch_collate_tensor: Callable[..., Any] | None = None


def collate_tensor(batch: Any, *, collate_fn_map: Any = None) -> Any:
    """torch's ``collate_tensor_fn``, with the batch in ordinary memory in worker threads."""
    assert _torch_collate_tensor is not None  # installed before it can be reached
    tls = info.torch_thread_local()
    if tls is None or info.current() is None:
        return _torch_collate_tensor(batch, collate_fn_map=collate_fn_map)
    # info.hidden_from_torch(), written out: this runs for every tensor field of every batch.
    saved, tls.worker_info = getattr(tls, "worker_info", None), None
    try:
        return _torch_collate_tensor(batch, collate_fn_map=collate_fn_map)
    finally:
        tls.worker_info = saved


def install() -> None:
    """Route torch's default tensor collation through :func:`collate_tensor` (once)."""
    global _torch_collate_tensor
    with _lock:
        if _torch_collate_tensor is not None:
            return
        table = torch_collate.default_collate_fn_map
        if table.get(torch.Tensor) is not torch_collate.collate_tensor_fn:
            return  # the user's own entry, or a torch without the table: theirs to decide
        _torch_collate_tensor = torch_collate.collate_tensor_fn
        table[torch.Tensor] = collate_tensor
