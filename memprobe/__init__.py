"""memprobe: see and test how much memory torch DataLoader workers really use.

The public API is small:

* :func:`profile` — build a dataset in a fresh process, load it in a given mode, sample its
  memory from outside, and assert on the result (``result.assert_flat(...)``).
* :class:`ThreadDataLoader` — torch's DataLoader on worker threads instead of processes.
* :func:`record_command` — run a command (a short run of a training script) under ``memprobe
  record`` and assert on its recording (``result.assert_flat(max_main_growth_mb=20)``).
* :func:`mark` — count items from inside a training loop that ``memprobe record`` watches; a
  no-op otherwise. :func:`mark_dataset` — tell it where the dataset's objects lie, so it names
  which of them the forked workers copied (docs/attribution.md).
* :func:`watching` — record this process and its DataLoader workers around a training loop,
  the scalars every few seconds; ``memprobe.integrations.lightning.MemprobeCallback`` and
  ``memprobe.integrations.hf.MemprobeCallback`` (also reached as memprobe.lightning and
  memprobe.hf) are it for Lightning's and Hugging Face's ``Trainer``; each imports its
  trainer's library when it is first used.
* :class:`SharedList` — records pickled once into one buffer that fork, spawn, forkserver and
  thread workers share (one copy, no copy-on-access); imports neither torch nor pyarrow.
* :class:`ChunkedRandomSampler` — the shuffled order of ``shuffle=True`` without a Python int per
  record in the main process (8 bytes per record instead of about 38);
  :class:`ChunkedDistributedSampler` — the same for ``DistributedSampler``, in each DDP rank.
"""

from __future__ import annotations

from typing import Any

# Eager, unlike the rest: ``memprobe.mark(n)`` runs once per batch, and a lazy module
# __getattr__ would run on every call (~2.5 us instead of ~0.1 us). marks imports only os/time.
from memprobe.record.marks import mark

__version__ = "0.1.0"
__all__ = [
    "ChunkedDistributedSampler",
    "ChunkedRandomSampler",
    "ProfileResult",
    "SharedList",
    "ThreadDataLoader",
    "mark",
    "mark_dataset",
    "profile",
    "record_command",
    "watching",
]


def __getattr__(name: str) -> Any:
    # Lazy: ``import memprobe`` in a training script must not import torch or pandas by itself.
    if name in ("profile", "ProfileResult"):
        from memprobe.run import api

        return getattr(api, name)
    if name in ("record_command", "RecordedJob"):
        from memprobe.record import api as record_api

        return getattr(record_api, name)
    if name == "mark_dataset":
        from memprobe.record.dataset_mark import mark_dataset

        return mark_dataset
    if name in ("watching", "Watching"):
        from memprobe.integrations import watching

        return getattr(watching, name)
    if name in ("lightning", "hf"):  # memprobe.lightning.MemprobeCallback: imports Lightning then
        import importlib

        return importlib.import_module(f"memprobe.integrations.{name}")
    if name == "ThreadDataLoader":
        from memprobe.loaders.thread import ThreadDataLoader

        return ThreadDataLoader
    if name == "SharedList":
        from memprobe.datasets.shared_list import SharedList

        return SharedList
    if name in ("ChunkedRandomSampler", "ChunkedDistributedSampler"):
        from memprobe.datasets import sampler

        return getattr(sampler, name)
    raise AttributeError(f"module 'memprobe' has no attribute {name!r}")
