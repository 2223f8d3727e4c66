"""Datasets and helpers shared by the ThreadDataLoader tests (compared with torch's DataLoader)."""

from __future__ import annotations

import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from memprobe.loaders.thread import WORKER_THREAD_PREFIX
from memprobe.run.child import quiet_fork_with_threads


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER_THREAD_PREFIX)]


# How long stopping threads may take to end: they end within milliseconds alone, but the CI runs
# three test workers on two cores beside real recordings, and 2 s failed a test there twice.
THREADS_END_S = 60.0  # a wait for an event, not a limit: ends as soon as they have (was 10 s)


def wait_no_worker_threads(timeout: float = THREADS_END_S, *, collect: bool = True) -> list[threading.Thread]:
    deadline = time.monotonic() + timeout
    while True:
        alive = worker_threads()
        if not alive or time.monotonic() > deadline:
            return alive
        if collect:
            gc.collect()  # iterators caught in traceback cycles are freed here
        time.sleep(0.02)


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Threads must stop through reference counting alone: a cycle would keep them until GC."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), (a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b, (a, b)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def torch_loader(dataset: Any, **kwargs: Any) -> DataLoader:
    """torch's DataLoader; fork workers (fast on 2 cores)."""
    if kwargs.get("num_workers", 0) > 0:
        kwargs.setdefault("multiprocessing_context", "fork")
    return DataLoader(dataset, **kwargs)


@contextmanager
def quiet() -> Iterator[None]:
    """No warnings shown (e.g. torch's about more workers than this machine's 2 CPUs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def recorded(fn: Callable[[], Any]) -> tuple[Any, list[tuple[type, str]]]:
    """``fn()``'s result and every warning it raised, as (category, message), but CPython 3.12+'s
    about fork() in a process with threads: torch's fork workers are forked from this test
    process, which has threads (torch's own, pytest-xdist's); the interpreter warns at each fork,
    torch's DataLoader does not (six tests comparing the two loaders' warnings failed on 3.13)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_fork_with_threads()
        result = fn()
    return result, [(w.category, str(w.message)) for w in caught]


class Squares(Dataset):
    """Map-style dataset of dicts with a tensor, an int and a string."""

    def __init__(self, n: int = 23) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.tensor([i, i * i], dtype=torch.float32), "i": i, "name": f"s{i}"}


class BatchedSquares(Squares):
    """Has __getitems__, which the fetcher must prefer over __getitem__."""

    def __getitems__(self, indices: list[int]) -> list[dict]:
        return [{"x": torch.tensor([i, -i]), "i": i, "name": "batched"} for i in indices]


class Shards(IterableDataset):
    """Splits range(n) between workers via torch's or memprobe's get_worker_info."""

    def __init__(self, n: int, info_fn: Callable[[], Any] = torch.utils.data.get_worker_info) -> None:
        self.n = n
        self.info_fn = info_fn

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        info = self.info_fn()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


class Slow(Dataset):
    def __init__(self, n: int, delay: float, slow_index: int | None = None) -> None:
        self.n, self.delay, self.slow_index = n, delay, slow_index

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.slow_index is None or i == self.slow_index:
            time.sleep(self.delay)
        return i


class FailsAt(Dataset):
    def __init__(self, bad: int, exc: BaseException) -> None:
        self.bad, self.exc = bad, exc

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise self.exc
        return i
