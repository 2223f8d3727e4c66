"""Forked workers' USS growth with and without Python's cyclic GC walking the inherited heap.

    python benchmarks/bench_gc_copy.py numpy none     # default
    python benchmarks/bench_gc_copy.py numpy freeze   # gc.freeze() before the loader starts
    python benchmarks/bench_gc_copy.py list disable   # gc.disable() in each worker

Prints each worker's USS (MB) after the first batch and near the end of one epoch.
"""

from __future__ import annotations

import gc
import sys

from torch.utils.data import DataLoader

from memprobe.datasets import RecordSpec, build_dataset
from memprobe.probe import procfs


def main(backend: str, how: str, records: int = 300_000) -> None:
    ds = build_dataset(backend, RecordSpec(records=records))
    if how == "freeze":
        gc.freeze()

    def init(_: int) -> None:
        if how == "disable":
            gc.disable()

    dl = DataLoader(
        ds, batch_size=256, num_workers=2, multiprocessing_context="fork", shuffle=True, worker_init_fn=init
    )
    it = iter(dl)
    next(it)
    pids = [p.pid for p in it._workers]
    start = [procfs.read_pss(p).uss / procfs.MB for p in pids]
    for i, _ in enumerate(it):
        if i == len(dl) - 3:
            break
    end = [procfs.read_pss(p).uss / procfs.MB for p in pids]
    print(f"{backend} {how}: worker USS {[round(x) for x in start]} -> {[round(x) for x in end]} MB")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "none")
