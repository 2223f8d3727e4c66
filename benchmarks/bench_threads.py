"""A race of thread loaders (and torch's process workers) on the same work, interleaved.

Loaders, 2 workers each, all given the same index batches (a fixed shuffled order), prefetching
2 batches per worker where they can:

* ``thread``       memprobe's ThreadDataLoader;
* ``thread-before`` ThreadDataLoader as it was before issue 12: each batch stacked into a new
                   shared-memory file (torch's default_collate does that in any thread that
                   get_worker_info() says is a worker) and glibc's heap thresholds left alone
                   (``keep_freed_memory(False)``): the fix, measured;
* ``thread-unprimed`` ThreadDataLoader with glibc's heap thresholds left alone
                   (``keep_freed_memory(False)``), batches in ordinary memory: the priming alone;
* ``threadpool``   ``concurrent.futures.ThreadPoolExecutor(2).map`` over the batches, each task
                   ``default_collate([ds[i] for i in batch])`` (ten lines a user could write); it
                   submits every batch at once: no bound on the batches loaded ahead;
* ``threadpool-primed`` the same pool, glibc's heap primed first as ThreadDataLoader primes it
                   (``memprobe.loaders.thread.heap.prime``): the priming alone, on the pool;
* ``threadpool-bounded`` the same pool and task, with at most 2 batches per worker submitted and not
                   yet returned (torch's ``prefetch_factor`` bound, which ThreadDataLoader keeps): the
                   cost of that bound, measured on the plain pool;
* ``threadpool-roundrobin`` the bounded pool, but batch k pinned to thread k mod 2, each thread
                   with its own task queue (two one-thread pools): torch's static assignment of
                   batches to workers, which ThreadDataLoader keeps, measured on the plain pool;
* ``thread-unbounded`` ThreadDataLoader with ``prefetch_factor`` = the number of batches (no bound):
                   the same cost, measured on ThreadDataLoader;
* ``torchdata``    torchdata.nodes ``ParallelMapper(method="thread")`` over the batches (the same
                   task per batch) + ``Prefetcher``;
* ``torchdata-items`` memprobe's ``torchdata-thread`` mode (ParallelMapper per item, Batcher,
                   collate thread, Prefetcher; ``memprobe/loaders/extra.py``);
* ``fork``, ``spawn`` torch's DataLoader with process workers;
* ``fork-malloc``  (pillow only) fork, with glibc told in each worker to keep freed memory
                   (``mallopt`` in ``worker_init_fn``): what the process workers' page-fault churn
                   costs, measured.

Workloads (``scenarios/workloads.py``):

* ``pillow``  decode a 640x408 JPEG (64 distinct real photographs), resize (short side 256),
              centre-crop 224, to a uint8 tensor; batch 64; CPU-heavy, the GIL released in Pillow;
* ``list``    memprobe's list-of-dicts records with a cheap per-item transform; batch 256;
* ``arrow``   the same records in a pyarrow table, read one row at a time; batch 256;
* ``numpy``   the same records as numpy columns, each item built at its read; batch 256.

Two more axes, for the free-threaded comparison (issue 29): ``--workers 1,2`` runs every loader
at each worker count (the report adds each loader's scaling efficiency, items/s at N ÷ (N x
items/s at 1), round by round), and ``--python LABEL=PATH[:LOADERS]`` (repeatable) runs the
children under other interpreters (e.g. ``gil=.venv/bin/python`` and
``ft=/work/pythons/3.13t/venv/bin/python``, ``tools/build_python.sh 3.13t``), every interpreter's runs
interleaved in the same rounds, optionally only the listed loaders; the report adds each
interpreter's items/s over the first one's, round by round. ``--scale 0.5`` halves every
workload's length.

Every run is a fresh process (``--child``), with ``torch.set_num_threads(1)`` as the issue's
measurement had it. The parent samples the run's whole process tree from /proc (memprobe's own
readers): total PSS every 0.2 s (peak reported), and CPU time, kernel CPU time and minor page
faults of every process at two milestones: after the dataset is built, the loader's modules
imported and the dataset collected (``gc.collect()``), and after the last batch. items/s, CPU ms per item and faults per item are
taken between them: one whole epoch, from building the loader (its threads or processes start
inside the window) to its last batch, every item counted, with no pause inside the window. (Before
2026-11-25 the window opened at the first batch, after a pause for the parent's reading: a loader
that worked ahead during set-up or the pause, or whose start tipped the collector's first full pass
over the dataset out of the window, was favoured; ``docs/perf/threads.md``.) The time to the first
batch is reported too.
Rounds: every loader once per workload per round, the order rotated every round and reversed on
odd rounds; per round, ``thread`` is compared with the best other thread loader of that round.

    python benchmarks/bench_threads.py [--rounds 5] [--workloads pillow,list,arrow,numpy]
                                       [--loaders thread,threadpool,...] [--out DIR]
                                       [--workers 1,2] [--python LABEL=PATH[:LOADERS] ...]
                                       [--scale 0.5]
    python benchmarks/bench_threads.py --report-only --out DIR

Results (``results.json``, ``results.md``) go to ``--out``. About 10-15 minutes for 5 rounds
of everything on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# memprobe from this checkout; workloads (scenarios/workloads.py) by name
sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "scenarios")]

WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))  # a child's: the parent sets it per run
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
THREAD_LOADERS = (
    "thread",
    "thread-before",
    "thread-unbounded",
    "thread-unprimed",
    "threadpool",
    "threadpool-primed",
    "threadpool-bounded",
    "threadpool-roundrobin",
    "torchdata",
    "torchdata-items",
)
PROCESS_LOADERS = ("fork", "spawn", "fork-malloc")
LOADERS = THREAD_LOADERS + PROCESS_LOADERS
#: Loaders that only mean something on some workloads.
ONLY_ON = {"fork-malloc": ("pillow",)}
#: The other thread loaders a user could pick instead of ThreadDataLoader.
RIVALS = ("threadpool", "torchdata", "torchdata-items")
#: Variants that measure one cause (a bound, a fix): compared with thread, never its target.
PROBES = (
    "threadpool-bounded",
    "threadpool-roundrobin",
    "threadpool-primed",
    "thread-unbounded",
    "thread-unprimed",
    "thread-before",
)
#: Issue 12's targets: thread's items/s over the best other thread loader's, per workload.
TARGETS = {"pillow": 1.0, "arrow": 1.0, "list": 0.95}
MARK = "@bench "
#: Modules only some loaders' builders import (see _import_modules).
IMPORTS = {
    "torchdata": ("torchdata.nodes",),
    "torchdata-items": ("torchdata.nodes", "memprobe.loaders.extra"),
    "threadpool": ("concurrent.futures",),
    "threadpool-primed": ("concurrent.futures",),
    "threadpool-bounded": ("concurrent.futures",),
    "threadpool-roundrobin": ("concurrent.futures",),
}


@dataclass(frozen=True)
class Workload:
    factory: str
    kwargs: dict
    batch_size: int


WORKLOADS = {
    "pillow": Workload("pillow_decode_resize", {"images": 64, "length": 1536}, 64),
    "list": Workload("list_records", {"records": 200_000}, 256),
    "arrow": Workload("arrow_records", {"records": 200_000}, 256),
    "numpy": Workload("numpy_records", {"records": 200_000}, 256),
}


# -- the run's own process ------------------------------------------------------------------------


def _batches(n: int, batch_size: int) -> list[list[int]]:
    import torch
    from torch.utils.data import BatchSampler, RandomSampler

    sampler = RandomSampler(range(n), generator=torch.Generator().manual_seed(0))
    return list(BatchSampler(sampler, batch_size, drop_last=False))


def _shared_memory_collate(batch: list) -> Any:
    """default_collate, but every tensor batch stacked into a new shared-memory file: what torch's
    collate does in a worker (and what ThreadDataLoader's threads got before issue 12)."""
    import torch
    from torch.utils.data._utils.collate import collate, default_collate_fn_map

    def stack_shared(items: list, *, collate_fn_map: Any = None) -> Any:
        elem = items[0]
        storage = elem._typed_storage()._new_shared(sum(x.numel() for x in items), device=elem.device)
        return torch.stack(items, 0, out=elem.new(storage).resize_(len(items), *elem.shape))

    return collate(batch, collate_fn_map={**default_collate_fn_map, torch.Tensor: stack_shared})


def _thread_before(ds: Any, batches: list[list[int]]) -> Iterable:
    return _thread_unprimed(ds, batches, _shared_memory_collate)


def _thread_unprimed(ds: Any, batches: list[list[int]], collate: Callable | None) -> Iterable:
    from memprobe.loaders.thread import ThreadDataLoader, keep_freed_memory

    keep_freed_memory(False)  # a fresh process: nothing primed yet
    return ThreadDataLoader(ds, batch_sampler=batches, num_workers=WORKERS, collate_fn=collate)


def _threadpool_primed(ds: Any, batches: list[list[int]], collate: Callable | None) -> Iterable:
    from memprobe.loaders.thread import heap

    heap.prime()
    return _threadpool(ds, batches, collate)


def _keep_freed_memory(worker_id: int) -> None:
    """glibc keeps freed memory in this (worker) process instead of handing it back to the kernel
    after every item: no heap trimming below 256 MB (M_TRIM_THRESHOLD), blocks up to 32 MB from the
    heap (M_MMAP_THRESHOLD, which also stops glibc moving that threshold by itself). The same as
    ``GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432``."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD


def _threadpool(ds: Any, batches: list[list[int]], collate: Callable | None = None) -> Iterable:
    from concurrent.futures import ThreadPoolExecutor

    from torch.utils.data import default_collate

    collate = collate or default_collate
    with ThreadPoolExecutor(WORKERS) as pool:
        yield from pool.map(lambda b: collate([ds[i] for i in b]), batches)


def _threadpool_bounded(ds: Any, batches: list[list[int]], collate: Callable | None = None) -> Iterable:
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    from torch.utils.data import default_collate

    collate = collate or default_collate

    def task(b: list[int]) -> Any:
        return collate([ds[i] for i in b])

    ahead = 2 * WORKERS
    with ThreadPoolExecutor(WORKERS) as pool:
        pending = deque(pool.submit(task, b) for b in batches[:ahead])
        for b in batches[ahead:]:
            batch = pending.popleft().result()
            pending.append(
                pool.submit(task, b)
            )  # as torch: the next batch goes out before this one is returned
            yield batch
        while pending:
            yield pending.popleft().result()


def _threadpool_roundrobin(ds: Any, batches: list[list[int]], collate: Callable | None = None) -> Iterable:
    """``_threadpool_bounded`` with batch k always loaded by thread k mod 2 (torch's assignment):
    a thread that finishes early cannot take the other's queued batch."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    from torch.utils.data import default_collate

    collate = collate or default_collate

    def task(b: list[int]) -> Any:
        return collate([ds[i] for i in b])

    ahead = 2 * WORKERS
    pools = [ThreadPoolExecutor(1) for _ in range(WORKERS)]
    try:
        pending = deque(pools[k % WORKERS].submit(task, b) for k, b in enumerate(batches[:ahead]))
        for k, b in enumerate(batches[ahead:], start=ahead):
            batch = pending.popleft().result()
            pending.append(pools[k % WORKERS].submit(task, b))
            yield batch
        while pending:
            yield pending.popleft().result()
    finally:
        for pool in pools:
            pool.shutdown()


def _torchdata(ds: Any, batches: list[list[int]], collate: Callable | None = None) -> Iterable:
    import torchdata.nodes as tn
    from torch.utils.data import default_collate

    collate = collate or default_collate
    mapped = tn.ParallelMapper(
        tn.IterableWrapper(batches),
        lambda b: collate([ds[i] for i in b]),
        num_workers=WORKERS,
        method="thread",
        in_order=True,
    )
    yield from tn.Loader(tn.Prefetcher(mapped, prefetch_factor=2 * WORKERS))


def _torchdata_items(ds: Any, batches: list[list[int]]) -> Iterable:
    from memprobe.loaders.extra import TorchdataThreadLoader

    # Its own sampler: the same shuffled order is not needed for a fair cost per item.
    with TorchdataThreadLoader(ds, num_workers=WORKERS, batch_size=len(batches[0]), shuffle=True) as loader:
        yield from loader


def build(name: str, ds: Any, batches: list[list[int]], collate: Callable | None = None) -> Iterable:
    """Loader ``name`` over ``batches``; ``collate`` (default: torch's ``default_collate``) is
    given to the thread loaders that take one (the others collate as they always do)."""
    from torch.utils.data import DataLoader

    from memprobe import ThreadDataLoader

    builders: dict[str, Callable[[], Iterable]] = {
        "thread": lambda: ThreadDataLoader(
            ds, batch_sampler=batches, num_workers=WORKERS, collate_fn=collate
        ),
        "thread-before": lambda: _thread_before(ds, batches),
        "thread-unbounded": lambda: ThreadDataLoader(
            ds,
            batch_sampler=batches,
            num_workers=WORKERS,
            prefetch_factor=max(2, len(batches)),
            collate_fn=collate,
        ),
        "thread-unprimed": lambda: _thread_unprimed(ds, batches, collate),
        "threadpool": lambda: _threadpool(ds, batches, collate),
        "threadpool-primed": lambda: _threadpool_primed(ds, batches, collate),
        "threadpool-bounded": lambda: _threadpool_bounded(ds, batches, collate),
        "threadpool-roundrobin": lambda: _threadpool_roundrobin(ds, batches, collate),
        "torchdata": lambda: _torchdata(ds, batches, collate),
        "torchdata-items": lambda: _torchdata_items(ds, batches),
        "fork": lambda: DataLoader(
            ds, batch_sampler=batches, num_workers=WORKERS, multiprocessing_context="fork"
        ),
        "spawn": lambda: DataLoader(
            ds, batch_sampler=batches, num_workers=WORKERS, multiprocessing_context="spawn"
        ),
        "fork-malloc": lambda: DataLoader(
            ds,
            batch_sampler=batches,
            num_workers=WORKERS,
            multiprocessing_context="fork",
            worker_init_fn=_keep_freed_memory,
        ),
    }
    return builders[name]()


def _say(event: str, **fields: Any) -> None:
    print(MARK + json.dumps({"event": event, **fields}), flush=True)
    sys.stdin.readline()  # the parent reads the tree's counters before we go on


def child(loader: str, workload: str) -> int:
    import gc

    import torch
    import workloads

    torch.set_num_threads(1)
    w = WORKLOADS[workload]
    kwargs = {k: int(v * SCALE) if k in ("records", "length") else v for k, v in w.kwargs.items()}
    ds = getattr(workloads, w.factory)(**kwargs)
    batches = _batches(len(ds), w.batch_size)
    _import_modules(loader)
    # The collector's first full pass over the objects just built (list: 200,000 dicts, ~0.14 s)
    # is the dataset's cost. Left to chance it falls where the loader's own allocations tip the
    # counts: before the first batch of a loader that allocates much at the start (the pool's
    # futures, torchdata's nodes), after it for ThreadDataLoader (docs/perf/threads.md, 2026-11-25).
    gc.collect()
    _say("start")
    # One window for every loader: the whole epoch, from building the loader to its last batch,
    # with no pause inside it (a loader that works ahead would work on while the others wait).
    t0 = time.perf_counter()
    it = iter(build(loader, ds, batches))
    items = _batch_len(next(it))
    first_s = time.perf_counter() - t0
    # Exactly the batches, without asking for one more: torch stops its workers when asked past
    # the end, and the parent reads their counters at "done".
    items += sum(_batch_len(next(it)) for _ in range(len(batches) - 1))
    elapsed = time.perf_counter() - t0
    _say("done", items=items, elapsed_s=elapsed, first_batch_s=first_s)
    for _ in it:  # let every loader end its epoch normally
        pass
    return 0


def _import_modules(loader: str) -> None:
    """Import what building ``loader`` imports, before the window: an import is not loading
    (memprobe's thread loader: ~24 ms, imported by ``build`` for every loader; torchdata.nodes:
    ~6 ms, for its loaders only)."""
    import importlib

    for name in ("memprobe.loaders.thread", "torch.utils.data", *IMPORTS.get(loader, ())):
        importlib.import_module(name)


def _batch_len(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    return len(batch)


# -- the parent: one run ----------------------------------------------------------------------------


def tree_counters(root: int) -> dict[int, tuple[float, float, int]]:
    """(CPU s, kernel CPU s, minor faults) of every process in ``root``'s tree."""
    from memprobe.probe import procfs

    out = {}
    for pid in procfs.process_tree(root):
        st = procfs.read_stat(pid)
        if st is not None:
            out[pid] = (st.cpu_s, st.sys_cpu_s, st.minflt)
    return out


class PssPeak(threading.Thread):
    """Total PSS of a process tree every ``interval`` seconds; keeps the peak."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True, name="bench-pss")
        self.root, self.interval, self.peak_mb = root, interval, 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        from memprobe.probe import procfs

        while not self.stop.wait(self.interval):
            samples = [procfs.read_pss(pid) for pid in procfs.process_tree(self.root)]
            self.peak_mb = max(self.peak_mb, sum(s.pss for s in samples if s) / procfs.MB)


def _event(proc: subprocess.Popen) -> dict:
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"run ended without an event (exit code {proc.wait()})")


def run_one(
    loader: str,
    workload: str,
    timeout_s: float,
    python: str | None = None,
    workers: int = 2,
    scale: float = 1,
) -> dict:
    cmd = [python or sys.executable, str(Path(__file__).resolve()), "--child", loader, workload]
    env = {**os.environ, "BENCH_WORKERS": str(workers), "BENCH_SCALE": str(scale)}
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(ROOT), env=env
    )
    watchdog = threading.Timer(timeout_s, proc.kill)
    watchdog.start()
    pss = PssPeak(proc.pid)
    pss.start()
    try:
        _event(proc)
        before = tree_counters(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()  # type: ignore[union-attr]
        done = _event(proc)
        after = tree_counters(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait()
    except (RuntimeError, OSError, ValueError) as exc:
        proc.kill()
        proc.wait()
        return {"loader": loader, "workload": workload, "status": "failed", "error": str(exc)}
    finally:
        watchdog.cancel()
        pss.stop.set()
        pss.join()
    return {
        "loader": loader,
        "workload": workload,
        "status": "ok",
        **_window(before, after, done),
        "pss_peak_mb": pss.peak_mb,
    }


def _window(before: dict, after: dict, done: dict) -> dict:
    items = done["items"]
    delta = [
        tuple(a - b for a, b in zip(after[pid], before.get(pid, (0.0, 0.0, 0)), strict=True)) for pid in after
    ]
    cpu, sys_cpu, faults = (sum(d[k] for d in delta) for k in range(3))
    return {
        "items": items,
        "items_per_s": items / done["elapsed_s"],
        "first_batch_ms": done["first_batch_s"] * 1e3,
        "cpu_ms_per_item": cpu / items * 1e3,
        "kernel_cpu_share": sys_cpu / cpu if cpu else None,
        "faults_per_item": faults / items,
        "processes": len(after),
    }


# -- the parent: rounds ------------------------------------------------------------------------------


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine() -> dict[str, Any]:
    import PIL
    import torch

    from memprobe.loaders.thread import gil_enabled

    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), "?"
    )
    try:
        import torchdata

        td = torchdata.__version__
    except ImportError:
        td = None
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchdata": td,
        "pillow": PIL.__version__,
        "glibc": platform.libc_ver()[1],
        "gil_enabled": gil_enabled(),
    }


def interpreter(path: str) -> dict[str, Any]:
    """The versions and GIL state of the interpreter at ``path`` (a child's)."""
    code = """if True:
        import importlib.metadata, json, platform, sys, PIL, torch
        try:
            td = importlib.metadata.version("torchdata")
        except importlib.metadata.PackageNotFoundError:
            td = None
        gil = getattr(sys, "_is_gil_enabled", lambda: True)()
        print(json.dumps({"python": platform.python_version(), "torch": torch.__version__,
                          "torchdata": td, "pillow": PIL.__version__, "gil_enabled": gil}))
    """
    out = subprocess.run([path, "-c", code], capture_output=True, text=True, check=True).stdout
    return {"path": path, **json.loads(out.splitlines()[-1])}


def round_order(loaders: list, rnd: int) -> list:
    k = rnd % len(loaders)
    order = loaders[k:] + loaders[:k]
    return order[::-1] if rnd % 2 else order


def run_rounds(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": machine(),
        "pythons": {label: interpreter(path) for label, (path, _) in args.python.items()},
        "command": " ".join(["python", *sys.argv]),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "loadavg_before": loadavg(),
        "runs": [],
    }
    t0 = time.monotonic()
    for rnd in range(args.rounds):
        for workload in args.workloads if rnd % 2 == 0 else args.workloads[::-1]:
            cells = [
                (label, n, w)
                for label, (_, loaders) in args.python.items()
                for n in loaders or args.loaders
                if workload in ONLY_ON.get(n, (workload,))
                for w in args.workers
            ]
            for label, loader, workers in round_order(cells, rnd):
                path = args.python[label][0]
                r = run_one(loader, workload, args.timeout, path, workers, args.scale)
                r.update(round=rnd, loadavg=loadavg(), python=label, workers=workers)
                results["runs"].append(r)
                rate = (
                    f"{r['items_per_s']:>9,.0f} items/s  {r['cpu_ms_per_item']:.3f} CPU ms/item  "
                    f"{r['faults_per_item']:6.1f} faults/item  {r['pss_peak_mb']:5.0f} MB"
                    if r["status"] == "ok"
                    else r["error"]
                )
                print(
                    f"round {rnd + 1}/{args.rounds} {label:4s} {workload:6s} {loader:16s} x{workers} {rate}  "
                    f"(load {r['loadavg']})",
                    flush=True,
                )
    results["loadavg_after"] = loadavg()
    results["wall_s"] = round(time.monotonic() - t0, 1)
    return results


# -- report ------------------------------------------------------------------------------------------


def _values(results: dict, workload: str, loader: str, key: str) -> list[float]:
    return [
        r[key]
        for r in results["runs"]
        if (r["workload"], r["loader"], r["status"]) == (workload, loader, "ok") and r.get(key) is not None
    ]


def _spread(xs: list[float], spec: str) -> str:
    if not xs:
        return "-"
    return f"{format(statistics.median(xs), spec)} ({format(min(xs), spec)}-{format(max(xs), spec)})"


def _per_round(results: dict, workload: str, key: str, rival: str) -> list[float]:
    """thread's figure over ``rival``'s, one ratio per round in which both ran."""
    out = []
    for rnd in sorted({r["round"] for r in results["runs"]}):
        cell = {
            r["loader"]: r[key]
            for r in results["runs"]
            if r["round"] == rnd and r["workload"] == workload and r["status"] == "ok"
        }
        if "thread" in cell and rival in cell:
            out.append(cell["thread"] / cell[rival])
    return out


def _best_rival(results: dict, workload: str) -> str | None:
    """The other thread loader with the highest median items/s on ``workload``."""
    medians = {
        name: statistics.median(xs)
        for name in RIVALS
        if (xs := _values(results, workload, name, "items_per_s"))
    }
    return max(medians, key=medians.get) if medians else None


def geometric_mean(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of ``ratios`` and its 95% interval (two standard errors of the mean log
    ratio); the interval is NaN for fewer than two ratios."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    se = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
    return math.exp(mean), math.exp(mean - 2 * se), math.exp(mean + 2 * se)


def target_verdict(ratios: list[float], target: float) -> str:
    """Whether per-round ratios meet ``target``: met when the 95% interval of their geometric mean
    lies at or above it, missed when it lies below, otherwise within the noise (the rounds cannot
    tell), with the side the mean falls on."""
    gm, lo, hi = geometric_mean(ratios)
    if lo >= target:
        return "met"
    if hi < target:
        return "missed"
    side = "at or above" if gm >= target else "below"
    return f"within the noise (mean {side} the target; the interval holds it)"


def _targets(results: dict) -> list[str]:
    """Issue 12's targets, thread against each other thread loader in turn: the target holds
    against the best other loader when it holds against every one. (Not against the fastest rival
    of each round: the larger of two equally fast loaders' noisy rounds is above both of them on
    average, by about half a round's spread, so that measure finds a loss in a tie.)"""
    rows = []
    for workload in dict.fromkeys(r["workload"] for r in results["runs"]):
        if workload not in TARGETS:
            continue
        target = TARGETS[workload]
        for rival in RIVALS:
            ratios = _per_round(results, workload, "items_per_s", rival)
            if not ratios:
                continue
            gm, lo, hi = geometric_mean(ratios)
            rows.append(
                f"| {workload} | {rival} | ≥ {target:.2f} | {_spread(ratios, '.2f')} | {gm:.3f} "
                f"[{lo:.3f}-{hi:.3f}] | {sum(r >= target for r in ratios)} of {len(ratios)} | "
                f"{target_verdict(ratios, target)} |"
            )
    if not rows:
        return []
    return [
        "### Targets: thread's items/s ÷ each other thread loader's, round by round",
        "",
        (
            "| workload | other loader | target | per round: median (min-max) | geometric mean [95%] | "
            "rounds at or above the target | verdict |"
        ),
        "|---|---|---:|---:|---:|---:|---|",
        *rows,
        "",
    ]


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    rounds = len({r["round"] for r in results["runs"]})
    lines = [
        (
            f"Machine: {m['cpu_model']}, {m['cores']} cores; kernel {m['kernel']}, glibc {m['glibc']}; "
            f"Python {m['python']} (GIL {'enabled' if m['gil_enabled'] else 'disabled'}), torch {m['torch']}, "
            f"torchdata {m['torchdata']}, Pillow {m['pillow']}."
        ),
        (
            f"Command: `{results['command']}` ({results['wall_s']:.0f} s, {rounds} rounds); load average "
            f"{results['loadavg_before']} before, {results['loadavg_after']} after."
        ),
        "",
    ]
    for label, p in results.get("pythons", {}).items():
        lines.append(
            f"* `{label}`: `{p['path']}`: Python {p['python']} (GIL "
            f"{'enabled' if p['gil_enabled'] else 'disabled'}), torch {p['torch']}, "
            f"torchdata {p['torchdata']}, Pillow {p['pillow']}"
        )
    variants = list(dict.fromkeys(_variant(r) for r in results["runs"]))
    for variant in variants:
        if len(variants) > 1:
            lines += [f"## `{variant[0]}`, {variant[1]} workers", ""]
        lines += _tables({**results, "runs": [r for r in results["runs"] if _variant(r) == variant]}, rounds)
    lines += _scaling(results) + _versus(results)
    failed = [r for r in results["runs"] if r["status"] != "ok"]
    if failed:
        lines += (
            ["Failed runs:", ""]
            + [
                f"* round {r['round'] + 1} {r.get('python', '')} {r['workload']} {r['loader']} "
                f"x{r.get('workers', 2)}: {r['error']}"
                for r in failed
            ]
            + [""]
        )
    return "\n".join(lines)


def _variant(r: dict) -> tuple[str, int]:
    """The interpreter's label and the worker count of a run (older results: this one, 2)."""
    return r.get("python", ""), r.get("workers", 2)


def _field(r: dict, name: str) -> Any:
    return dict(zip(("python", "workers"), _variant(r), strict=True)).get(name, r.get(name))


def _paired(results: dict, select: dict, side: str, a: Any, b: Any) -> tuple[list, list]:
    """Per round, among the ok runs whose fields are ``select``'s: run ``b``'s items/s and CPU per
    item over run ``a``'s, where the field ``side`` tells the two apart."""
    speed, cpu = [], []
    for rnd in sorted({r["round"] for r in results["runs"]}):
        cell = {
            _field(r, side): r
            for r in results["runs"]
            if r["round"] == rnd and r["status"] == "ok" and all(_field(r, k) == v for k, v in select.items())
        }
        if a in cell and b in cell:
            speed.append(cell[b]["items_per_s"] / cell[a]["items_per_s"])
            cpu.append(cell[b]["cpu_ms_per_item"] / cell[a]["cpu_ms_per_item"])
    return speed, cpu


def _scaling(results: dict) -> list[str]:
    """Each loader's scaling efficiency, round by round: items/s at the largest worker count ÷
    (that count x items/s at the smallest), and CPU per item at the largest ÷ at the smallest."""
    counts = sorted({_variant(r)[1] for r in results["runs"]})
    if len(counts) < 2:
        return []
    lo, hi = counts[0], counts[-1]
    rows = []
    for label in dict.fromkeys(_variant(r)[0] for r in results["runs"]):
        for workload in dict.fromkeys(r["workload"] for r in results["runs"]):
            for loader in LOADERS:
                speed, cpu = _paired(
                    results,
                    {"python": label, "workload": workload, "loader": loader},
                    "workers",
                    lo,
                    hi,
                )
                if speed:
                    eff = [x * lo / hi for x in speed]
                    rows.append(
                        f"| {label} | {workload} | {loader} | {_spread(eff, '.2f')} | {_spread(cpu, '.2f')} |"
                    )
    return [
        f"### Scaling efficiency, {lo} to {hi} workers: items/s at {hi} ÷ ({hi} x items/s at {lo}), per round",
        "",
        f"| interpreter | workload | loader | efficiency: median (min-max) | CPU per item at {hi} ÷ at {lo} |",
        "|---|---|---|---:|---:|",
        *rows,
        "",
    ]


def _versus(results: dict) -> list[str]:
    """Each other interpreter's items/s and CPU per item over the first one's, per round."""
    labels = list(results.get("pythons", {}))
    lines = []
    for other in labels[1:]:
        rows = []
        for workload in dict.fromkeys(r["workload"] for r in results["runs"]):
            for loader in LOADERS:
                for workers in sorted({_variant(r)[1] for r in results["runs"]}):
                    speed, cpu = _paired(
                        results,
                        {"workload": workload, "loader": loader, "workers": workers},
                        "python",
                        labels[0],
                        other,
                    )
                    if speed:
                        rows.append(
                            f"| {workload} | {loader} | {workers} | {_spread(speed, '.2f')} | {_spread(cpu, '.2f')} |"
                        )
        lines += [
            f"### `{other}` ÷ `{labels[0]}`, per round: median (min-max)",
            "",
            "| workload | loader | workers | items/s ratio | CPU per item ratio |",
            "|---|---|---:|---:|---:|",
            *rows,
            "",
        ]
    return lines


def _tables(results: dict, rounds: int) -> list[str]:
    """The tables of one interpreter at one worker count: each loader's figures, thread against
    the other thread loaders, the targets."""
    lines: list[str] = []
    for workload in dict.fromkeys(r["workload"] for r in results["runs"]):
        lines += [
            f"### {workload}: median (min-max) over {rounds} rounds",
            "",
            (
                "| loader | items/s | first batch (ms) | CPU ms per item | kernel share of CPU | "
                "minor faults per item | peak total PSS (MB) |"
            ),
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for loader in LOADERS:
            rate = _values(results, workload, loader, "items_per_s")
            if not rate:
                continue
            lines.append(
                f"| {loader} | {_spread(rate, ',.0f')} | "
                f"{_spread(_values(results, workload, loader, 'first_batch_ms'), ',.0f')} | "
                f"{_spread(_values(results, workload, loader, 'cpu_ms_per_item'), '.3f')} | "
                f"{_spread(_values(results, workload, loader, 'kernel_cpu_share'), '.0%')} | "
                f"{_spread(_values(results, workload, loader, 'faults_per_item'), ',.0f')} | "
                f"{_spread(_values(results, workload, loader, 'pss_peak_mb'), ',.0f')} |"
            )
        best = _best_rival(results, workload)
        lines += [
            "",
            (
                "thread ÷ each other thread loader, per round (median, min-max); items/s above 1 and CPU "
                "per item below 1 favour thread:"
            ),
            "",
            "| other loader | items/s ratio | CPU per item ratio |",
            "|---|---:|---:|",
        ]
        for rival in RIVALS + PROBES:
            speed = _per_round(results, workload, "items_per_s", rival)
            if speed:
                cpu = _per_round(results, workload, "cpu_ms_per_item", rival)
                name = f"**{rival}** (best median items/s)" if rival == best else rival
                lines.append(f"| {name} | {_spread(speed, '.2f')} | {_spread(cpu, '.2f')} |")
        lines.append("")
    return lines + _targets(results)


def _names(text: str, allowed: Iterable[str], flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise SystemExit(
            f"bench_threads.py: error: {flag}: got {', '.join(bad) or 'nothing'}; "
            f"allowed: {', '.join(allowed)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}"
    )
    ap.add_argument("--loaders", default=",".join(LOADERS), help=f"comma-separated: {', '.join(LOADERS)}")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run (default 300)")
    ap.add_argument(
        "--out", type=Path, default=None, help="results folder (default /tmp/bench-threads-<time>)"
    )
    ap.add_argument("--workers", default="2", help="comma-separated worker counts (default 2)")
    ap.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="LABEL=PATH[:LOADERS]",
        help="run the children under this interpreter (repeatable; default: this one), only LOADERS if given",
    )
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every workload's length (default 1)")
    ap.add_argument("--report-only", action="store_true", help="re-render results.md from --out/results.json")
    ap.add_argument("--child", nargs=2, metavar=("LOADER", "WORKLOAD"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(*args.child)
    args.workloads = _names(args.workloads, WORKLOADS, "--workloads")
    args.loaders = _names(args.loaders, LOADERS, "--loaders")
    args.workers = sorted({int(w) for w in args.workers.split(",")})
    pythons = {}
    for spec in args.python or [f"this={sys.executable}"]:
        label, _, rest = spec.partition("=")
        path, _, only = rest.partition(":")
        pythons[label] = (path, _names(only, LOADERS, "--python") if only else None)
    args.python = pythons
    args.out = args.out or Path("/tmp") / f"bench-threads-{datetime.now().strftime('%Y%m%dT%H%M%S')}"
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        results = json.loads((args.out / "results.json").read_text())
    else:
        results = run_rounds(args)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    text = report(results)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
