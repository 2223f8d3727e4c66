"""The child side of a run: build the dataset and loader, iterate, report progress.

Started by the supervisor (runner.py) as ``python -m memprobe.run.child`` in its own process group.
It reads its RunSpec as one JSON line on stdin and writes events as JSON lines to the file
descriptor named by ``MEMPROBE_EVENT_FD``. It never measures memory itself: the supervisor
samples it from /proc. It only counts items and batches.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from typing import Any, NoReturn

from memprobe.core.vocabulary import FORK, MAIN, gil_enabled, has_worker_processes
from memprobe.probe import procfs
from memprobe.run.scenario import RunSpec
from memprobe.run.supervised import end_escaped, end_with_supervisor

# The supervisor imports memprobe.run.supervised, not this module; what imports torch, numpy or a dataset's
# libraries is imported where a run needs it, so the supervisor stays free of them.

PROGRESS_EVERY_S = 0.1
DEAD_WORKER_WAIT_S = 5.0  # at most, for the exit status of a worker whose death broke a connection
# CPython 3.12+'s DeprecationWarning from os.fork() in a process with other threads, as
# multiprocessing's fork start method (torch's DataLoader) raises it.
FORK_WITH_THREADS = r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks"
FORK_WITH_THREADS_MODULE = r"multiprocessing\.popen_fork"


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


def build(spec: RunSpec) -> tuple[Any, dict]:
    """The run's dataset and facts about it worth recording (e.g. bytes per item, decoder)."""
    if spec.workload == "factory":
        from memprobe.run.factory import call_factory

        assert spec.factory is not None  # the scenario sets it for this workload
        dataset, info = (
            call_factory(spec.factory.factory, spec.factory.kwargs),
            {"factory": spec.factory.factory},
        )
    elif spec.workload == "decode":
        dataset, info = _decode_dataset(spec)
    else:
        from memprobe.datasets import build_dataset
        from memprobe.datasets.records import RecordSpec

        d = spec.dataset
        dataset = build_dataset(spec.backend, RecordSpec(records=d.records, floats=d.floats, seed=d.seed))
        info = {}
    fault = _parse_fault(spec.fault)
    if fault and fault[0] in ("raise", "hang"):
        dataset = FaultyDataset(dataset, *fault)
    return dataset, info


def _decode_dataset(spec: RunSpec) -> tuple[Any, dict]:
    from memprobe.core.errors import MemprobeError
    from memprobe.decode import DecodeDataset, check_mode_supported
    from memprobe.decode.images import cached_jpeg_table

    d = spec.decode
    assert d is not None  # the scenario sets it for this workload
    table = cached_jpeg_table(d.images, width=d.width, height=d.height, quality=d.quality, seed=d.seed)
    dataset = DecodeDataset(table, decoder=spec.backend, device=d.device)
    backend = dataset.decoder.backend
    mode = MAIN if spec.workers == 0 else spec.mode  # the decoders' name for loading in this process
    problem = check_mode_supported(spec.backend, backend, mode)
    if problem:
        raise MemprobeError(problem)
    return dataset, {
        "decoder_backend": backend,
        "bytes_per_item": dataset.total_bytes / len(dataset),
        "pixels_per_item": d.width * d.height,
    }


class _Counter:
    """Counts items and batches and tells the supervisor, throttled to ~10 events a second."""

    def __init__(self, spec: RunSpec, events: Events, acks: Iterator[str]) -> None:
        self.spec, self.events, self.acks = spec, events, acks
        self.items = self.batches = 0
        self._last_sent = 0.0

    def sync(self, event: str) -> None:
        """Send ``event`` and wait for the supervisor's PSS round (workers stay alive)."""
        self.events.send(event, items=self.items, batches=self.batches)
        next(self.acks, None)

    def add(self, batch: Any, epoch: int, index: int, *, final: bool) -> None:
        """Count batch number ``index`` (0-based) of ``epoch``."""
        self.items += _batch_items(batch)
        self.batches += 1
        if self.batches == 1:
            self.events.send("first_batch", items=self.items, batches=self.batches)
        if index + 1 == max(self.spec.workers, 1):
            # Round-robin: every worker has now delivered a batch, so each holds its dataset
            # (spawn/forkserver workers unpickle it first). The growth window starts here; a
            # new generation of workers (one per epoch unless persistent) gets its own start.
            if epoch == 0:
                self.sync("warm")
            elif recreates_workers(self.spec):
                self.sync("epoch_warm")
        now = time.monotonic()
        if final or now - self._last_sent >= PROGRESS_EVERY_S:
            self.events.send("progress", items=self.items, batches=self.batches, epoch=epoch)
            self._last_sent = now

    def budget_hit(self) -> bool:
        return self.spec.loader.items is not None and self.items >= self.spec.loader.items


def quiet_fork_with_threads() -> None:
    """A fork run forks the DataLoader's workers from a process with threads: ``import torch``
    starts one and ``import pyarrow`` another (seen on 3.11 and 3.13 alike), so CPython 3.12+
    warns at every worker's fork that the child may deadlock (torch's DataLoader warns so for every
    user of fork: pytorch/pytorch#138957). CPython's and torch's advice is another start method
    (forkserver, spawn), which memprobe's advice names; a fork run measures fork because the
    scenario chose it, so the warning, which says only that, is left out of the run's output
    (child.log), where it would come once per worker per epoch with PYTHONWARNINGS or -X dev set.
    Only this warning, only from multiprocessing's fork: a dataset's own warnings are untouched,
    and a worker that does deadlock ends at the run's timeout, named."""
    warnings.filterwarnings(
        "ignore", message=FORK_WITH_THREADS, category=DeprecationWarning, module=FORK_WITH_THREADS_MODULE
    )


def iterate(spec: RunSpec, dataset: Any, events: Events, acks: Iterator[str]) -> None:
    """Iterate the loader for the scenario's epochs (or item budget).

    The last batch is taken without asking for one more, so the workers are still alive when
    the supervisor takes its final PSS round; only then does the iterator shut them down.
    """
    from torch.utils.data import IterableDataset

    from memprobe.loaders import build_loader

    lo = spec.loader
    if spec.mode == FORK:
        quiet_fork_with_threads()
    # An iterable dataset has no indices to shuffle: torch refuses shuffle=True for one.
    shuffle = lo.shuffle and not isinstance(dataset, IterableDataset)
    loader = build_loader(
        dataset,
        mode=spec.mode,
        workers=spec.workers,
        batch_size=lo.batch_size,
        shuffle=shuffle,
        prefetch_factor=lo.prefetch_factor,
        persistent_workers=lo.persistent_workers,
        seed=spec.dataset.seed,
    )
    if lo.gc_freeze:
        gc.freeze()
    counter = _Counter(spec, events, acks)
    per_epoch = _length(loader)
    for epoch in range(lo.epochs):
        if _epoch(spec, loader, counter, epoch, per_epoch):
            return
    counter.sync("done")


def _epoch(spec: RunSpec, loader: Any, counter: _Counter, epoch: int, per_epoch: int | None) -> bool:
    """One epoch; True when the run is done (last batch of the last epoch, or budget reached)."""
    from memprobe.loaders import worker_pids

    fault = _parse_fault(spec.fault)
    counter.events.send("iter_start", epoch=epoch)
    it = iter(loader)
    keep_errors_reportable()
    _LIVE[:] = [it]
    # The GIL state as this process runs: an extension imported here (torch, the user's dataset)
    # can turn it back on in a free-threaded build; the supervisor imports none of them.
    gil = gil_enabled()
    counter.events.send("epoch_start", epoch=epoch, workers=worker_pids(it), gil_enabled=gil)
    last_epoch = epoch == spec.loader.epochs - 1
    b = 0
    while per_epoch is None or b < per_epoch:
        try:
            batch = next(it)
        except StopIteration:  # iterable datasets without a length end this way
            break
        epoch_last = per_epoch is not None and b == per_epoch - 1
        final = last_epoch and epoch_last
        counter.add(batch, epoch, b, final=final)
        del batch
        if fault and fault[0] == "kill" and counter.batches == fault[1]:
            kill_worker(it, worker_pids(it)[0])
        if final or counter.budget_hit():
            counter.sync("done")
            attribute_copies(spec, loader, it, counter.events)
            del it
            return True
        if epoch_last and recreates_workers(spec):
            # This generation's workers are still alive (the iterator shuts them down when
            # asked for one more batch): measure them once more before they go.
            counter.sync("epoch_end")
        b += 1
    del it
    return False


ATTRIBUTION_MAX_S = 120.0  # the object walk's bound in a run (memprobe.probe.object_map)
# Left of the run's timeout_s for the pages' reading, the join and the exit, and the walk's share
# of the rest: the run's deadline counts from its start, and a walk past it would turn a run that
# finished into a timeout.
ATTRIBUTION_MARGIN_S = 15.0
ATTRIBUTION_WALK_SHARE = 0.7
_STARTED = time.monotonic()  # near enough the supervisor's start of this run's clock


def attribute_copies(spec: RunSpec, loader: Any, it: Any, events: Events) -> None:
    """Which of the dataset's structures each forked worker copied (``sampling.attribute``), sent
    as the ``attribution`` event: after the last PSS round, the workers still alive. Their pages
    are read before the walk of the dataset, which writes to this process's pages. The walk is
    bounded by what the run's timeout leaves."""
    if not spec.sampling.attribute or spec.mode != FORK or spec.workers == 0:
        return
    from memprobe.loaders import worker_pids
    from memprobe.probe.attribution import attribute_workers

    left = spec.timeout_s - (time.monotonic() - _STARTED) - ATTRIBUTION_MARGIN_S
    if left < 1.0:
        events.send(
            "attribution", attribution={"error": f"no time left for it within timeout_s={spec.timeout_s:g}"}
        )
        return
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, FaultyDataset):
        dataset = dataset.inner
    bound = min(ATTRIBUTION_MAX_S, left * ATTRIBUTION_WALK_SHARE)
    try:
        result = attribute_workers(dataset, os.getpid(), worker_pids(it), max_seconds=bound)
    except Exception as exc:  # noqa: BLE001  (the run's figures stand without it: said in its place)
        result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    events.send("attribution", attribution=result)


def kill_worker(it: Any, pid: int) -> None:
    """SIGKILL a DataLoader worker (the ``kill@N`` fault) at a moment it holds no lock it shares with
    this process. torch's workers check the iterator's done event, a cross-process Event whose lock
    they share with the main process, in their loop; a worker killed inside that check leaves the
    lock taken, and the main process then hangs for good when it marks the worker gone (caught with
    py-spy: the main process in ``_mark_worker_as_unavailable`` -> ``Event.is_set``; 1 run in 25 hung
    so, ``benchmarks/kill_worker_hang_rate.py``). The worker is stopped first, and killed only while
    that lock is free; otherwise it runs on a moment and is stopped again."""
    event = getattr(it, "_workers_done_event", None)
    semlock = getattr(getattr(getattr(event, "_cond", None), "_lock", None), "_semlock", None)
    for _ in range(1000):
        os.kill(pid, signal.SIGSTOP)
        while (st := procfs.read_stat(pid)) is not None and st.state not in ("T", "t"):
            time.sleep(0.0005)
        if semlock is None or semlock._get_value() == 1:
            break
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.001)
    os.kill(pid, signal.SIGKILL)


def recreates_workers(spec: RunSpec) -> bool:
    """Whether each epoch starts new worker processes (torch's default, persistent_workers=False)."""
    return has_worker_processes(spec.mode, spec.workers) and not spec.loader.persistent_workers


def _length(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:  # an IterableDataset without __len__
        return None


_LIVE: list[Any] = []  # the current loader iterator, to name dead workers in an error


def _dead_workers() -> list[str]:
    """ "worker k (pid P) killed by SIGKILL" for each worker process that has ended badly."""
    out = []
    for k, proc in enumerate(getattr(_LIVE[0], "_workers", []) if _LIVE else []):
        try:
            code = proc.exitcode
        except Exception:  # noqa: BLE001  (reporting an error: a torn-down worker must not hide it)
            continue
        if code is not None and code < 0:
            out.append(f"worker {k} (pid {proc.pid}) killed by {signal.Signals(-code).name}")
        elif code:
            out.append(f"worker {k} (pid {proc.pid}) exited with code {code}")
    return out


TORCH_SIGCHLD_MODULE = "torch.utils.data._utils.signal_handling"  # where torch's handler is defined


class _TorchSigchldUnlessFailing:
    """torch's SIGCHLD handler, silent while this process handles an exception.

    torch's handler raises for a dead worker on every SIGCHLD, wherever the main thread is. A
    worker's death is sometimes seen first by the transport (a connection reset while its batch
    was handed over: 1 spawn kill in 25 here) and its SIGCHLD handled a moment later, inside the
    reporting of that error: the handler raised there, the report was lost and the run ended with
    exit code 1 and no reason (seen in CI: a spawn worker's kill, on a loaded machine). While an
    exception is handled (``except`` or ``finally`` on its way), this process already knows
    something went wrong and torch checks its workers in its own handlers: no second error is
    raised then."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def __call__(self, signum: int, frame: Any) -> None:
        if sys.exc_info()[1] is None:
            self.handler(signum, frame)


def keep_errors_reportable() -> None:
    """Wrap torch's SIGCHLD handler (installed once per process, by the first iterator with worker
    processes) in ``_TorchSigchldUnlessFailing``; any other handler, a dataset's, is left alone."""
    handler = signal.getsignal(signal.SIGCHLD)
    if getattr(handler, "__module__", None) == TORCH_SIGCHLD_MODULE:
        signal.signal(signal.SIGCHLD, _TorchSigchldUnlessFailing(handler))


def _report_error(events: Events, exc: BaseException) -> None:
    # No more SIGCHLD handling: a worker dying while the error is reported must not replace it.
    # RuntimeError: torch's own handler, if the error came before keep_errors_reportable wrapped it.
    with contextlib.suppress(ValueError, OSError, RuntimeError):
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    message = str(exc)
    time.sleep(0.05)  # let a killed worker's exit status be collected
    dead = _dead_workers()
    # A worker's death seen first by the transport (a connection reset while its batch was
    # handed over): its exit status comes once the kernel has run its exit, later on a loaded
    # machine than 0.05 s (seen: a forkserver worker's, at load 9 on 2 cores).
    deadline = time.monotonic() + DEAD_WORKER_WAIT_S
    while not dead and isinstance(exc, (ConnectionError, EOFError)) and time.monotonic() < deadline:
        time.sleep(0.05)
        dead = _dead_workers()
    if dead:
        message = f"{message} [{'; '.join(dead)}]"
    try:
        tb = traceback.format_exc()
    except BaseException:  # noqa: BLE001  (the error is sent without its traceback rather than lost)
        tb = None
    events.send("error", type=type(exc).__name__, message=message, traceback=tb)


def main() -> int:
    end_with_supervisor()
    events = Events(int(os.environ["MEMPROBE_EVENT_FD"]))
    lines = iter(sys.stdin.readline, "")
    spec = RunSpec.from_dict(json.loads(next(lines)))
    # User factories are imported by name: their directories come first, as in the caller.
    sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]
    events.send("started", pid=os.getpid())
    if spec.workload == "factory":
        from memprobe.run import factory

        # The supervisor names what of the user's code did not return, or ended this process.
        factory.tell_phases(lambda ref, phase: events.send("factory", ref=ref, phase=phase))
    try:
        t = time.monotonic()
        dataset, info = build(spec)
        events.send("dataset_built", seconds=time.monotonic() - t, length=_length(dataset), info=info)
        iterate(spec, dataset, events, lines)
    except BaseException as exc:  # noqa: BLE001  (reported to the supervisor with its original type and message)
        _report_error(events, exc)
        return 1
    finally:
        end_escaped()
    events.send("finished")
    return 0


def end(code: int) -> NoReturn:
    """Exit with ``code`` as the interpreter would, without its teardown: what a normal exit
    does that anyone can see is done here (the last loader iterator shut down, its workers
    joined; threads that are not daemons joined; the at-exit handlers run, a dataset's too;
    stdout and stderr flushed), then ``os._exit``. The teardown it skips frees every object
    and module one by one: 0.6-0.75 CPU-s with torch imported (measured: a run's process used
    that much after its "finished" event, whatever its dataset; a dataset of millions of Python
    objects took longer than 10 s, runner.EXIT_BUSY_S), and all of it after the run's last
    measurement."""
    _LIVE.clear()
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # the standard library's own step of an exit, the only way to take it
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    end(main())
