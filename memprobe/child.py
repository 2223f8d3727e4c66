"""The child side of a run: build the dataset and loader, iterate, report progress.

Started by the supervisor (runner.py) as ``python -m memprobe.child`` in its own process group.
It reads its RunSpec as one JSON line on stdin and writes events as JSON lines to the file
descriptor named by ``MEMPROBE_EVENT_FD``. It never measures memory itself: the supervisor
samples it from /proc. It only counts items and batches.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

from memprobe.scenario import RunSpec

PROGRESS_EVERY_S = 0.1


class Events:
    """JSON-lines events to the supervisor, stamped with the shared monotonic clock."""

    def __init__(self, fd: int) -> None:
        self._f = os.fdopen(fd, "w", buffering=1, encoding="utf-8")

    def send(self, event: str, **fields: Any) -> None:
        self._f.write(json.dumps({"event": event, "mono": time.monotonic(), **fields}) + "\n")


def _batch_items(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    if isinstance(batch, (list, tuple)) and batch and not hasattr(batch, "shape"):
        first = batch[0]
        return len(first) if hasattr(first, "__len__") and not isinstance(first, str) else len(batch)
    return len(batch) if hasattr(batch, "__len__") else 1


class FaultyDataset:
    """Test hook: wraps a dataset to raise or hang at a given index (``fault: raise@N``)."""

    def __init__(self, inner: Any, kind: str, at: int) -> None:
        self.inner, self.kind, self.at = inner, kind, at

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Any:
        if index == self.at:
            if self.kind == "raise":
                raise ValueError(f"injected fault at index {index}")
            if self.kind == "hang":
                time.sleep(3600)
        return self.inner[index]


def _parse_fault(fault: str | None) -> tuple[str, int] | None:
    if not fault:
        return None
    kind, _, at = fault.partition("@")
    return kind, int(at or 0)


def build(spec: RunSpec) -> Any:
    from memprobe.datasets import build_dataset
    from memprobe.datasets.records import RecordSpec

    d = spec.dataset
    dataset = build_dataset(spec.backend, RecordSpec(records=d.records, floats=d.floats, seed=d.seed))
    fault = _parse_fault(spec.fault)
    if fault and fault[0] in ("raise", "hang"):
        dataset = FaultyDataset(dataset, *fault)
    return dataset


def iterate(spec: RunSpec, dataset: Any, events: Events, acks: Iterator[str]) -> None:
    from memprobe.loaders import build_loader, worker_pids

    lo = spec.loader
    loader = build_loader(dataset, mode=spec.mode, workers=spec.workers, batch_size=lo.batch_size,
                          shuffle=lo.shuffle, prefetch_factor=lo.prefetch_factor,
                          persistent_workers=lo.persistent_workers, seed=spec.dataset.seed)
    if lo.gc_freeze:
        import gc

        gc.freeze()
    fault = _parse_fault(spec.fault)
    per_epoch = len(loader)
    items = batches = 0
    last_sent = 0.0
    for epoch in range(lo.epochs):
        events.send("iter_start", epoch=epoch)
        it = iter(loader)
        events.send("epoch_start", epoch=epoch, workers=worker_pids(it))
        for b in range(per_epoch):
            batch = next(it)
            n = _batch_items(batch)
            items += n
            batches += 1
            if batches == 1:
                events.send("first_batch", items=items, batches=batches)
            if batches == max(spec.workers, 1) and epoch == 0:
                # Round-robin: every worker has now delivered a batch, so each has its dataset
                # (spawn/forkserver workers unpickle it first). The window of growth starts here;
                # wait while the supervisor takes a PSS round (workers stop at their prefetch limit).
                events.send("warm", items=items, batches=batches)
                next(acks, None)
            if fault and fault[0] == "kill" and batches == fault[1]:
                os.kill(worker_pids(it)[0], signal.SIGKILL)
            last_epoch_batch = b == per_epoch - 1 and epoch == lo.epochs - 1
            budget_hit = lo.items is not None and items >= lo.items
            now = time.monotonic()
            if now - last_sent >= PROGRESS_EVERY_S or last_epoch_batch or budget_hit:
                events.send("progress", items=items, batches=batches, epoch=epoch)
                last_sent = now
            if last_epoch_batch or budget_hit:
                # Workers are still alive here: the supervisor takes its final PSS round now.
                events.send("done", items=items, batches=batches)
                next(acks, None)
                del it
                return
        del it
    events.send("done", items=items, batches=batches)
    next(acks, None)


def main() -> int:
    events = Events(int(os.environ["MEMPROBE_EVENT_FD"]))
    lines = iter(sys.stdin.readline, "")
    spec = RunSpec.from_dict(json.loads(next(lines)))
    events.send("started", pid=os.getpid())
    try:
        t = time.monotonic()
        dataset = build(spec)
        events.send("dataset_built", seconds=time.monotonic() - t, length=len(dataset))
        iterate(spec, dataset, events, lines)
    except BaseException as exc:  # reported to the supervisor with the original type and message
        events.send("error", type=type(exc).__name__, message=str(exc), traceback=traceback.format_exc())
        return 1
    events.send("finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
