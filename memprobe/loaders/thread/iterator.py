"""The iterators a ThreadDataLoader returns: in the calling thread, or over worker threads.

Both draw from the loader's generator exactly what torch's iterators draw, in the same order: for
an ``IterDataPipe`` a shared seed first (and one more at every reset, as torch's multi-worker
iterator resets once on creation), then the workers' base seed; the sampler's iterator is created
between them, so a sampler that draws eagerly sees the same state as under torch.
"""

from __future__ import annotations

import itertools
import queue
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import IterDataPipe

from memprobe.loaders.thread import replicas
from memprobe.loaders.thread.worker import (
    EXHAUSTED,
    POLL_S,
    Resume,
    ThreadWorkerWarning,
    WorkerContext,
    WorkerFailure,
    WorkerGroup,
    make_fetcher,
    pin,
)

if TYPE_CHECKING:
    from memprobe.loaders.thread.loader import ThreadDataLoader

__all__ = ["SingleThreadIter", "ThreadPoolIter", "accelerator_available", "warn_pinning"]


def accelerator_available() -> bool:
    """Whether pinning means anything here: an accelerator (CUDA, or any torch.accelerator on
    the torch versions that have it, as torch's DataLoader decides) is available."""
    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def warn_pinning(loader: ThreadDataLoader) -> None:
    """torch's warnings about pinning, in its words and at its moment: each new iterator (a
    persistent one once), and only when ``pin_memory`` is set. Users silence them by message
    (``filterwarnings("ignore", message="'pin_memory' argument is set as true")``), so the
    wording is torch's; tests compare it with torch's own DataLoader."""
    if not loader.pin_memory:
        return
    if loader.pin_memory_device:
        warnings.warn(
            "pin_memory_device is deprecated, the current accelerator will be used as the device,"
            f"ignore pin_memory_device='{loader.pin_memory_device}'.",
            stacklevel=3,
        )
    if not accelerator_available():
        warnings.warn(
            "'pin_memory' argument is set as true but no accelerator is found, "
            "then device pinned memory won't be used.",
            stacklevel=3,
        )


def _draw_base_seed(generator: torch.Generator | None) -> int:
    # Same draw as torch's iterator, so the generator/global RNG stream
    # consumed (and hence any later shuffle) matches torch exactly.
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class _BaseIter(Iterator[Any]):
    """State shared by the single-thread and the worker-thread iterators."""

    def __init__(self, loader: ThreadDataLoader) -> None:
        self._dataset = loader.dataset
        self._datapipe = isinstance(self._dataset, IterDataPipe)
        self._dist_group: Any  # torch's process group for the shared seed, or None
        self._world_size, self._rank, self._dist_group = (
            replicas.distributed() if self._datapipe else (1, 0, None)
        )
        self._shared_seed: int | None = None
        self._new_shared_seed(loader)
        self._iterable = loader._is_iterable
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._pin = loader._pin
        warn_pinning(loader)
        self._reset_counters(loader)

    def _new_shared_seed(self, loader: ThreadDataLoader) -> None:
        """torch's shared seed for an IterDataPipe's random pipes; re-seeds the main copy."""
        if self._datapipe:
            self._shared_seed = replicas.shared_seed(loader.generator, self._dist_group)
            self._dataset = replicas.reseeded(self._dataset, self._shared_seed)

    def _reset_counters(self, loader: ThreadDataLoader) -> None:
        self._yielded = 0
        self._len_hint = loader._iterable_len_called

    def __iter__(self) -> _BaseIter:
        return self

    def __len__(self) -> int:
        return len(self._index_sampler)

    def _count(self) -> None:
        """torch's warning for an IterableDataset that yields more than the len() it reported:
        usually a dataset not split between workers. Raised for every extra batch, as torch does."""
        self._yielded += 1
        if not self._iterable or self._len_hint is None or self._yielded <= self._len_hint:
            return
        msg = (
            f"Length of IterableDataset {self._dataset} was reported to be {self._len_hint}"
            f"(when accessing len(dataloader)), but {self._yielded} samples have been fetched. "
        )
        if self._num_workers > 0:
            msg += (
                "For multiprocessing data-loading, this could be caused by not properly configuring the "
                "IterableDataset replica at each worker. Please see "
                "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
            )
        warnings.warn(msg, stacklevel=3)


class SingleThreadIter(_BaseIter):
    """num_workers=0: load in the calling thread, like torch."""

    def __init__(self, loader: ThreadDataLoader) -> None:
        super().__init__(loader)
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = _draw_base_seed(loader.generator)  # unused, but consumed like torch
        replicas.sharded(self._dataset, self._world_size, self._rank)
        self._fetch = make_fetcher(
            self._dataset, self._iterable, loader._auto_collation, loader.collate_fn, loader.drop_last
        )

    def __next__(self) -> Any:
        data = self._fetch(next(self._sampler_iter))
        if self._pin:
            data = pin(data)
        self._count()
        return data


class ThreadPoolIter(_BaseIter):
    """num_workers>0: round-robin index batches to threads, reorder results."""

    def __init__(self, loader: ThreadDataLoader) -> None:
        super().__init__(loader)
        # torch calls iter(sampler) once here and again in _reset; a sampler
        # whose __iter__ draws random numbers eagerly sees the same calls.
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = _draw_base_seed(loader.generator)
        self._n = loader.num_workers
        assert loader.prefetch_factor is not None  # set whenever there are worker threads
        self._max_tasks = loader.num_workers * loader.prefetch_factor
        self._in_order = loader.in_order
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self.closed = False
        self._rng_noticed = False
        ctx = WorkerContext(
            [replicas.worker_replica(self._dataset, self._shared_seed, stacklevel=4) for _ in range(self._n)],
            self._iterable,
            loader._auto_collation,
            loader.collate_fn,
            loader.drop_last,
            self._pin,
            loader.worker_init_fn,
            self._base_seed,
            self._n,
            self._world_size,
            self._rank,
        )
        self._group = WorkerGroup(ctx, per_worker_results=self._in_order)
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
        self._new_shared_seed(loader)
        self._send_idx = 0  # next slot to hand out
        self._rcvd_idx = 0  # next slot to yield when in order
        self._slots: dict[int, int] = {}  # slot -> worker, task sent but result not received
        self._ready: dict[int, Any] = {}  # slot -> result received ahead of its turn
        self._active = [True] * self._n
        self._all_active = True  # no worker's IterableDataset ended: the next worker is the cycle's
        self._cycle = itertools.cycle(range(self._n))
        if not first:
            self._resume_workers()
        for _ in range(self._max_tasks):
            self._dispatch()

    def _resume_workers(self) -> None:
        # Each worker acknowledges after finishing its stale tasks; queues are
        # FIFO so once all acks are in, nothing from the old epoch remains.
        for q in self._group.tasks:
            q.put(Resume(self._shared_seed))
        for results in self._group.results:  # n acks in all, whether the queues are shared or not
            while True:
                idx, _, payload = self._get_result(results)
                if idx is None and isinstance(payload, Resume):
                    break

    # -- sending -------------------------------------------------------------

    def _dispatch(self) -> None:
        # Indices are drawn here, in the iterating thread, prefetch_factor * W at the start and one
        # per batch returned, as torch draws them: a sampler drawing lazily from a generator the
        # program also uses sees the same calls, and no more batches are loaded ahead. Workers
        # drawing their own would spare this hand-out but not the wait for batch k to be returned
        # before batch k + prefetch_factor * W starts (docs/perf/threads.md, "On cheap items").
        if len(self._slots) + len(self._ready) >= self._max_tasks:
            return
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        if self._all_active and self._in_order:
            worker = next(self._cycle)  # what _pick_worker returns then, without its lists
        else:
            picked = self._pick_worker()
            if picked is None:
                return  # every worker's IterableDataset ended; index is a dummy
            worker = picked
        send_idx = self._send_idx
        self._group.tasks[worker].put((send_idx, index))
        self._slots[send_idx] = worker
        self._send_idx = send_idx + 1

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
        if not self._rng_noticed:
            self._notice_rng_seeding()
        if self._iterable:
            self._count()  # only an IterableDataset's count can warn
        return data

    def _notice_rng_seeding(self) -> None:
        # Called until a batch has been delivered: every worker has then passed the gate, which
        # decides rng_changed before it opens, so there is nothing more to notice after that.
        self._rng_noticed = True
        changed = self._group.gate.rng_changed
        if not changed:
            return
        warnings.warn(
            f"ThreadDataLoader: worker_init_fn changed the process-wide {' / '.join(changed)} random "
            "generator(s). Worker threads share these generators (torch's worker processes each have "
            "their own), so seeding them per worker leaves one stream, seeded by whichever worker ran "
            "last, that all workers draw from in an order that varies from run to run. For per-worker "
            "randomness use get_worker_info().seed, or the generators in get_worker_info().rng.",
            ThreadWorkerWarning,
            stacklevel=3,
        )

    def _next_data(self) -> Any:
        slots = self._slots
        while True:
            owner = slots.get(self._rcvd_idx)
            if owner is None:  # the next slot is not out at a worker: ready, empty, or the end
                self._skip_empty_slots()
                if self._rcvd_idx >= self._send_idx:
                    self._end_epoch()
                    raise StopIteration
                if self._rcvd_idx in self._ready:
                    return self._deliver(self._rcvd_idx, self._ready.pop(self._rcvd_idx))
                owner = slots[self._rcvd_idx]
            # In order, wait on the queue of the worker owing the next batch (see worker.py).
            idx, worker, payload = self._get_result(self._group.results[owner])
            if idx not in self._slots:
                continue  # late resume ack; nothing to deliver
            if payload is EXHAUSTED:
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
        self._all_active = False
        # Results are FIFO per worker, so its remaining slots will never be filled.
        for idx in [i for i, w in self._slots.items() if w == worker]:
            del self._slots[idx]
        self._dispatch()

    def _deliver(self, idx: int, payload: Any) -> Any:
        if idx == self._rcvd_idx:
            self._rcvd_idx += 1
        self._dispatch()
        if isinstance(payload, WorkerFailure):
            payload.reraise()
        return payload

    def _get_result(self, results: queue.SimpleQueue) -> tuple[int | None, int, Any]:
        if self._timeout <= 0:  # no deadline: only a dead worker ends the wait
            while True:
                try:
                    return results.get(timeout=POLL_S)
                except queue.Empty:
                    self._check_alive()
        deadline = time.monotonic() + self._timeout
        while True:
            wait = max(0.0, min(POLL_S, deadline - time.monotonic()))
            try:
                return results.get(timeout=wait)
            except queue.Empty:
                pass
            self._check_alive()
            if time.monotonic() >= deadline:
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
