"""The sampler as torch's DataLoader drives it: its draws at the same points of the loop, from the
same generator state, with no worker info, and its exceptions raised from the loop's ``next()``.
Whatever the hand-off between threads becomes (docs/perf/threads.md tried a worker drawing for the
waiting loop, "proxy dispatch"), these may not change."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from threadtest import gen, no_cyclic_gc, torch_loader, wait_no_worker_threads
from torch.utils.data import Dataset, RandomSampler

import memprobe.loaders.thread as thread_pkg
from memprobe.loaders.thread import ThreadDataLoader

_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="unset")


class SlowItems(Dataset):
    """Items that take a few ms (GIL released): the loop is blocked on nearly every batch."""

    def __init__(self, n: int = 24, delay: float = 0.003) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(self.delay)
        return i


class Watched:
    """A sampler that notes, at each draw, how many batches the loop had received and what the
    drawing thread sees of worker info and of the loop's context."""

    def __init__(self, n: int, raise_at: int | None = None) -> None:
        self.n, self.raise_at = n, raise_at
        self.received = 0
        self.draws: list[int] = []
        self.seen: list[tuple[Any, Any, str]] = []

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            if i == self.raise_at:
                raise ValueError(f"sampler failed at draw {i}")
            self.draws.append(self.received)
            self.seen.append((torch.utils.data.get_worker_info(), thread_pkg.get_worker_info(), _var.get()))
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


def test_after_a_sampler_raised_the_threads_stop_when_the_loop_drops_the_iterator() -> None:
    # The exception's traceback holds the iterator's frames until it is dropped, then nothing.
    with no_cyclic_gc():
        it = iter(
            ThreadDataLoader(SlowItems(), sampler=Watched(24, raise_at=10), batch_size=None, num_workers=2)
        )
        with pytest.raises(ValueError, match="sampler failed at draw 10"):
            for _ in it:
                pass
        del it
        assert not wait_no_worker_threads(collect=False)


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
