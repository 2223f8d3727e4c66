"""Thread loaders in one process, whole epochs alternating: a diagnostic beside ``bench_threads.py``.

``bench_threads.py`` runs every epoch in a fresh process; on this shared machine a run's items/s
varies 2-3x between rounds, so a 5% difference needs tens of rounds. Here one process builds the
dataset once (collected and frozen out of the collector's way) and runs the loaders' epochs in
turn, many times, in the race's rotated order; per round the first loader's items/s and CPU per
item are divided by each other's, and the geometric mean of those ratios is given with a 95%
interval (two standard errors of the mean log ratio).

``thread-probe`` is ThreadDataLoader with its workers' task queues counting, at each ``get``
that finds the worker's own queue empty, whether another worker's queue held a task at that
moment, and how long the worker then waited: the time a pool whose threads share one queue could
have spent loading that task (torch's semantics do not allow it: batch k is worker k mod W's).
The counting costs a little Python per ``get``; compare its items/s with nothing.

    python benchmarks/threads_inprocess.py list thread,threadpool-bounded,threadpool-roundrobin 40
    python benchmarks/threads_inprocess.py list thread-probe 3

Loader names are ``bench_threads.py``'s (thread loaders only), plus ``thread-probe``.
"""

from __future__ import annotations

import gc
import json
import math
import queue
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import bench_threads as bt  # noqa: E402  (after the path set-up)

_EPOCH: dict[str, Any] = {}


class _CountingQueue(queue.SimpleQueue):
    """A worker's task queue that counts the waits of :mod:`thread-probe` (see the module doc)."""

    group: list[queue.SimpleQueue]

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self.qsize() > 0:
            return super().get(block, timeout)
        other_waiting = any(q.qsize() > 0 for q in self.group if q is not self)
        t0 = time.perf_counter()
        try:
            return super().get(block, timeout)
        finally:
            waited = time.perf_counter() - t0
            _EPOCH["empty"] += 1
            _EPOCH["empty_s"] += waited
            if other_waiting:
                _EPOCH["other"] += 1
                _EPOCH["other_s"] += waited


def _probe_on() -> None:
    from memprobe.loaders.thread import worker

    built = worker.WorkerGroup.__post_init__

    def post_init(self: Any) -> None:
        built(self)
        counting = [_CountingQueue() for _ in self.tasks]
        for q in counting:
            q.group = counting  # type: ignore[attr-defined]
        self.tasks[:] = counting
        for k, thread in enumerate(self.threads):  # not started yet: give them the new queues
            args = list(thread._args)  # type: ignore[attr-defined]
            args[2] = counting[k]
            thread._args = tuple(args)  # type: ignore[attr-defined]

    worker.WorkerGroup.__post_init__ = post_init  # type: ignore[method-assign]


def _ratios(xs: list[float], ys: list[float]) -> str:
    rs = [x / y for x, y in zip(xs, ys, strict=True)]
    logs = [math.log(r) for r in rs]
    mean = statistics.fmean(logs)
    se = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("nan")
    return (
        f"median {statistics.median(rs):.3f} ({min(rs):.2f}-{max(rs):.2f}), geometric mean "
        f"{math.exp(mean):.3f} [95%: {math.exp(mean - 2 * se):.3f}-{math.exp(mean + 2 * se):.3f}], "
        f"above 1 in {sum(r > 1 for r in rs)} of {len(rs)}"
    )


def main() -> int:
    import torch

    workload, names, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
    out = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    torch.set_num_threads(1)
    w = bt.WORKLOADS[workload]
    import workloads

    ds = getattr(workloads, w.factory)(**w.kwargs)
    batches = bt._batches(len(ds), w.batch_size)
    if "thread-probe" in names:
        _probe_on()
    for name in names:
        bt._import_modules(name.replace("thread-probe", "thread"))
    gc.collect()
    gc.freeze()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}", flush=True)
    for rnd in range(rounds):
        for name in bt.round_order(names, rnd):
            _EPOCH.update(empty=0, empty_s=0.0, other=0, other_s=0.0)
            cpu0, t0 = time.process_time(), time.perf_counter()
            items = sum(
                bt._batch_len(b) for b in bt.build(name.replace("thread-probe", "thread"), ds, batches)
            )
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            runs[name].append(
                {"items_per_s": items / wall, "cpu_us_per_item": cpu / items * 1e6, "wall_s": wall, **_EPOCH}
            )
        cells = " ".join(f"{n}={runs[n][-1]['items_per_s']:,.0f}" for n in names)
        print(
            f"round {rnd + 1}: {cells} (load {' '.join(Path('/proc/loadavg').read_text().split()[:3])})",
            flush=True,
        )
    for name in names:
        ips = [r["items_per_s"] for r in runs[name]]
        cpu = [r["cpu_us_per_item"] for r in runs[name]]
        print(
            f"{name}: items/s {statistics.median(ips):,.0f} ({min(ips):,.0f}-{max(ips):,.0f}), "
            f"CPU µs per item {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
        )
    first = names[0]
    for name in names[1:]:
        for key in ("items_per_s", "cpu_us_per_item"):
            xs, ys = [r[key] for r in runs[first]], [r[key] for r in runs[name]]
            print(f"{first} ÷ {name}, {key}: {_ratios(xs, ys)}")
    for r in runs.get("thread-probe", []):
        print(
            f"thread-probe epoch of {r['wall_s']:.2f} s: a worker found its queue empty {r['empty']:.0f} times "
            f"and waited {r['empty_s']:.2f} s (both workers); the other worker's queue held a task in "
            f"{r['other']:.0f} of them, {r['other_s']:.2f} s"
        )
    if out:
        out.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
