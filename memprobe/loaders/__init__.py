"""Build the loader a run asks for: torch's DataLoader per start method, or the thread loader."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

PROCESS_MODES = ("fork", "spawn", "forkserver")
# Further thread-based loaders, registered by name: (dataset, num_workers, prefetch_factor,
# persistent_workers, batch_size, shuffle, generator[, collate_fn]) -> an iterable with len().
EXTRA_MODES: dict[str, Any] = {}


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
    if mode == "thread":
        from memprobe.loaders.thread import ThreadDataLoader

        return ThreadDataLoader(dataset, **parallel, **common)
    if mode in EXTRA_MODES:
        return EXTRA_MODES[mode](dataset, **parallel, **common)
    if mode in PROCESS_MODES:
        return DataLoader(dataset, multiprocessing_context=mode, **parallel, **common)
    raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join((*PROCESS_MODES, 'thread', *EXTRA_MODES))}")


def worker_pids(iterator: Any) -> list[int]:
    """The worker process ids of a torch DataLoader iterator, in worker order (empty otherwise)."""
    return [p.pid for p in getattr(iterator, "_workers", []) if getattr(p, "pid", None)]


from memprobe.loaders import extra as _extra  # noqa: E402,F401  registers torch-thread, torchdata-thread
