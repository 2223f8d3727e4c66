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

It also replaces torch's ``collate_numpy_array_fn`` with :func:`collate_numpy_array`. torch turns
each numpy array of a batch into a tensor (``torch.as_tensor``) and stacks those: for a batch of 256
small arrays (a box of 4 floats per record) that is 256 calls into torch, each releasing the GIL,
58-77% of the time the whole record batch takes to collate in one thread, and with two worker
threads each release hands the GIL to the other (``benchmarks/collate_cost.py``,
``docs/perf/threads.md``). In a worker thread, where arrays of one shape and one plain numeric
dtype are the common case, the batch is written by ``numpy.stack`` straight into a new tensor of
torch's result shape and dtype (4-6 times cheaper alone): the same tensor torch builds, values,
dtype, shape and strides, in memory torch allocated.
Everything else goes to torch's function, which keeps its errors and warnings: arrays of different
shapes or dtypes, string, object or unsigned 16/32/64-bit dtypes, read-only, non-native byte
order or not C-contiguous arrays, ndarray subclasses, and a ``collate_fn_map`` whose
``torch.Tensor`` entry is not :func:`collate_tensor` (the user's own, or torch's, which in a
worker thread stacks into shared memory).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data._utils import collate as torch_collate

from memprobe.loaders.thread import info

__all__ = ["collate_numpy_array", "collate_tensor", "install"]

_lock = threading.Lock()
_torch_collate_tensor: Callable[..., Any] | None = None
_torch_collate_numpy_array: Callable[..., Any] | None = None

#: numpy dtypes whose arrays torch stacks as they are, and torch's dtype for each. The keys are of
#: native byte order, and a dtype of the other order is not equal to them: it is not found here.
_STACKED_DTYPES = {
    np.dtype(np_type): torch_type
    for np_type, torch_type in (
        (np.bool_, torch.bool),
        (np.int8, torch.int8),
        (np.uint8, torch.uint8),
        (np.int16, torch.int16),
        (np.int32, torch.int32),
        (np.int64, torch.int64),
        (np.float16, torch.float16),
        (np.float32, torch.float32),
        (np.float64, torch.float64),
        (np.complex64, torch.complex64),
        (np.complex128, torch.complex128),
    )
}


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


def collate_numpy_array(batch: Any, *, collate_fn_map: Any = None) -> Any:
    """torch's ``collate_numpy_array_fn``, with one ``numpy.stack`` in worker threads where it
    gives torch's result (see the module doc)."""
    assert _torch_collate_numpy_array is not None  # installed before it can be reached
    # Only where torch's path would end in collate_tensor (ordinary memory, in a worker thread).
    if (
        info.current() is not None
        and collate_fn_map is not None
        and collate_fn_map.get(torch.Tensor) is collate_tensor
    ):
        stacked = _stacked(batch)
        if stacked is not None:
            return stacked
    return _torch_collate_numpy_array(batch, collate_fn_map=collate_fn_map)


def _stacked(batch: Any) -> torch.Tensor | None:
    """``torch.stack([torch.as_tensor(a) for a in batch])``, made by numpy, for a batch of
    same-shape, same-dtype, writable, C-contiguous plain arrays; ``None`` for anything else."""
    first = batch[0]
    dtype = _STACKED_DTYPES.get(first.dtype)
    if dtype is None or first.size == 0:
        return None
    shape = first.shape
    for a in batch:
        if type(a) is not np.ndarray or a.dtype != first.dtype or a.shape != shape:
            return None
        flags = a.flags
        if not (flags.c_contiguous and flags.writeable):
            return None
    out = torch.empty((len(batch), *shape), dtype=dtype)
    # A numpy view of the new tensor's memory, made without ``Tensor.numpy()``: that would mark
    # the storage as not resizable, which torch's stacked batch is. The view dies here.
    memory = (ctypes.c_char * out.nbytes).from_address(out.data_ptr())
    np.stack(batch, out=np.frombuffer(memoryview(memory).cast("B"), dtype=first.dtype).reshape(out.shape))
    return out


def install() -> None:
    """Route torch's default tensor and numpy array collation through :func:`collate_tensor` and
    :func:`collate_numpy_array` (once); an entry the user replaced is left alone."""
    global _torch_collate_tensor, _torch_collate_numpy_array
    with _lock:
        table = torch_collate.default_collate_fn_map
        # Each entry only where it is still torch's: the user's own, or a torch without the
        # table, is theirs to decide.
        if _torch_collate_tensor is None and table.get(torch.Tensor) is torch_collate.collate_tensor_fn:
            _torch_collate_tensor = torch_collate.collate_tensor_fn
            table[torch.Tensor] = collate_tensor
        numpy_fn = getattr(torch_collate, "collate_numpy_array_fn", None)
        if _torch_collate_numpy_array is None and numpy_fn is not None and table.get(np.ndarray) is numpy_fn:
            _torch_collate_numpy_array = numpy_fn
            table[np.ndarray] = collate_numpy_array
