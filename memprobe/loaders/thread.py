"""Thread-based drop-in replacement for :class:`torch.utils.data.DataLoader`.

:class:`ThreadDataLoader` takes the same arguments as torch's DataLoader and
yields exactly the same batches in the same order (``in_order=True``), but its
workers are threads of the calling process instead of child processes. That
makes it the "threads" arm of memprobe's fork/spawn/forkserver/threads
comparison: no copy-on-write page duplication, no pickling, one address space.

Worker info and seeding
    Every worker thread gets a :class:`WorkerInfo` (torch's own class) in a
    thread-local, readable through :func:`get_worker_info` of this module and
    also through ``torch.utils.data.get_worker_info()``: when the first worker
    thread starts, torch's function object gets a thread-local lookup that
    falls back to torch's global, so it behaves exactly as before outside our
    threads (process-wide and permanent; see
    :func:`_patch_torch_get_worker_info`). Worker ``k``'s
    ``seed`` is ``base_seed + k`` where ``base_seed`` is drawn from the
    loader's ``generator`` (or torch's global RNG) exactly when torch draws it,
    so seeds and shuffled orders match torch's. Unlike torch's process
    workers, the threads do NOT reseed ``random``, ``numpy.random`` or
    ``torch``'s global RNGs: those are shared by every thread of the process,
    so reseeding them from N threads would race and would also clobber the
    caller's RNG state. For the same reason ``torch.initial_seed()`` in a
    worker is the process's seed, not ``base_seed + k``: a ``worker_init_fn``
    that seeds numpy/random from it (the recipe in torch's docs) reseeds the
    shared global RNGs with one value from every thread. Use
    ``get_worker_info().seed`` instead, or, on torch
    versions whose WorkerInfo has an ``rng`` field, the per-thread generators
    in ``get_worker_info().rng`` (``torch.random.thread_safe_generator()``
    returns the per-thread torch.Generator inside these workers). Those are
    seeded as torch seeds its workers: the ``random`` and ``torch`` ones draw
    what a process worker's reseeded globals draw, numpy's is ``default_rng``
    on the state torch gives ``np.random.seed`` (as torch's own thread
    workers do).
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
import queue
import random
import sys
import threading
import time
import traceback
import types
import warnings
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, NoReturn, TypeVar

import torch
import torch.utils.data._utils.worker as _torch_worker
from torch.utils.data import (
    BatchSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    default_collate,
    default_convert,
)

__all__ = [
    "WORKER_THREAD_PREFIX",
    "ThreadDataLoader",
    "WorkerInfo",
    "get_worker_info",
    "gil_enabled",
    "torch_native_thread_workers_available",
]

T = TypeVar("T")

WORKER_THREAD_PREFIX = "memprobe-thread-worker"
#: torch's own WorkerInfo, so code that type-checks it keeps working.
WorkerInfo = _torch_worker.WorkerInfo

# Blocking queue gets wake up this often so stop requests, dead threads and
# KeyboardInterrupt are noticed promptly.
_POLL_S = 0.1
# Upper bound on how long a normal shutdown waits for threads to finish the
# item they are loading (threads cannot be killed; they are daemons anyway).
_JOIN_TIMEOUT_S = 5.0


# --------------------------------------------------------------------------
# Environment helpers
# --------------------------------------------------------------------------


def gil_enabled() -> bool | None:
    """Return whether the GIL is active in this interpreter.

    Uses ``sys._is_gil_enabled()`` (Python 3.13+, meaningful on free-threaded
    builds). Where it does not exist the build is a standard one, which always
    has a GIL, so ``True`` is returned. ``None`` means the check itself failed.
    """
    probe = getattr(sys, "_is_gil_enabled", None)
    if probe is None:
        return True
    try:
        return bool(probe())
    except Exception:
        return None


def torch_native_thread_workers_available() -> bool:
    """Return True if the installed torch DataLoader takes ``worker_method``.

    Native thread workers exist only on torch's development branch; this
    inspects the signature rather than trusting a version number.
    """
    try:
        params = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    except (TypeError, ValueError):
        return False
    return "worker_method" in params


# --------------------------------------------------------------------------
# Per-thread worker info
# --------------------------------------------------------------------------

_local = threading.local()
_hook_lock = threading.Lock()
_hook_tried = False
_torch_tls: threading.local | None = None
# Name of the module global the patched torch function reads (see below).
_HOOK_GLOBAL = "_memprobe_thread_worker_info"


def get_worker_info() -> WorkerInfo | None:
    """Return the :class:`WorkerInfo` of the calling ThreadDataLoader worker.

    Inside a worker thread this is that thread's info (``id``, ``num_workers``,
    ``seed``, ``dataset`` -- the very same dataset object, threads share it).
    Anywhere else it defers to ``torch.utils.data.get_worker_info()``, so a
    dataset can call this one function under torch's process workers too; in
    the main thread both return ``None``.
    """
    info = getattr(_local, "info", None)
    return info if info is not None else _torch_worker.get_worker_info()


def _torch_get_worker_info_body():  # type: ignore[no-untyped-def]
    # Never called here: its code object replaces the body of torch's
    # get_worker_info and then runs with torch's module globals.
    info = getattr(_memprobe_thread_worker_info, "worker_info", None)  # noqa: F821
    return info if info is not None else _worker_info  # noqa: F821


def _patch_torch_get_worker_info() -> threading.local | None:
    """Give torch's get_worker_info a thread-local lookup; None if unsafe.

    torch (<= 2.13 release) keeps worker info in the process-global
    ``_worker_info``; setting it from threads would make every thread see the
    last writer. Rebinding ``torch.utils.data.get_worker_info`` would miss the
    aliases users already imported, so instead the *code* of the one function
    object is swapped: it first reads a thread-local (set only in our worker
    threads) and otherwise returns torch's global exactly as before, so torch's
    process workers and the main thread are unaffected. This mirrors what
    torch's development branch does natively.
    """
    fn = getattr(_torch_worker, "get_worker_info", None)
    if not isinstance(fn, types.FunctionType) or "_worker_info" not in vars(_torch_worker):
        return None
    existing = getattr(_torch_worker, _HOOK_GLOBAL, None)
    if isinstance(existing, threading.local) and _HOOK_GLOBAL in fn.__code__.co_names:
        return existing  # already patched (e.g. this module was reloaded)
    if fn.__code__.co_freevars or fn.__code__.co_argcount:
        return None  # not the simple zero-argument function we expect
    tls = threading.local()
    setattr(_torch_worker, _HOOK_GLOBAL, tls)
    names = {"co_name": fn.__code__.co_name}
    if sys.version_info >= (3, 11):
        names["co_qualname"] = fn.__code__.co_qualname
    fn.__code__ = _torch_get_worker_info_body.__code__.replace(**names)  # tracebacks keep torch's name
    return tls


def _torch_thread_local() -> threading.local | None:
    """Return the thread-local torch's get_worker_info consults, installing it once."""
    global _hook_tried, _torch_tls
    with _hook_lock:
        if not _hook_tried:
            native = getattr(_torch_worker, "_thread_local_worker_info", None)
            if isinstance(native, threading.local):
                _torch_tls = native  # torch already looks here first
            else:
                _torch_tls = _patch_torch_get_worker_info()
            _hook_tried = True
        return _torch_tls


def _set_worker_info(info: WorkerInfo | None) -> None:
    _local.info = info
    tls = _torch_thread_local()
    if tls is not None:
        tls.worker_info = info


def _forget_worker_info_after_fork() -> None:
    # A child forked from a worker thread must not think it is that worker.
    _local.info = None
    if _torch_tls is not None:
        _torch_tls.worker_info = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker_info_after_fork)


def _make_rng(base_seed: int, worker_id: int) -> Any:
    """Per-thread generators in torch's ``_RNG`` container, if torch has one."""
    try:
        from torch.utils.data._utils.worker import _RNG, _generate_state
    except ImportError:
        return None
    seed = base_seed + worker_id
    torch_gen = torch.Generator()
    torch_gen.manual_seed(seed)
    try:
        import numpy as np

        np_gen = np.random.default_rng(_generate_state(base_seed, worker_id))
    except ImportError:
        np_gen = None
    return _RNG(random.Random(seed), torch_gen, np_gen)


def _make_worker_info(worker_id: int, num_workers: int, base_seed: int, dataset: Any) -> WorkerInfo:
    fields = {"id": worker_id, "num_workers": num_workers, "seed": base_seed + worker_id, "dataset": dataset}
    rng = _make_rng(base_seed, worker_id)
    if rng is not None:  # torch versions with thread-aware WorkerInfo
        fields.update(rng=rng, worker_method="thread")
    return WorkerInfo(**fields)


# --------------------------------------------------------------------------
# Errors raised in workers
# --------------------------------------------------------------------------


class _KeyErrorMessage(str):
    # KeyError's str() is repr(arg); this keeps the traceback text readable.
    def __repr__(self) -> str:
        return str(self)


class _WorkerFailure:
    """An exception caught in a worker, kept as type + formatted traceback.

    Only text is kept (not the exception object) so the worker's frames and
    the batch data they reference are freed immediately.
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
        except Exception:
            raise RuntimeError(msg) from None
        try:
            raise exc
        finally:
            # A local naming the exception would make a cycle (this frame -> exc -> traceback ->
            # this frame) that keeps the iterator, and so its threads, alive until the cyclic GC
            # runs; without it they stop as soon as the caller drops the exception.
            del exc


# --------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------


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


def _make_fetcher(
    dataset: Any, iterable: bool, auto: bool, collate_fn: Callable, drop_last: bool
) -> Callable[[Any], Any]:
    if iterable:
        return _IterableFetcher(dataset, auto, collate_fn, drop_last)
    return lambda index: _fetch_map(dataset, index, auto, collate_fn)


def _pin(data: Any) -> Any:
    """Copy tensors in ``data`` (nested containers too) to pinned memory, exactly as torch's
    pin-memory thread does (its helper keeps mapping and sequence types, namedtuples, and objects
    with their own ``pin_memory()``)."""
    from torch.utils.data._utils.pin_memory import pin_memory

    return pin_memory(data)


# --------------------------------------------------------------------------
# Worker threads
# --------------------------------------------------------------------------


class _Resume:
    """Task marker: start a new epoch (persistent workers)."""


_RESUME = _Resume()
_EXHAUSTED = object()  # result marker: this worker's IterableDataset ended


@dataclass
class _WorkerContext:
    """Everything a worker thread needs; deliberately no reference to the iterator."""

    dataset: Any
    iterable: bool
    auto_collation: bool
    collate_fn: Callable
    drop_last: bool
    pin: bool
    init_fn: Callable[[int], None] | None
    base_seed: int
    num_workers: int

    def new_fetcher(self) -> Callable:
        return _make_fetcher(
            self.dataset, self.iterable, self.auto_collation, self.collate_fn, self.drop_last
        )


def _start_worker(ctx: _WorkerContext, worker_id: int) -> Callable | _WorkerFailure:
    """Run worker_init_fn and build the fetcher; a failure is reported per task, like torch."""
    try:
        if ctx.init_fn is not None:
            ctx.init_fn(worker_id)
        return ctx.new_fetcher()
    except Exception:
        return _WorkerFailure(worker_id)


def _run_task(ctx: _WorkerContext, fetcher: Callable | _WorkerFailure, worker_id: int, index: Any) -> Any:
    if isinstance(fetcher, _WorkerFailure):
        return fetcher
    try:
        data = fetcher(index)
        return _pin(data) if ctx.pin else data
    except StopIteration:
        if ctx.iterable:
            return _EXHAUSTED
        return _WorkerFailure(worker_id)
    except Exception:
        return _WorkerFailure(worker_id)


NATIVE_NAME_PREFIX = "mp-tworker-"  # the OS thread name (/proc/PID/task/TID/comm), max 15 bytes


def _name_native_thread(name: str) -> None:
    """Name the OS thread so that a profiler reading /proc (memprobe's sampler, top -H, py-spy)
    can tell worker threads apart; Python < 3.14 does not do this for ``threading.Thread``."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME names the calling thread
    except (OSError, AttributeError):
        pass


def _worker_loop(
    ctx: _WorkerContext, worker_id: int, tasks: queue.Queue, results: queue.Queue, stop: threading.Event
) -> None:
    """Body of worker thread ``worker_id``: fetch index batches until told to stop."""
    _name_native_thread(f"{NATIVE_NAME_PREFIX}{worker_id}")
    _set_worker_info(_make_worker_info(worker_id, ctx.num_workers, ctx.base_seed, ctx.dataset))
    try:
        fetcher = _start_worker(ctx, worker_id)
        exhausted = False
        while not stop.is_set():
            try:
                task = tasks.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if task is None:
                break
            if task is _RESUME:
                fetcher, exhausted = _restart_fetcher(ctx, fetcher, worker_id), False
                results.put((None, worker_id, _RESUME))
                continue
            if exhausted:
                continue  # the consumer already skips slots of an ended worker
            idx, index = task
            payload = _run_task(ctx, fetcher, worker_id, index)
            exhausted = payload is _EXHAUSTED
            results.put((idx, worker_id, payload))
            del payload, task, index  # don't pin the last batch in memory while idle
    finally:
        _set_worker_info(None)


def _restart_fetcher(
    ctx: _WorkerContext, old: Callable | _WorkerFailure, worker_id: int
) -> Callable | _WorkerFailure:
    if isinstance(old, _WorkerFailure):
        return old  # worker_init_fn failed: keep reporting it
    try:
        return ctx.new_fetcher()
    except Exception:
        return _WorkerFailure(worker_id)


@dataclass
class _WorkerGroup:
    """The threads and queues of one iterator, shut down by a weakref finalizer."""

    ctx: _WorkerContext
    tasks: list[queue.Queue] = field(default_factory=list)
    results: queue.Queue = field(default_factory=queue.Queue)
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        for k in range(self.ctx.num_workers):
            self.tasks.append(queue.Queue())
            thread = threading.Thread(
                target=_worker_loop,
                args=(self.ctx, k, self.tasks[k], self.results, self.stop_event),
                name=f"{WORKER_THREAD_PREFIX}-{k}",
                daemon=True,  # a thread stuck in user code must not block interpreter exit
            )
            self.threads.append(thread)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def signal_stop(self) -> None:
        self.stop_event.set()
        for q in self.tasks:
            q.put(None)  # wakes a blocked get() immediately

    def stop(self) -> None:
        """Signal and join (bounded); safe to call from a worker thread itself."""
        self.signal_stop()
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        me = threading.current_thread()
        for thread in self.threads:
            if thread is not me and thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    def dead_workers(self) -> list[int]:
        return [k for k, t in enumerate(self.threads) if t.ident is not None and not t.is_alive()]


# --------------------------------------------------------------------------
# Iterators
# --------------------------------------------------------------------------


def _draw_base_seed(generator: torch.Generator | None) -> int:
    # Same draw as torch's iterator, so the generator/global RNG stream
    # consumed (and hence any later shuffle) matches torch exactly.
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class _BaseIter:
    """State shared by the single-thread and the worker-thread iterators."""

    def __init__(self, loader: ThreadDataLoader) -> None:
        self._iterable = loader._is_iterable
        self._index_sampler = loader._index_sampler
        self._pin = loader._pin
        self._reset_counters(loader)

    def _reset_counters(self, loader: ThreadDataLoader) -> None:
        self._yielded = 0
        self._len_hint = loader._iterable_len_called
        self._len_warned = False

    def __iter__(self) -> _BaseIter:
        return self

    def __len__(self) -> int:
        return len(self._index_sampler)

    def _count(self) -> None:
        # Like torch: an IterableDataset that yields more batches than the
        # len() the user asked for is usually mis-sharded across workers.
        self._yielded += 1
        if self._len_hint is not None and self._yielded > self._len_hint and not self._len_warned:
            self._len_warned = True
            warnings.warn(
                f"ThreadDataLoader: len() was {self._len_hint} but {self._yielded} batches were yielded; "
                "is the IterableDataset sharded by get_worker_info()?",
                stacklevel=3,
            )


class _SingleThreadIter(_BaseIter):
    """num_workers=0: load in the calling thread, like torch."""

    def __init__(self, loader: ThreadDataLoader) -> None:
        super().__init__(loader)
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = _draw_base_seed(loader.generator)  # unused, but consumed like torch
        self._fetch = _make_fetcher(
            loader.dataset, self._iterable, loader._auto_collation, loader.collate_fn, loader.drop_last
        )

    def __next__(self) -> Any:
        data = self._fetch(next(self._sampler_iter))
        if self._pin:
            data = _pin(data)
        self._count()
        return data


class _ThreadPoolIter(_BaseIter):
    """num_workers>0: round-robin index batches to threads, reorder results."""

    def __init__(self, loader: ThreadDataLoader) -> None:
        super().__init__(loader)
        # torch calls iter(sampler) once here and again in _reset; a sampler
        # whose __iter__ draws random numbers eagerly sees the same calls.
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = _draw_base_seed(loader.generator)
        self._n = loader.num_workers
        self._max_tasks = loader.num_workers * loader.prefetch_factor
        self._in_order = loader.in_order
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self.closed = False
        ctx = _WorkerContext(
            loader.dataset, self._iterable, loader._auto_collation, loader.collate_fn,
            loader.drop_last, self._pin, loader.worker_init_fn, self._base_seed, self._n,
        )  # fmt: skip
        self._group = _WorkerGroup(ctx)
        self._finalizer = weakref.finalize(self, self._group.stop)
        self._reset(loader, first=True)
        # Threads start after the first index batches were drawn, so the
        # sampler's RNG draws cannot interleave with dataset code in threads.
        self._group.start()

    # -- epoch bookkeeping -------------------------------------------------

    def _reset(self, loader: ThreadDataLoader, first: bool = False) -> None:
        """Start an epoch: fresh sampler iterator, empty slots, full prefetch."""
        self._reset_counters(loader)
        self._sampler_iter = iter(self._index_sampler)
        self._send_idx = 0  # next slot to hand out
        self._rcvd_idx = 0  # next slot to yield when in order
        self._slots: dict[int, int] = {}  # slot -> worker, task sent but result not received
        self._ready: dict[int, Any] = {}  # slot -> result received ahead of its turn
        self._active = [True] * self._n
        self._cycle = itertools.cycle(range(self._n))
        if not first:
            self._resume_workers()
        for _ in range(self._max_tasks):
            self._dispatch()

    def _resume_workers(self) -> None:
        # Each worker acknowledges after finishing its stale tasks; queues are
        # FIFO so once all acks are in, nothing from the old epoch remains.
        for q in self._group.tasks:
            q.put(_RESUME)
        acks = 0
        while acks < self._n:
            idx, _, payload = self._get_result()
            if idx is None and payload is _RESUME:
                acks += 1

    # -- sending -------------------------------------------------------------

    def _dispatch(self) -> None:
        if len(self._slots) + len(self._ready) >= self._max_tasks:
            return
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        worker = self._pick_worker()
        if worker is None:
            return  # every worker's IterableDataset ended; index is a dummy
        self._group.tasks[worker].put((self._send_idx, index))
        self._slots[self._send_idx] = worker
        self._send_idx += 1

    def _pick_worker(self) -> int | None:
        active = [k for k in range(self._n) if self._active[k]]
        if not active:
            return None
        cap = self._max_tasks // len(active)
        for _ in range(self._n):
            k = next(self._cycle)
            if self._active[k] and (self._in_order or self._load(k) < cap):
                return k
        return min(active, key=self._load)  # out of order: least loaded, never drop

    def _load(self, worker: int) -> int:
        return sum(1 for w in self._slots.values() if w == worker)

    # -- receiving -----------------------------------------------------------

    def __next__(self) -> Any:
        if self.closed:
            raise StopIteration
        try:
            data = self._next_data()
        except KeyboardInterrupt:
            self.shutdown(wait=False)
            raise
        self._count()
        return data

    def _next_data(self) -> Any:
        while True:
            self._skip_empty_slots()
            if self._rcvd_idx >= self._send_idx:
                self._end_epoch()
                raise StopIteration
            if self._rcvd_idx in self._ready:
                return self._deliver(self._rcvd_idx, self._ready.pop(self._rcvd_idx))
            idx, worker, payload = self._get_result()
            if idx not in self._slots:
                continue  # late resume ack; nothing to deliver
            if payload is _EXHAUSTED:
                self._retire(worker)
                continue
            del self._slots[idx]
            if idx == self._rcvd_idx or not self._in_order:
                return self._deliver(idx, payload)
            self._ready[idx] = payload

    def _skip_empty_slots(self) -> None:
        # Slots already yielded out of order or owned by an ended worker.
        while self._rcvd_idx < self._send_idx and not (
            self._rcvd_idx in self._ready or self._rcvd_idx in self._slots
        ):
            self._rcvd_idx += 1

    def _retire(self, worker: int) -> None:
        """An IterableDataset shard ended: drop its slots, keep the pipeline full."""
        self._active[worker] = False
        # Results are FIFO per worker, so its remaining slots will never be filled.
        for idx in [i for i, w in self._slots.items() if w == worker]:
            del self._slots[idx]
        self._dispatch()

    def _deliver(self, idx: int, payload: Any) -> Any:
        if idx == self._rcvd_idx:
            self._rcvd_idx += 1
        self._dispatch()
        if isinstance(payload, _WorkerFailure):
            payload.reraise()
        return payload

    def _get_result(self) -> tuple[int | None, int, Any]:
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            wait = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - time.monotonic()))
            try:
                return self._group.results.get(timeout=wait)
            except queue.Empty:
                pass
            self._check_alive()
            if deadline is not None and time.monotonic() >= deadline:
                self.shutdown(wait=False)  # don't block on a stuck item
                raise RuntimeError(f"ThreadDataLoader timed out after {self._timeout} seconds")

    def _check_alive(self) -> None:
        dead = self._group.dead_workers()
        if dead:
            self.shutdown(wait=False)
            ids = ", ".join(str(k) for k in dead)
            raise RuntimeError(f"ThreadDataLoader worker thread(s) {ids} exited unexpectedly")

    # -- shutdown ------------------------------------------------------------

    def _end_epoch(self) -> None:
        if not self._persistent:
            self.shutdown()

    def shutdown(self, wait: bool = True) -> None:
        """Stop the worker threads; with ``wait`` join them (bounded).

        Without ``wait`` (timeout, KeyboardInterrupt) the threads are only told
        to stop and exit after the item they are loading; the finalizer is
        dropped so a later garbage collection does not block on them either.
        """
        self.closed = True
        if wait:
            self._finalizer()
        else:
            self._finalizer.detach()
            self._group.signal_stop()


# --------------------------------------------------------------------------
# Loader
# --------------------------------------------------------------------------


class _InfiniteNoneSampler(Sampler):
    """Endless ``None`` indices: IterableDatasets ignore the index (as in torch)."""

    def __init__(self) -> None:
        pass

    def __iter__(self) -> Iterator[None]:
        return itertools.repeat(None)

    def __len__(self) -> int:
        raise TypeError("Cannot determine the ThreadDataLoader length of an IterableDataset without __len__")


def _checked_prefetch(
    num_workers: int, timeout: float, prefetch_factor: int | None, persistent: bool
) -> int | None:
    """Validate worker arguments like torch; return the effective prefetch_factor."""
    if num_workers < 0:
        raise ValueError(
            "num_workers option should be non-negative; use num_workers=0 to load in the calling thread."
        )
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and timeout > 0:
        raise ValueError("timeout option needs num_workers > 0 (torch fails on it at iteration time)")
    if persistent and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if num_workers == 0:
        if prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified with worker threads; "
                "let num_workers > 0, otherwise set prefetch_factor to None."
            )
        return None
    if prefetch_factor is None:
        return 2
    if prefetch_factor < 1:
        raise ValueError("prefetch_factor option should be a positive integer when num_workers > 0")
    return prefetch_factor


def _checked_sampling(
    iterable: bool,
    shuffle: bool | None,
    sampler: Any,
    batch_sampler: Any,
    batch_size: int | None,
    drop_last: bool,
) -> tuple[bool, int | None, bool]:
    """Validate sampling arguments like torch; return (shuffle, batch_size, drop_last)."""
    if iterable:
        # Indices mean nothing to an IterableDataset, so torch refuses these.
        prefix = "ThreadDataLoader with IterableDataset: expected unspecified"
        if shuffle not in (False, None):
            raise ValueError(f"{prefix} shuffle option, but got shuffle={shuffle}")
        if sampler is not None:
            raise ValueError(f"{prefix} sampler option, but got sampler={sampler}")
        if batch_sampler is not None:
            raise ValueError(f"{prefix} batch_sampler option, but got batch_sampler={batch_sampler}")
    shuffle = bool(shuffle)
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
            )
        return shuffle, None, False
    if batch_size is None and drop_last:
        raise ValueError(
            "batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
        )
    return shuffle, batch_size, drop_last


class ThreadDataLoader(Generic[T]):
    """Drop-in for :class:`torch.utils.data.DataLoader` whose workers are threads.

    Arguments mean what they mean for torch's DataLoader (positions included).
    ``multiprocessing_context`` and ``pin_memory_device`` are accepted only so
    call sites can switch classes; both are ignored with a warning. Pinning
    happens only if ``torch.cuda.is_available()``. ``timeout`` needs
    ``num_workers > 0``. Datasets are shared, not copied, between threads.

    For the same dataset, sampler and generator state, iteration yields the
    same batches in the same order as torch (``in_order=True``), with
    ``num_workers`` 0 or more. ``persistent_workers=True`` keeps threads
    across epochs; they stop when the loader's iterator is garbage collected
    or :meth:`close` is called.
    """

    _FROZEN = frozenset(
        {"batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"}
    )

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler | Iterable | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        self._initialized = False
        prefetch = _checked_prefetch(num_workers, timeout, prefetch_factor, persistent_workers)
        self._is_iterable = isinstance(dataset, IterableDataset)
        shuffle, batch_size, drop_last = _checked_sampling(
            self._is_iterable, shuffle, sampler, batch_sampler, batch_size, drop_last
        )
        _warn_ignored(multiprocessing_context, pin_memory_device)
        if sampler is None:
            sampler = self._default_sampler(dataset, shuffle, generator)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.drop_last = drop_last
        self.generator = generator
        self.num_workers = num_workers
        self.prefetch_factor = prefetch
        self.collate_fn = collate_fn or (default_collate if batch_sampler is not None else default_convert)
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._pin = pin_memory and _cuda_available_for_pinning()
        self._iterable_len_called: int | None = None
        self._iterator: _ThreadPoolIter | None = None
        self._live: weakref.WeakSet[_ThreadPoolIter] = weakref.WeakSet()
        self._initialized = True

    def __setattr__(self, name: str, value: Any) -> None:
        # Like torch: changing these after construction would desync the samplers.
        if name in self._FROZEN and getattr(self, "_initialized", False):
            raise ValueError(f"{name} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(name, value)

    @staticmethod
    def _default_sampler(dataset: Any, shuffle: bool, generator: torch.Generator | None) -> Sampler:
        if isinstance(dataset, IterableDataset):
            return _InfiniteNoneSampler()
        if shuffle:
            return RandomSampler(dataset, generator=generator)
        return SequentialSampler(dataset)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers == 0:
            return _SingleThreadIter(self)
        if not self.persistent_workers:
            return self._new_pool_iter()
        if self._iterator is None or self._iterator.closed:
            self._iterator = self._new_pool_iter()
        else:
            self._iterator._reset(self)
        return self._iterator

    def _new_pool_iter(self) -> _ThreadPoolIter:
        it = _ThreadPoolIter(self)
        self._live.add(it)
        return it

    def __len__(self) -> int:
        if not self._is_iterable:
            return len(self._index_sampler)
        length = len(self.dataset)
        if self.batch_size is not None:
            length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
        self._iterable_len_called = length
        return length

    def close(self) -> None:
        """Stop and join the worker threads of every live iterator of this loader."""
        for it in list(self._live):
            it.shutdown()
        self._iterator = None

    def __enter__(self) -> ThreadDataLoader[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _warn_ignored(multiprocessing_context: Any, pin_memory_device: str) -> None:
    if multiprocessing_context is not None:
        warnings.warn("ThreadDataLoader ignores multiprocessing_context: workers are threads", stacklevel=3)
    if pin_memory_device:
        warnings.warn("ThreadDataLoader ignores pin_memory_device (deprecated in torch too)", stacklevel=3)


def _cuda_available_for_pinning() -> bool:
    """Whether pinning means anything here: an accelerator (CUDA, or any torch.accelerator on
    the torch versions that have it, as torch's DataLoader decides) is available."""
    accelerator = getattr(torch, "accelerator", None)
    available = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    if available:
        return True
    warnings.warn("'pin_memory' is set but no accelerator is available; pinned memory won't be used.", stacklevel=3)
    return False
