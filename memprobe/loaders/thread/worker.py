"""The worker threads: their loop, fetchers, failures, and the group an iterator starts.

A worker thread takes ``(slot, index)`` tasks from its own queue, fetches and collates the batch
as torch's worker does (``__getitems__`` when the dataset has it), and puts ``(slot, worker,
result)`` on its result queue; an exception is sent as text (:class:`WorkerFailure`) and raised
again in the iterating thread, as torch does across processes.

The queues are ``queue.SimpleQueue`` (C, no Python-level condition) and, for ``in_order=True``,
one result queue per worker: the iterating thread waits on the queue of the worker that owns the
batch it must yield next, so it is woken only when that batch is there. Every wake-up of a thread
is a hand-off of the GIL, and with workers running Python the woken thread waits for it up to the
switch interval (5 ms) while the batch it would pass on, or the worker it would feed, waits too
(docs/perf/threads.md measures this).

What a thread cannot do as torch's worker processes do, and what is done about it:

* Global RNGs are per process. The threads share ``random``, ``numpy.random`` and ``torch``'s
  generators; a ``worker_init_fn`` that seeds them (torch's recipe for numpy) reseeds the one
  generator every worker draws from. When a ``worker_init_fn`` is given, the threads run it, wait
  until every worker has, and the iterator compares the global generators' state with the state
  before: if it changed, the first batch comes with a :class:`ThreadWorkerWarning` saying so.
* A worker that crashes the interpreter (a segmentation fault in native code) takes the whole
  process with it, where torch would raise "DataLoader worker ... exited unexpectedly" in the main
  process. Worker threads enable :mod:`faulthandler` (if the program has not), so such a crash at
  least prints every thread's Python stack, the worker's included, before the process dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import itertools
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from memprobe.core.vocabulary import THREAD_NAME_PREFIX, worker_thread_name
from memprobe.loaders.thread import collate, heap, info, replicas

__all__ = [
    "NATIVE_NAME_PREFIX",
    "WORKER_THREAD_PREFIX",
    "ThreadWorkerWarning",
    "WorkerFailure",
    "WorkerGroup",
]

WORKER_THREAD_PREFIX = "memprobe-thread-worker"
NATIVE_NAME_PREFIX = THREAD_NAME_PREFIX  # the OS thread name (/proc/PID/task/TID/comm), max 15 bytes

# Blocking queue gets wake up this often so stop requests, dead threads and
# KeyboardInterrupt are noticed promptly.
POLL_S = 0.1
# Upper bound on how long a normal shutdown waits for threads to finish the
# item they are loading (threads cannot be killed; they are daemons anyway).
JOIN_TIMEOUT_S = 5.0


class ThreadWorkerWarning(UserWarning):
    """A torch DataLoader behaviour that worker threads cannot give, met at run time."""


# -- errors raised in workers --------------------------------------------------------------------


class _KeyErrorMessage(str):
    # KeyError's str() is repr(arg); this keeps the traceback text readable.
    def __repr__(self) -> str:
        return str(self)


class WorkerFailure:
    """An exception caught in a worker, kept as type + formatted traceback.

    Only text is kept (not the exception object) so the worker's frames and the batch data they
    reference are freed immediately.
    """

    def __init__(self, worker_id: int) -> None:
        exc_type, exc, tb = sys.exc_info()
        self.exc_type = exc_type or RuntimeError
        self.where = f"in ThreadDataLoader worker thread {worker_id}"
        self.text = "".join(traceback.format_exception(exc_type, exc, tb))

    def reraise(self) -> NoReturn:
        msg: str = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.text}"
        if issubclass(self.exc_type, StopIteration):
            # Re-raised from __next__ it would silently end the epoch (cf. PEP 479).
            raise RuntimeError(msg)
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            exc = self.exc_type(msg)
        except Exception:  # noqa: BLE001  (a user exception type whose constructor takes no message)
            raise RuntimeError(msg) from None
        try:
            raise exc
        finally:
            # A local naming the exception would make a cycle (this frame -> exc -> traceback ->
            # this frame) that keeps the iterator, and so its threads, alive until the cyclic GC
            # runs; without it they stop as soon as the caller drops the exception.
            del exc


# -- fetching ------------------------------------------------------------------------------------


def _fetch_map(dataset: Any, index: Any, auto_collation: bool, collate_fn: Callable) -> Any:
    if not auto_collation:
        return collate_fn(dataset[index])
    getitems = getattr(dataset, "__getitems__", None)
    items = getitems(index) if getitems else [dataset[i] for i in index]
    return collate_fn(items)


class _IterableFetcher:
    """Batches one iterator over an IterableDataset; raises StopIteration at its end."""

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable, drop_last: bool) -> None:
        self._it = iter(dataset)
        self._auto = auto_collation
        self._collate = collate_fn
        self._drop_last = drop_last
        self._ended = False

    def __call__(self, index: Any) -> Any:
        if self._ended:
            raise StopIteration
        if not self._auto:
            return self._collate(next(self._it))
        items = list(itertools.islice(self._it, len(index)))
        if len(items) < len(index):
            self._ended = True
            if not items or self._drop_last:
                raise StopIteration
        return self._collate(items)


def make_fetcher(
    dataset: Any, iterable: bool, auto: bool, collate_fn: Callable, drop_last: bool
) -> Callable[[Any], Any]:
    """A callable from an index (batch) to a collated batch, as torch's fetchers."""
    if iterable:
        return _IterableFetcher(dataset, auto, collate_fn, drop_last)
    return lambda index: _fetch_map(dataset, index, auto, collate_fn)


def pin(data: Any) -> Any:
    """Copy tensors in ``data`` (nested containers too) to pinned memory, exactly as torch's
    pin-memory thread does (its helper keeps mapping and sequence types, namedtuples, and objects
    with their own ``pin_memory()``)."""
    # Only a loader with pin_memory=True needs it; torch's private module may move between releases.
    from torch.utils.data._utils.pin_memory import pin_memory

    return pin_memory(data)


# -- the worker thread ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resume:
    """Task: start a new epoch (persistent workers), with the epoch's shared seed for datapipes."""

    seed: int | None = None


EXHAUSTED = object()  # result marker: this worker's IterableDataset ended


@dataclass(frozen=True)
class WorkerContext:
    """Everything a worker thread needs; deliberately no reference to the iterator."""

    datasets: list[Any]  # worker k's own replica (replicas.worker_replica)
    iterable: bool
    auto_collation: bool
    collate_fn: Callable
    drop_last: bool
    pin: bool
    init_fn: Callable[[int], None] | None
    base_seed: int
    num_workers: int
    world_size: int = 1
    rank: int = 0

    def new_fetcher(self, worker_id: int) -> Callable:
        return make_fetcher(
            self.datasets[worker_id], self.iterable, self.auto_collation, self.collate_fn, self.drop_last
        )


class InitGate:
    """Holds every worker's first fetch until all workers ran ``worker_init_fn``, so that the
    change it finds in the global RNGs is worker_init_fn's and not a dataset's draws."""

    def __init__(self, workers: int, *, watch_rngs: bool) -> None:
        self._left = workers
        self._lock = threading.Lock()
        self._watch_rngs = watch_rngs
        self._watch: info.RngWatch | None = None
        self.rng_changed: list[str] = []
        self.open = threading.Event()
        if not watch_rngs:
            self.open.set()

    def begin(self) -> None:
        """Take the global RNGs' state: call right before the worker threads start."""
        if self._watch_rngs:
            self._watch = info.RngWatch()

    def arrive(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0 and not self.open.is_set():
                self.rng_changed = self._watch.changed() if self._watch else []
                self.open.set()

    def wait(self, stop: threading.Event) -> None:
        while not self.open.wait(POLL_S) and not stop.is_set():
            pass


def _start_worker(ctx: WorkerContext, worker_id: int, gate: InitGate) -> Callable | WorkerFailure:
    """Shard a datapipe, run worker_init_fn, build the fetcher (in torch's order); a failure is
    reported per task, like torch."""
    try:
        instances = ctx.num_workers * ctx.world_size
        replicas.sharded(ctx.datasets[worker_id], instances, worker_id * ctx.world_size + ctx.rank)
        if ctx.init_fn is not None:
            ctx.init_fn(worker_id)
        return ctx.new_fetcher(worker_id)
    except Exception:  # noqa: BLE001  (user code: re-raised in the main thread, as torch's workers do)
        return WorkerFailure(worker_id)
    finally:
        gate.arrive()


def _run_task(ctx: WorkerContext, fetcher: Callable | WorkerFailure, worker_id: int, index: Any) -> Any:
    if isinstance(fetcher, WorkerFailure):
        return fetcher
    try:
        data = fetcher(index)
        return pin(data) if ctx.pin else data
    except StopIteration:
        if ctx.iterable:
            return EXHAUSTED
        return WorkerFailure(worker_id)
    except Exception:  # noqa: BLE001  (user code: re-raised in the main thread, as torch's workers do)
        return WorkerFailure(worker_id)


def _name_native_thread(name: str) -> None:
    """Name the OS thread so that a profiler reading /proc (memprobe's sampler, top -H, py-spy)
    can tell worker threads apart; Python < 3.14 does not do this for ``threading.Thread``."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME names the calling thread
    except (OSError, AttributeError):
        pass


def _worker_loop(
    ctx: WorkerContext,
    worker_id: int,
    tasks: queue.SimpleQueue,
    results: queue.SimpleQueue,
    stop: threading.Event,
    gate: InitGate,
) -> None:
    """Body of worker thread ``worker_id``: fetch index batches until told to stop."""
    _name_native_thread(worker_thread_name(worker_id))
    dataset = ctx.datasets[worker_id]
    info.set_worker_info(info.make_worker_info(worker_id, ctx.num_workers, ctx.base_seed, dataset))
    try:
        fetcher = _start_worker(ctx, worker_id, gate)
        gate.wait(stop)
        exhausted = False
        while not stop.is_set():
            try:
                task = tasks.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if task is None:
                break
            if isinstance(task, Resume):
                replicas.reseeded(dataset, task.seed)
                fetcher, exhausted = _restart_fetcher(ctx, fetcher, worker_id), False
                results.put((None, worker_id, task))
                continue
            if exhausted:
                continue  # the consumer already skips slots of an ended worker
            idx, index = task
            payload = _run_task(ctx, fetcher, worker_id, index)
            exhausted = payload is EXHAUSTED
            results.put((idx, worker_id, payload))
            del payload, task, index  # don't pin the last batch in memory while idle
    finally:
        info.set_worker_info(None)


def _restart_fetcher(
    ctx: WorkerContext, old: Callable | WorkerFailure, worker_id: int
) -> Callable | WorkerFailure:
    if isinstance(old, WorkerFailure):
        return old  # worker_init_fn failed: keep reporting it
    try:
        return ctx.new_fetcher(worker_id)
    except Exception:  # noqa: BLE001  (user code: re-raised in the main thread, as torch's workers do)
        return WorkerFailure(worker_id)


def _enable_faulthandler() -> None:
    """Dump every thread's stack on a fatal signal (see the module doc), unless already on."""
    if faulthandler.is_enabled():
        return
    # No usable sys.stderr (e.g. replaced by an object without a file descriptor): no fault handler.
    with contextlib.suppress(RuntimeError, OSError, ValueError, AttributeError):
        faulthandler.enable(all_threads=True)


@dataclass
class WorkerGroup:
    """The threads and queues of one iterator, shut down by a weakref finalizer.

    ``results[k]`` is worker k's result queue: its own with ``per_worker_results`` (the iterator
    waits for one worker's batch), else one queue shared by all (it waits for any batch).
    """

    ctx: WorkerContext
    per_worker_results: bool = True
    tasks: list[queue.SimpleQueue] = field(default_factory=list)
    results: list[queue.SimpleQueue] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    gate: InitGate = field(init=False)

    def __post_init__(self) -> None:
        self.gate = InitGate(self.ctx.num_workers, watch_rngs=self.ctx.init_fn is not None)
        shared: queue.SimpleQueue = queue.SimpleQueue()
        for k in range(self.ctx.num_workers):
            self.tasks.append(queue.SimpleQueue())
            self.results.append(queue.SimpleQueue() if self.per_worker_results else shared)
            thread = threading.Thread(
                target=_worker_loop,
                args=(self.ctx, k, self.tasks[k], self.results[k], self.stop_event, self.gate),
                name=f"{WORKER_THREAD_PREFIX}-{k}",
                daemon=True,  # a thread stuck in user code must not block interpreter exit
            )
            self.threads.append(thread)

    def start(self) -> None:
        collate.install()
        heap.prime()
        _enable_faulthandler()
        self.gate.begin()
        for thread in self.threads:
            thread.start()

    def signal_stop(self) -> None:
        self.stop_event.set()
        for q in self.tasks:
            q.put(None)  # wakes a blocked get() immediately

    def stop(self) -> None:
        """Signal and join (bounded); safe to call from a worker thread itself."""
        self.signal_stop()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        me = threading.current_thread()
        for thread in self.threads:
            if thread is not me and thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    def dead_workers(self) -> list[int]:
        return [k for k, t in enumerate(self.threads) if t.ident is not None and not t.is_alive()]
