"""Build the loader a run asks for: torch's DataLoader per start method, or the thread loader."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from memprobe.core.vocabulary import PROCESS_MODES, THREAD, TORCH_THREAD, TORCHDATA_THREAD
from memprobe.loaders.extra import build_torch_thread, build_torchdata_thread

# Further thread-based loaders by mode name: (dataset, num_workers, prefetch_factor,
# persistent_workers, batch_size, shuffle, generator[, collate_fn]) -> an iterable with len().
EXTRA_MODES: dict[str, Any] = {TORCH_THREAD: build_torch_thread, TORCHDATA_THREAD: build_torchdata_thread}


def build_loader(
    dataset: Dataset,
    *,
    mode: str,
    workers: int,
    batch_size: int,
    shuffle: bool,
    prefetch_factor: int = 2,
    persistent_workers: bool = False,
    seed: int = 0,
    collate_fn: Any = None,
) -> Iterable:
    """A loader over ``dataset``; ``workers == 0`` loads in the calling thread whatever ``mode``."""
    common: dict[str, Any] = {
        "batch_size": batch_size,
        "shuffle": shuffle,
        "generator": torch.Generator().manual_seed(seed),
    }
    if collate_fn is not None:
        common["collate_fn"] = collate_fn
    if workers == 0:
        return DataLoader(dataset, num_workers=0, **common)
    parallel: dict[str, Any] = {
        "num_workers": workers,
        "prefetch_factor": prefetch_factor,
        "persistent_workers": persistent_workers,
    }
    if mode == THREAD:
        # Only a thread run imports the thread loader: the run's process is what is measured,
        # and what it imports before forking changes what its workers copy (with it imported,
        # list x fork workers ended at 93 MB of USS instead of 129 MB, tests/integration/test_run.py).
        from memprobe.loaders.thread import ThreadDataLoader

        return ThreadDataLoader(dataset, **parallel, **common)
    if mode in EXTRA_MODES:
        return EXTRA_MODES[mode](dataset, **parallel, **common)
    if mode in PROCESS_MODES:
        return DataLoader(dataset, multiprocessing_context=mode, **parallel, **common)
    raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join((*PROCESS_MODES, THREAD, *EXTRA_MODES))}")


def worker_pids(iterator: Any) -> list[int]:
    """The worker process ids of a torch DataLoader iterator, in worker order (empty otherwise)."""
    return [p.pid for p in getattr(iterator, "_workers", []) if getattr(p, "pid", None)]
