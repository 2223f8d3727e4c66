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
    python benchmarks/threads_inprocess.py null thread,threadpool,threadpool-roundrobin,torchdata 30 \\
        --batch-size 8 --collate identity

**The overhead probe** (workloads ``null``: item ``i`` is ``i``; ``null-tensor``: one shared
1-element tensor; ``--batch-size``, ``--batches`` per epoch, ``--collate default|identity``):
nothing to load, so each epoch measures what the loader itself costs per batch: wall and CPU µs
per batch (the whole process, and the iterating thread alone: ``time.thread_time``), CPU µs per
item, and voluntary context switches per batch (``getrusage``: every thread that blocks on a
queue or condition and is woken counts one, a measure of the hand-offs). Each is given as median
(IQR, min-max) over the rounds, and as the first loader's ratio to each other's, round by round.

Loader names are ``bench_threads.py``'s (thread loaders only), plus ``thread-probe`` and
``thread@REV``: ThreadDataLoader as of git revision REV (a copy of that package, imported beside
this checkout's), to race a change against the code before it.
"""

from __future__ import annotations

import argparse
import gc
import json
import queue
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "scenarios")]  # scenarios: workloads

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


def _ratio_line(rs: list[float]) -> str:
    gm, lo, hi = bt.geometric_mean(rs)
    return (
        f"median {statistics.median(rs):.3f} ({min(rs):.2f}-{max(rs):.2f}), geometric mean "
        f"{gm:.3f} [95%: {lo:.3f}-{hi:.3f}], above 1 in {sum(r > 1 for r in rs)} of {len(rs)}"
    )


def _ratios(xs: list[float], ys: list[float]) -> str:
    return _ratio_line([x / y for x, y in zip(xs, ys, strict=True)])


def _spread(xs: list[float], fmt: str) -> str:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{statistics.median(xs):{fmt}} (IQR {q[0]:{fmt}}-{q[2]:{fmt}}, {min(xs):{fmt}}-{max(xs):{fmt}})"


def _identity(batch: list) -> list:
    return batch


#: Per-epoch measures of the overhead probe, per batch: (key, label, format).
PER_BATCH = (
    ("wall_us_per_batch", "wall µs/batch", ".1f"),
    ("cpu_us_per_batch", "CPU µs/batch (process)", ".1f"),
    ("main_cpu_us_per_batch", "CPU µs/batch (iterating thread)", ".1f"),
    ("cpu_us_per_item", "CPU µs/item", ".2f"),
    ("vcsw_per_batch", "voluntary context switches/batch", ".2f"),
)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "workload", help=f"{', '.join(bt.WORKLOADS)}, or null / null-tensor (the overhead probe)"
    )
    parser.add_argument("loaders", help="comma-separated loader names; the first is compared with the others")
    parser.add_argument("rounds", type=int)
    parser.add_argument("out", nargs="?", type=Path, help="write every epoch's numbers here (JSON)")
    parser.add_argument("--batch-size", type=int, default=8, help="null workloads: items per batch (8)")
    parser.add_argument("--batches", type=int, default=2000, help="null workloads: batches per epoch (2000)")
    parser.add_argument(
        "--collate",
        choices=("default", "identity"),
        default="default",
        help="torch's default_collate or none",
    )
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (1)")
    return parser.parse_args(argv)


def _dataset(args: argparse.Namespace) -> tuple[Any, list[list[int]]]:
    import workloads

    if args.workload in ("null", "null-tensor"):
        ds = workloads.null_items(
            args.batch_size * args.batches, "int" if args.workload == "null" else "tensor"
        )
        return ds, bt._batches(len(ds), args.batch_size)
    w = bt.WORKLOADS[args.workload]
    ds = getattr(workloads, w.factory)(**w.kwargs)
    return ds, bt._batches(len(ds), w.batch_size)


_SNAPSHOTS: dict[str, Any] = {}


def _snapshot(rev: str) -> Any:
    """memprobe's thread loader package as of git revision ``rev``, importable beside this one
    (as ``_thread_at_<rev>``): ``thread@REV`` races the loader before a change against it after,
    in the same process."""
    if rev not in _SNAPSHOTS:
        import importlib
        import re
        import subprocess
        import tempfile

        pkg = "_thread_at_" + re.sub(r"\W", "_", rev)
        tmp = Path(tempfile.mkdtemp(prefix="memprobe-thread-snapshot-"))
        tar = subprocess.run(
            ["git", "-C", str(HERE.parent), "archive", rev, "memprobe/loaders/thread"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=tar, check=True)
        (tmp / "memprobe/loaders/thread").rename(tmp / pkg)
        for f in (tmp / pkg).glob("*.py"):
            f.write_text(f.read_text().replace("memprobe.loaders.thread", pkg))
        sys.path.insert(0, str(tmp))
        snapshot = importlib.import_module(pkg)
        # One worker-info thread-local for both copies: the collate hook in torch's table is
        # whichever copy installed it first, and it must see the other copy's workers as workers
        # (else their batches go to shared memory). So collate.py itself cannot be raced this way.
        from memprobe.loaders.thread import info

        importlib.import_module(pkg + ".info")._local = info._local
        _SNAPSHOTS[rev] = snapshot
    return _SNAPSHOTS[rev]


def _loader(name: str, ds: Any, batches: list[list[int]], collate: Any) -> Any:
    if "@" in name:
        kind, rev = name.split("@", 1)
        if kind != "thread":
            raise SystemExit(f"only thread@REV can name a revision, not {name}")
        return _snapshot(rev).ThreadDataLoader(
            ds, batch_sampler=batches, num_workers=bt.WORKERS, collate_fn=collate
        )
    return bt.build(name.replace("thread-probe", "thread"), ds, batches, collate)


def _epoch(name: str, ds: Any, batches: list[list[int]], collate: Any) -> dict[str, float]:
    _EPOCH.update(empty=0, empty_s=0.0, other=0, other_s=0.0)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0, main0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
    items = n = 0
    for b in _loader(name, ds, batches, collate):
        items += bt._batch_len(b)
        n += 1
    wall, cpu, main = time.perf_counter() - t0, time.process_time() - cpu0, time.thread_time() - main0
    vcsw = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - ru0.ru_nvcsw
    return {
        "items_per_s": items / wall,
        "cpu_us_per_item": cpu / items * 1e6,
        "wall_us_per_batch": wall / n * 1e6,
        "cpu_us_per_batch": cpu / n * 1e6,
        "main_cpu_us_per_batch": main / n * 1e6,
        "vcsw_per_batch": vcsw / n,
        "wall_s": wall,
        **_EPOCH,
    }


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    import torch

    args = _parse(sys.argv[1:] if argv is None else argv)
    names = args.loaders.split(",")
    torch.set_num_threads(1)
    ds, batches = _dataset(args)
    collate = _identity if args.collate == "identity" else None
    if "thread-probe" in names:
        _probe_on()
    for name in names:
        bt._import_modules(name.replace("thread-probe", "thread").split("@")[0])
        if "@" in name:
            _snapshot(name.split("@", 1)[1])
    gc.collect()
    gc.freeze()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    print(
        f"{args.workload}: {len(batches)} batches of {len(batches[0])}, collate {args.collate}; "
        f"load average {_loadavg()}",
        flush=True,
    )
    for rnd in range(-args.warmup, args.rounds):
        for name in bt.round_order(names, max(rnd, 0)):
            result = _epoch(name, ds, batches, collate)
            if rnd >= 0:
                runs[name].append(result)
        if rnd >= 0:
            cells = " ".join(f"{n}={runs[n][-1]['items_per_s']:,.0f}" for n in names)
            print(f"round {rnd + 1}: items/s {cells} (load {_loadavg()})", flush=True)
    print(f"load average at the end {_loadavg()}")
    for name in names:
        ips = [r["items_per_s"] for r in runs[name]]
        print(f"{name}: items/s {_spread(ips, ',.0f')}")
        for key, label, fmt in PER_BATCH:
            print(f"    {label}: {_spread([r[key] for r in runs[name]], fmt)}")
    first = names[0]
    for name in names[1:]:
        for key in ("items_per_s", "wall_us_per_batch", "cpu_us_per_batch", "main_cpu_us_per_batch"):
            xs, ys = [r[key] for r in runs[first]], [r[key] for r in runs[name]]
            print(f"{first} ÷ {name}, {key}: {_ratios(xs, ys)}")
    for r in runs.get("thread-probe", []):
        print(
            f"thread-probe epoch of {r['wall_s']:.2f} s: a worker found its queue empty {r['empty']:.0f} times "
            f"and waited {r['empty_s']:.2f} s (both workers); the other worker's queue held a task in "
            f"{r['other']:.0f} of them, {r['other_s']:.2f} s"
        )
    if args.out:
        args.out.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
