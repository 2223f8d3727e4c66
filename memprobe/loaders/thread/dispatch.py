"""Handing index batches to worker threads in torch's order, by proxy while the loop waits.

torch's iterator draws the sampler's indices in the iterating thread: ``prefetch_factor`` x W at
``iter()``, then one more each time ``__next__`` returns a batch (``_process_data`` calls
``_try_put_index`` before it returns the data). :class:`Dispatcher` keeps that state (the sampler's
iterator, the slots handed out and not yet received, the next worker) and hands out the same
indices, in the same order, at the same points, to worker ``k mod W`` for batch ``k`` (with
``in_order=True``).

**Proxy dispatch.** When the iterating thread is blocked in ``__next__`` waiting for exactly batch k
(it set an "awaiting slot k" marker before blocking, and k was not in its queue yet), the next
things it will do are fixed: take batch k, draw the next index and send it out, return batch k.
Nothing else can happen in between. So the worker that delivers batch k makes that hand-out on the
iterating thread's behalf, under the dispatcher's lock, before it puts the batch: the sampler sees
the same draws in the same order, inside the same ``__next__`` call; the batches ahead of the loop
are the same (batch k in hand + ``prefetch_factor`` x W outstanding, as in torch's
``_process_data`` at that instant); which worker gets which batch is unchanged. The worker then
has its next task at once, instead of when the iterating thread gets a CPU and the GIL (1.6-7 ms
median on a loaded 2-core machine: docs/perf/threads.md, "On cheap items"). With ``in_order=False``
the loop waits for whichever batch comes first; the first worker to deliver one takes the marker,
and every worker puts its result under the lock, so the batch delivered by proxy is the very next
one the loop takes.

The draw then runs in a worker thread, so what a sampler can see of its thread is made to be the
iterating thread's:

* worker info is hidden during the draw: ``get_worker_info()`` (torch's and this package's) returns
  ``None``, as in the iterating thread;
* the draw runs in a copy of the iterating thread's :mod:`contextvars` context (decimal contexts,
  numpy's ``errstate``, any ``ContextVar``), taken when it started waiting;
* torch's thread-local state (grad mode, inference mode, autocast, torch function and dispatch modes
  such as ``torch.set_default_device``) cannot be copied into another thread: a draw is made by
  proxy only when the iterating thread has no torch mode active and the worker's grad, inference
  and autocast state equal the iterating thread's. Otherwise the iterating thread draws, as before.

What remains the worker's: ``threading.current_thread()`` and ``threading.local`` values a sampler
keeps itself. A sampler's exception is caught in the worker and raised from the iterating thread's
``next()`` where torch raises it (before the batch is returned, which is then lost, as under
torch). A ``KeyboardInterrupt`` while the loop waits may come after a draw made by proxy, as under
torch it may come after ``_try_put_index``: the draw is one the loop would have made.
"""

from __future__ import annotations

import contextvars
import itertools
import queue
import threading
from collections.abc import Iterator
from typing import Any

import torch

from memprobe.loaders.thread import info

__all__ = ["ANY", "Dispatcher"]

ANY = -1  # in_order=False: the loop waits for whichever batch comes first


def _torch_thread_state() -> tuple:
    """torch's thread-local state a sampler's draw could depend on (0.5 us to read)."""
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.is_autocast_enabled(),
        torch._C._len_torch_function_stack(),
        torch._C._len_torch_dispatch_stack(),
    )


class Dispatcher:
    """The hand-out of index batches, shared by the iterating thread and the workers.

    Every attribute below the lock is read and changed only with ``lock`` held. It holds no
    reference to the iterator, so that the iterator (whose finalizer stops the threads) is freed
    when the program drops it.
    """

    def __init__(self, num_workers: int, max_tasks: int, *, in_order: bool, proxy: bool) -> None:
        self.tasks: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(num_workers)]
        self.max_tasks = max_tasks
        self._n = num_workers
        self._in_order = in_order
        self._proxy = proxy
        self._closed = False
        #: per worker, the batches after which it found no task waiting (a measure, see tests)
        self.found_no_task = [0] * num_workers
        self.lock = threading.Lock()
        self.sampler_iter: Iterator[Any] = iter(())
        self.send_idx = 0  # next slot to hand out
        self.slots: dict[int, int] = {}  # slot -> worker, task sent but result not received
        self.ready: dict[int, Any] = {}  # slot -> result received ahead of its turn
        self.active = [True] * num_workers
        self._cycle = itertools.cycle(range(num_workers))
        self._awaiting: int | None = None  # the slot the loop is blocked on (ANY), or None
        self._state: tuple = ()  # the loop's torch thread-local state while it waits
        self._context: contextvars.Context | None = None  # a copy of the loop's, while it waits
        self._proxied: int | None = None  # the slot a worker dispatched for, until the loop takes it
        self._draw_error: BaseException | None = None  # what the sampler raised in that draw

    def reset(self, sampler_iter: Iterator[Any]) -> None:
        """A new epoch: no slots, every worker active (lock held)."""
        self.sampler_iter = sampler_iter
        self.send_idx = 0
        self.slots = {}
        self.ready = {}
        self.active = [True] * self._n
        self._cycle = itertools.cycle(range(self._n))

    def close(self) -> None:
        """No more draws by proxy: the loop stopped (shutdown, timeout, KeyboardInterrupt)."""
        self._closed = True

    # -- handing out (lock held) ----------------------------------------------------------------

    def dispatch(self) -> None:
        """Draw the next index and send it to the next worker, if fewer than max_tasks are out."""
        if len(self.slots) + len(self.ready) >= self.max_tasks:
            return
        try:
            index = next(self.sampler_iter)
        except StopIteration:
            return
        worker = self._pick_worker()
        if worker is None:
            return  # every worker's IterableDataset ended; index is a dummy
        self.tasks[worker].put((self.send_idx, index))
        self.slots[self.send_idx] = worker
        self.send_idx += 1

    def _pick_worker(self) -> int | None:
        active = [k for k in range(self._n) if self.active[k]]
        if not active:
            return None
        cap = self.max_tasks // len(active)
        for _ in range(self._n):
            k = next(self._cycle)
            if self.active[k] and (self._in_order or self._load(k) < cap):
                return k
        return min(active, key=self._load)  # out of order: least loaded, never drop

    def _load(self, worker: int) -> int:
        return sum(1 for w in self.slots.values() if w == worker)

    def retire(self, worker: int) -> None:
        """An IterableDataset shard ended: drop its slots, keep the pipeline full."""
        self.active[worker] = False
        # Results are FIFO per worker, so its remaining slots will never be filled.
        for idx in [i for i, w in self.slots.items() if w == worker]:
            del self.slots[idx]
        self.dispatch()

    # -- the loop's side of proxy dispatch (lock held) -------------------------------------------

    def await_slot(self, slot: int, results: queue.SimpleQueue) -> None:
        """The loop is about to block on ``results`` for ``slot`` (or ANY): let the worker that
        delivers it dispatch first, unless it is there already."""
        if not self._proxy or self._closed or not results.empty():
            return
        state = _torch_thread_state()
        if state[-2:] != (0, 0):
            return  # a torch mode (e.g. set_default_device) the worker's draw would not see
        self._awaiting, self._state, self._context = slot, state, contextvars.copy_context()

    def stop_awaiting(self) -> bool:
        """The loop stops waiting: whether a worker dispatched for a batch now in its queue."""
        self._awaiting = self._context = None
        return self._proxied is not None

    def received(self, idx: int | None) -> tuple[bool, BaseException | None]:
        """The loop took slot ``idx``: whether its hand-out was made by proxy, and the sampler's
        exception if that draw raised one."""
        self.stop_awaiting()
        if idx is None or idx != self._proxied:
            return False, None
        error, self._proxied, self._draw_error = self._draw_error, None, None
        return True, error

    # -- the worker's side -------------------------------------------------------------------------

    def put_result(
        self, results: queue.SimpleQueue, idx: int, worker: int, payload: Any, *, batch: bool
    ) -> None:
        """Put a worker's result; first make the loop's hand-out if it waits for this ``batch``."""
        with self.lock:
            awaiting = self._awaiting
            if (
                batch
                and awaiting is not None
                and awaiting in (idx, ANY)
                and idx in self.slots
                and not self._closed
                and _torch_thread_state() == self._state
            ):
                self._dispatch_by_proxy(idx)
            results.put((idx, worker, payload))

    def _dispatch_by_proxy(self, idx: int) -> None:
        context = self._context
        assert context is not None  # set with the marker
        self._awaiting = self._context = None
        self._proxied = idx
        del self.slots[idx]  # what the loop does when it takes the batch, before its hand-out
        with info.hidden():
            try:
                context.run(self.dispatch)
            except BaseException as exc:  # noqa: BLE001  (the sampler's: raised in the loop, as torch does)
                self._draw_error = exc
