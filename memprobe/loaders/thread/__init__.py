"""Thread-based drop-in replacement for :class:`torch.utils.data.DataLoader`.

:class:`ThreadDataLoader` takes the same arguments as torch's DataLoader and yields exactly the
same batches in the same order (``in_order=True``), but its workers are threads of the calling
process instead of child processes: no copy-on-write page duplication, no pickling, one address
space. It is the "threads" arm of memprobe's fork/spawn/forkserver/threads comparison.

The package in pieces (as torchdata.nodes splits its own):

``info``      worker info per thread (torch's ``get_worker_info()`` included) and per-worker seeds
``replicas``  each worker's own dataset object; datapipe shuffling, seeding and sharding
``collate``   batches collated in threads stay in ordinary memory, not shared memory
``heap``      glibc keeps the worker threads' freed item buffers instead of trimming its heaps
``worker``    the worker loop, fetchers, failures, and what threads cannot do as processes do
``iterator``  the iterators: in the calling thread, or over worker threads, in torch's order
``loader``    ThreadDataLoader itself: torch's arguments, checks and warnings
``compat``    what this interpreter and torch offer (GIL state, torch's native thread workers)
"""

from __future__ import annotations

import torch  # noqa: F401  (``thread.torch``: tests and users patch torch's DataLoader through it)

from memprobe.loaders.thread.compat import gil_enabled, torch_native_thread_workers_available
from memprobe.loaders.thread.heap import keep_freed_memory
from memprobe.loaders.thread.info import WorkerInfo, get_worker_info
from memprobe.loaders.thread.loader import ThreadDataLoader
from memprobe.loaders.thread.worker import NATIVE_NAME_PREFIX, WORKER_THREAD_PREFIX, ThreadWorkerWarning

__all__ = [
    "NATIVE_NAME_PREFIX",
    "WORKER_THREAD_PREFIX",
    "ThreadDataLoader",
    "ThreadWorkerWarning",
    "WorkerInfo",
    "get_worker_info",
    "gil_enabled",
    "keep_freed_memory",
    "torch_native_thread_workers_available",
]
