"""The same batches as torch's DataLoader, in the same order, from the same RNG draws; batches in
ordinary memory."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator

import pytest
import torch
from threadtest import BatchedSquares, Squares, assert_same, gen, torch_loader, worker_threads
from torch.utils.data import Dataset, default_collate

from memprobe.loaders.thread import ThreadDataLoader

Pair = namedtuple("Pair", "x y")


def _pair_collate(batch: list[dict]) -> Pair:
    return Pair(torch.stack([b["x"] for b in batch]).sum(0), [b["i"] for b in batch])


CONFIGS = {
    "default": {},
    "batch4": {"batch_size": 4},
    "shuffle_gen": {"batch_size": 5, "shuffle": True, "generator": 1234},
    "drop_last": {"batch_size": 5, "drop_last": True},
    "shuffle_drop_last": {"batch_size": 4, "shuffle": True, "drop_last": True, "generator": 7},
    "custom_collate": {"batch_size": 3, "collate_fn": _pair_collate},
    "no_batching": {"batch_size": None},
    "batch_sampler": {"batch_sampler": "custom"},
    "prefetch_1": {"batch_size": 2, "prefetch_factor": 1, "workers_only": True},
}


def _build_kwargs(config: dict, num_workers: int) -> dict:
    kwargs = dict(config)
    kwargs.pop("workers_only", None)
    if "generator" in kwargs:
        kwargs["generator"] = gen(kwargs["generator"])
    if kwargs.get("batch_sampler") == "custom":
        kwargs["batch_sampler"] = [[3, 1], [0], [22, 5, 9], [4, 4]]
    kwargs["num_workers"] = num_workers
    return kwargs


@pytest.mark.parametrize(
    ("name", "num_workers"),
    [(name, nw) for name in CONFIGS for nw in (0, 2) if nw or not CONFIGS[name].get("workers_only")],
)
def test_same_batches_as_torch(name: str, num_workers: int) -> None:
    dataset = Squares()
    # Built twice so torch and ThreadDataLoader get equal, unshared generators.
    expected = list(torch_loader(dataset, **_build_kwargs(CONFIGS[name], num_workers)))
    actual = list(ThreadDataLoader(dataset, **_build_kwargs(CONFIGS[name], num_workers)))
    assert len(actual) == len(expected) > 0
    assert_same(actual, expected)


def test_getitems_is_used() -> None:
    batches = list(ThreadDataLoader(BatchedSquares(6), batch_size=3, num_workers=2))
    assert batches[0]["name"] == ["batched"] * 3
    assert_same(batches, list(torch_loader(BatchedSquares(6), batch_size=3, num_workers=2)))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_shuffle_with_global_rng_matches_torch(num_workers: int) -> None:
    # No generator: base seed and RandomSampler both draw from torch's global
    # RNG, so the order only matches if the draws happen in torch's order.
    torch.manual_seed(99)
    expected = list(torch_loader(Squares(), batch_size=4, shuffle=True, num_workers=num_workers))
    after_torch = torch.rand(1)
    torch.manual_seed(99)
    actual = list(ThreadDataLoader(Squares(), batch_size=4, shuffle=True, num_workers=num_workers))
    assert_same(actual, expected)
    assert torch.equal(torch.rand(1), after_torch)  # same amount of global RNG consumed


class EagerShuffleBatches:
    """A batch_sampler whose __iter__ draws from the global RNG immediately."""

    def __iter__(self) -> Iterator[list[int]]:
        return iter(torch.randperm(23).split(4))

    def __len__(self) -> int:
        return 6


@pytest.mark.parametrize("num_workers", [0, 2])
def test_eager_batch_sampler_sees_same_rng_calls_as_torch(num_workers: int) -> None:
    torch.manual_seed(5)
    expected = list(torch_loader(Squares(), batch_sampler=EagerShuffleBatches(), num_workers=num_workers))
    torch.manual_seed(5)
    actual = list(ThreadDataLoader(Squares(), batch_sampler=EagerShuffleBatches(), num_workers=num_workers))
    assert_same(actual, expected)


def test_persistent_workers_two_epochs_match_torch_and_reuse_threads() -> None:
    gen_t, gen_m = gen(11), gen(11)
    kw = {"batch_size": 4, "shuffle": True, "num_workers": 2, "persistent_workers": True}
    loader_t = torch_loader(Squares(), generator=gen_t, **kw)
    loader = ThreadDataLoader(Squares(), generator=gen_m, **kw)
    idents = []
    for _ in range(2):
        expected = list(loader_t)
        actual = list(loader)
        assert_same(actual, expected)
        idents.append(sorted(t.ident for t in worker_threads()))
    assert len(idents[0]) == 2 and idents[0] == idents[1]
    # Stopping mid-epoch must not leak stale batches into the next epoch.
    next(iter(loader_t))
    next(iter(loader))
    assert_same(list(loader), list(loader_t))
    loader.close()


# -- where batches live ---------------------------------------------------------------------------


class Images(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        return {"image": torch.full((3, 4, 4), i, dtype=torch.uint8), "label": i}


def test_batches_from_threads_are_in_ordinary_memory_like_a_thread_pool_makes_them() -> None:
    """torch's collate puts a worker's batch into a new shared-memory file, for the trip to the
    main process; threads need no trip, and the file costs page faults (docs/perf/threads.md)."""
    batches = list(ThreadDataLoader(Images(), batch_size=4, num_workers=2))
    assert not any(b["image"].is_shared() for b in batches)
    assert_same(batches, list(torch_loader(Images(), batch_size=4, num_workers=2)))


def test_a_collate_fn_calling_default_collate_gets_ordinary_memory_too() -> None:
    def collate(items: list[dict]) -> dict:  # torch's documented way to extend collation
        return default_collate([it for it in items if it["label"] != 3])

    batches = list(ThreadDataLoader(Images(), batch_size=4, num_workers=2, collate_fn=collate))
    assert [len(b["label"]) for b in batches] == [3, 4]
    assert not any(b["image"].is_shared() for b in batches)


def test_torch_process_workers_still_share_their_batches_after_threads_ran() -> None:
    list(ThreadDataLoader(Images(), batch_size=4, num_workers=2))  # the collate hook is installed
    batches = list(torch_loader(Images(), batch_size=4, num_workers=2))
    assert all(b["image"].is_shared() for b in batches)
    assert not default_collate([torch.zeros(2)] * 2).is_shared()  # the main thread: as before
