"""memprobe.ChunkedRandomSampler: torch's shuffled order without a Python int per record in the
main process (the step pytorch#13246's demonstration shows in its main process as each epoch
begins), and the advice that names it."""

from __future__ import annotations

import tracemalloc

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

import memprobe
from memprobe.core.cures import MAIN_GROWS, advice_for


def test_every_index_once_per_epoch_in_a_new_order_each_epoch() -> None:
    sampler = memprobe.ChunkedRandomSampler(range(10_000), chunk=1_000)
    first, second = list(sampler), list(sampler)
    assert len(sampler) == 10_000
    assert sorted(first) == list(range(10_000)) and sorted(second) == list(range(10_000))
    assert first != second and first != list(range(10_000))
    assert all(type(i) is int for i in first[:10])  # plain ints, as RandomSampler gives


def test_the_order_follows_torchs_seed_and_a_given_generator() -> None:
    torch.manual_seed(7)
    a = list(memprobe.ChunkedRandomSampler(range(5_000)))
    torch.manual_seed(7)
    b = list(memprobe.ChunkedRandomSampler(range(5_000)))
    assert a == b
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert list(memprobe.ChunkedRandomSampler(range(5_000), g1)) == list(
        memprobe.ChunkedRandomSampler(range(5_000), g2)
    )
    with pytest.raises(ValueError, match="chunk must be at least 1, got 0"):
        memprobe.ChunkedRandomSampler(range(3), chunk=0)


def test_a_dataloader_with_it_loads_every_record_once() -> None:
    data = list(range(1_000))
    loader = DataLoader(data, batch_size=64, sampler=memprobe.ChunkedRandomSampler(data, chunk=100))
    got = torch.cat(list(loader)).tolist()
    assert sorted(got) == data and got != data


def test_the_epochs_order_holds_a_chunk_of_python_ints_not_one_per_record() -> None:
    """RandomSampler's first index costs the whole epoch's list of Python ints (about 36 bytes per
    record: 36 MB here); this sampler's, one chunk of them (the permutation itself is one tensor)."""
    n = 1_000_000

    def held_after_first_index(sampler: object) -> int:
        tracemalloc.start()
        try:
            it = iter(sampler)  # type: ignore[call-overload]
            next(it)
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    assert held_after_first_index(RandomSampler(range(n))) > 30_000_000
    assert held_after_first_index(memprobe.ChunkedRandomSampler(range(n))) < 4_000_000


def test_the_advice_for_a_main_process_growing_names_the_index_list_and_its_cure() -> None:
    (main,) = advice_for([MAIN_GROWS])
    assert "a step as an epoch begins" in main.why
    cure = [c for c in main.cures if c.name == "the shuffled order in chunks"]
    assert cure and "memprobe.ChunkedRandomSampler(dataset)" in cure[0].change
    assert "The sampler's index list" in cure[0].cost


def test_with_a_generator_every_epoch_is_random_samplers_order() -> None:
    """RandomSampler draws a second permutation at each epoch's end: epochs after the first
    followed a different generator state (before: only the first epoch matched)."""
    ours = memprobe.ChunkedRandomSampler(range(3_000), torch.Generator().manual_seed(11), chunk=500)
    torchs = RandomSampler(range(3_000), generator=torch.Generator().manual_seed(11))
    assert [list(ours) for _ in range(3)] == [list(torchs) for _ in range(3)]


@pytest.mark.parametrize("n", [0, 1, 7, 1_000, 1_003])
@pytest.mark.parametrize("replicas", [1, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [True, False])
def test_the_distributed_sampler_gives_each_rank_distributed_samplers_indices(
    n: int, replicas: int, drop_last: bool, shuffle: bool
) -> None:
    """Each rank's indices, epoch after epoch (set_epoch), are torch's DistributedSampler's:
    the split, the padding (fewer records than ranks too) and the dropped tail."""
    for rank in range(replicas):
        kw = {"num_replicas": replicas, "rank": rank, "shuffle": shuffle, "seed": 5, "drop_last": drop_last}
        ours = memprobe.ChunkedDistributedSampler(range(n), chunk=64, **kw)  # type: ignore[arg-type]
        torchs = DistributedSampler(range(n), **kw)  # type: ignore[arg-type]
        assert len(ours) == len(torchs)
        for epoch in (0, 1, 4):
            ours.set_epoch(epoch), torchs.set_epoch(epoch)
            assert list(ours) == list(torchs), (rank, epoch)


def test_the_distributed_sampler_needs_a_rank_and_holds_no_list_of_every_index() -> None:
    with pytest.raises(RuntimeError, match="needs num_replicas and rank, or an initialised"):
        memprobe.ChunkedDistributedSampler(range(10))
    with pytest.raises(ValueError, match=r"rank must be in \[0, 1\]"):
        memprobe.ChunkedDistributedSampler(range(10), num_replicas=2, rank=2)
    n = 1_000_000
    tracemalloc.start()
    try:
        next(iter(memprobe.ChunkedDistributedSampler(range(n), num_replicas=2, rank=1)))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 4_000_000  # DistributedSampler's list: ~36 MB here


def test_the_advice_for_a_rank_names_the_distributed_sampler_with_set_epoch() -> None:
    """Followed in a DDP job, ChunkedRandomSampler alone would give every rank the whole dataset
    (no rank split, no set_epoch): the change names the distributed one for a rank."""
    (main,) = advice_for([MAIN_GROWS])
    (cure,) = [c for c in main.cures if c.name == "the shuffled order in chunks"]
    assert "memprobe.ChunkedDistributedSampler(dataset)" in cure.change
    assert "set_epoch(epoch)" in cure.change
