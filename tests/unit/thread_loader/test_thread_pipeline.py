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
