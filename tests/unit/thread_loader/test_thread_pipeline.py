"""What the pipeline lets users observe, as torch's DataLoader does: which worker loads batch k, and
how many batches are loaded ahead of the loop (the memory bound). The hand-off between threads may
change for speed; these may not."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from threadtest import torch_loader
from torch.utils.data import Dataset

from memprobe.loaders.thread import ThreadDataLoader


class WhoLoads(Dataset):
    """Item k: the id of the worker that loaded it; worker 0 is slow, so a loader that handed the
    next batch to whichever worker is free would give most batches to the others."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> int:
        info = torch.utils.data.get_worker_info()
        if info.id == 0:
            time.sleep(0.02)
        return info.id


@pytest.mark.parametrize("num_workers", [2, 3])
def test_batch_k_is_loaded_by_worker_k_mod_w_as_under_torch_even_with_a_slow_worker(num_workers: int) -> None:
    expected = [int(b) for b in torch_loader(WhoLoads(), batch_size=None, num_workers=num_workers)]
    actual = [int(b) for b in ThreadDataLoader(WhoLoads(), batch_size=None, num_workers=num_workers)]
    assert actual == expected == [k % num_workers for k in range(24)]


class CountsStarts(Dataset):
    """Counts the items whose loading began (in a list: each worker has its own shallow copy of the
    dataset, as each process worker has its own copy, and the data they refer to is shared)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = [0]
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.started[0] += 1
        return i


@pytest.mark.parametrize(("num_workers", "prefetch_factor"), [(2, 2), (3, 1), (2, 3)])
def test_at_most_prefetch_factor_batches_per_worker_are_loaded_ahead_of_the_loop(
    num_workers: int, prefetch_factor: int
) -> None:
    # torch hands out prefetch_factor * W batches at the start and one more as it returns each
    # batch: with y batches returned, at most y + prefetch_factor * W were ever started.
    ds = CountsStarts(40)
    ahead = []
    for y, _ in enumerate(
        ThreadDataLoader(ds, batch_size=None, num_workers=num_workers, prefetch_factor=prefetch_factor),
        start=1,
    ):
        time.sleep(0.01)  # a slow loop: the workers load all they may
        ahead.append(ds.started[0] - y)
    bound = num_workers * prefetch_factor
    assert max(ahead) == bound  # the pipeline fills up to the bound, never past it
    assert ds.started[0] == 40


class OneAtATimePerWorker(Dataset):
    """Records, per worker id, the items in the order their loading began and how many of that
    worker's items were ever loading at once (the lists are shared by every worker's shallow copy);
    worker 0 is slow, so worker 1 runs out of batches while worker 0's queue still holds some."""

    def __init__(self, n: int, workers: int) -> None:
        self.n = n
        self.lock = threading.Lock()
        self.loading = [0] * workers
        self.most = [0] * workers
        self.began: list[list[int]] = [[] for _ in range(workers)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        wid = torch.utils.data.get_worker_info().id
        with self.lock:
            self.loading[wid] += 1
            self.most[wid] = max(self.most[wid], self.loading[wid])
            self.began[wid].append(i)
        time.sleep(0.01 if wid == 0 else 0.001)
        with self.lock:
            self.loading[wid] -= 1
        return wid


def test_a_workers_batches_load_one_at_a_time_in_order_as_in_its_own_torch_process() -> None:
    # torch's worker k is one process with one task queue: its batches load one after another, in
    # the order handed out. A thread that is free may not take another worker's queued batch
    # (docs/perf/threads.md, 2026-11-25 night: what that would gain, and why it may not).
    n, workers, batch = 48, 2, 4
    ds = OneAtATimePerWorker(n, workers)
    ids = [b.tolist() for b in ThreadDataLoader(ds, batch_size=batch, num_workers=workers)]
    assert ids == [
        b.tolist()
        for b in torch_loader(OneAtATimePerWorker(n, workers), batch_size=batch, num_workers=workers)
    ]
    assert ds.most == [1] * workers
    for wid in range(workers):
        expected = [
            i for k in range(n // batch) if k % workers == wid for i in range(k * batch, (k + 1) * batch)
        ]
        assert ds.began[wid] == expected
