"""Proxy dispatch (dispatch.py): a worker that delivers the batch the loop is blocked on makes the
loop's next hand-out. The sampler must see what it sees under torch's DataLoader: its draws at the
same points of the loop, from the same generator state, with no worker info, and its exceptions
raised from the loop's ``next()``."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from threadtest import gen, no_cyclic_gc, torch_loader, wait_no_worker_threads
from torch.utils.data import Dataset, RandomSampler

import memprobe.loaders.thread as thread_pkg
from memprobe.loaders.thread import ThreadDataLoader
from memprobe.loaders.thread.iterator import ThreadPoolIter

_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="unset")


class SlowItems(Dataset):
    """Items that take a few ms (GIL released): the loop is blocked on nearly every batch, so
    nearly every hand-out is made by proxy."""

    def __init__(self, n: int = 24, delay: float = 0.003) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(self.delay)
        return i


class Watched:
    """A sampler that notes, at each draw, how many batches the loop had received, what the
    drawing thread sees of worker info and of the loop's context, and whether it is a worker."""

    def __init__(self, n: int, raise_at: int | None = None) -> None:
        self.n, self.raise_at = n, raise_at
        self.received = 0
        self.draws: list[int] = []
        self.seen: list[tuple[Any, Any, str]] = []
        self.in_worker = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            if i == self.raise_at:
                raise ValueError(f"sampler failed at draw {i}")
            self.draws.append(self.received)
            self.seen.append((torch.utils.data.get_worker_info(), thread_pkg.get_worker_info(), _var.get()))
            self.in_worker += threading.current_thread().name.startswith(thread_pkg.WORKER_THREAD_PREFIX)
            yield i


def _run(loader: Any, sampler: Watched) -> list[int]:
    out = []
    for batch in loader:
        sampler.received += 1
        out.append(int(batch))
    return out


@pytest.mark.parametrize(
    ("num_workers", "prefetch_factor", "in_order"), [(2, 2, True), (3, 1, True), (2, 2, False)]
)
def test_the_sampler_draws_at_the_same_points_of_the_loop_as_under_torch(
    num_workers: int, prefetch_factor: int, in_order: bool
) -> None:
    kw = {
        "batch_size": None,
        "num_workers": num_workers,
        "prefetch_factor": prefetch_factor,
        "in_order": in_order,
    }
    under_torch = Watched(24)
    expected = _run(torch_loader(SlowItems(), sampler=under_torch, **kw), under_torch)
    watched = Watched(24)
    token = _var.set("the loop's")
    try:
        actual = _run(ThreadDataLoader(SlowItems(), sampler=watched, **kw), watched)
    finally:
        _var.reset(token)
    assert sorted(actual) == sorted(expected) == list(range(24))
    if in_order:
        assert actual == expected
    ahead = num_workers * prefetch_factor
    assert watched.draws == under_torch.draws == [0] * ahead + list(range(24 - ahead))
    assert watched.in_worker > 0  # the hand-outs were made by proxy, which is what is tested
    assert set(watched.seen) == {(None, None, "the loop's")}


def test_a_sampler_that_raises_mid_epoch_raises_from_the_loops_next_as_under_torch() -> None:
    def outcomes(loader: Any) -> list[Any]:
        out: list[Any] = []
        it = iter(loader)
        while True:
            try:
                out.append(int(next(it)))
            except StopIteration:
                return out
            except ValueError as exc:
                out.append(f"ValueError: {exc}")

    kw = {"batch_size": None, "num_workers": 2}
    expected = outcomes(torch_loader(SlowItems(), sampler=Watched(24, raise_at=10), **kw))
    watched = Watched(24, raise_at=10)
    actual = outcomes(ThreadDataLoader(SlowItems(), sampler=watched, **kw))
    # Draw 10 is made as batch 6 is returned: torch raises there, and batch 6 is lost.
    assert actual == expected == [0, 1, 2, 3, 4, 5, "ValueError: sampler failed at draw 10", 7, 8, 9]
    assert watched.in_worker > 0


def test_after_a_sampler_raised_the_threads_stop_when_the_loop_drops_the_iterator() -> None:
    # The exception carries the worker's frames of the draw; none may keep the iterator alive.
    with no_cyclic_gc():
        it = iter(
            ThreadDataLoader(SlowItems(), sampler=Watched(24, raise_at=10), batch_size=None, num_workers=2)
        )
        with pytest.raises(ValueError, match="sampler failed at draw 10"):
            for _ in it:
                pass
        del it
        assert not wait_no_worker_threads(collect=False)


@pytest.mark.parametrize("mode", [torch.no_grad, lambda: torch.device("cpu")], ids=["no_grad", "device_mode"])
def test_when_the_loop_has_torch_thread_state_a_worker_lacks_the_loop_draws_itself(mode: Any) -> None:
    """Grad mode and torch function modes (torch.device, set_default_device) are per thread."""
    watched = Watched(24)
    with mode():
        batches = _run(
            ThreadDataLoader(SlowItems(), sampler=watched, batch_size=None, num_workers=2), watched
        )
    assert batches == list(range(24))
    assert watched.in_worker == 0
    assert watched.draws == [0] * 4 + list(range(20))


def test_a_sampler_sharing_the_programs_generator_gives_torchs_batches() -> None:
    """RandomSampler with replacement draws 32 indices at a time from its generator; the loop
    draws from the same generator at every batch. Both streams match torch's only if every
    sampler draw comes at the same point of the loop as under torch."""

    def run(make: Any) -> tuple[list[list[int]], list[int]]:
        g = gen(3)
        sampler = RandomSampler(range(48), replacement=True, num_samples=96, generator=g)
        loader = make(SlowItems(48, delay=0.001), batch_size=3, sampler=sampler, num_workers=2)
        batches, loop_draws = [], []
        for batch in loader:
            batches.append(batch.tolist())
            loop_draws.append(int(torch.randint(1000, (1,), generator=g)))
        return batches, loop_draws

    assert run(ThreadDataLoader) == run(torch_loader)


def _blocked_waits(monkeypatch: pytest.MonkeyPatch, proxy: bool) -> tuple[int, list[int]]:
    """Epoch with a loop that, once woken from a wait, gets to run only 60 ms later (a loaded
    machine): how many times it had to wait, and the batches returned."""
    original = ThreadPoolIter._get_result
    waits = [0]

    def slow_to_wake(self: ThreadPoolIter, results: Any) -> Any:
        blocked = results.empty()
        got = original(self, results)
        if blocked:
            waits[0] += 1
            time.sleep(0.06)
        return got

    monkeypatch.setattr(ThreadPoolIter, "_get_result", slow_to_wake)
    loader = ThreadDataLoader(SlowItems(40, delay=0.004), batch_size=None, num_workers=2)
    loader._proxy_dispatch = proxy
    batches = [int(b) for b in loader]
    monkeypatch.undo()
    return waits[0], batches


def test_a_loop_slow_to_wake_keeps_the_workers_busier_with_proxy_dispatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the loop waits for a CPU after batch k came, the hand-out of batch k + 4 is already
    made: each wake-up of the loop finds five batches ready instead of four (2 workers, 2 batches
    each), so an epoch of 40 batches needs 8 waits instead of 10."""
    with_proxy, batches = _blocked_waits(monkeypatch, proxy=True)
    without, batches_without = _blocked_waits(monkeypatch, proxy=False)
    assert batches == batches_without == list(range(40))
    assert without == 10
    assert with_proxy == 8
