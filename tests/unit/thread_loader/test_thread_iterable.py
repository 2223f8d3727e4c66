"""IterableDatasets and datapipes: sharding, per-worker copies, shuffling, seeds and torch's
warnings, compared with torch's DataLoader (fork workers) on the same objects."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from threadtest import Shards, assert_same, gen, quiet, recorded, torch_loader
from torch.utils.data import Dataset, IterableDataset

from memprobe.loaders.thread import ThreadDataLoader, get_worker_info


@pytest.mark.parametrize("num_workers", [2, 3])
@pytest.mark.parametrize(
    "info_fn", [torch.utils.data.get_worker_info, get_worker_info], ids=["torch", "memprobe"]
)
def test_iterable_sharding_yields_each_element_once(num_workers: int, info_fn: Callable) -> None:
    dataset = Shards(17, info_fn)
    with quiet():  # 3 workers on 2 cores
        batches = list(ThreadDataLoader(dataset, batch_size=2, num_workers=num_workers))
        assert sorted(int(v) for b in batches for v in b) == list(range(17))
        if info_fn is torch.utils.data.get_worker_info:  # same interleaving as torch
            assert_same(batches, list(torch_loader(dataset, batch_size=2, num_workers=num_workers)))


def test_iterable_drop_last_and_no_batching_match_torch() -> None:
    for kwargs in ({"batch_size": 3, "drop_last": True}, {"batch_size": None}):
        expected = list(torch_loader(Shards(11), num_workers=2, **kwargs))
        assert_same(list(ThreadDataLoader(Shards(11), num_workers=2, **kwargs)), expected)


def test_iterable_persistent_epochs_restart_each_shard() -> None:
    kw = {"batch_size": 2, "num_workers": 2, "persistent_workers": True}
    loader_t, loader = torch_loader(Shards(9), **kw), ThreadDataLoader(Shards(9), **kw)
    for _ in range(2):
        assert_same(list(loader), list(loader_t))
    loader.close()


# -- torch's own IterableDataset examples (torch.utils.data.IterableDataset's docstring) ----------


class SplitInIter(IterableDataset):
    """Example 1: each worker takes its share in ``__iter__``."""

    def __init__(self, start: int, end: int) -> None:
        super(SplitInIter).__init__()  # sic, as in torch's docs
        self.start, self.end = start, end

    def __iter__(self) -> Iterator[int]:
        worker_info = torch.utils.data.get_worker_info()
        if worker_info is None:
            iter_start, iter_end = self.start, self.end
        else:
            per_worker = math.ceil((self.end - self.start) / float(worker_info.num_workers))
            iter_start = self.start + worker_info.id * per_worker
            iter_end = min(iter_start + per_worker, self.end)
        return iter(range(iter_start, iter_end))


class WholeRange(IterableDataset):
    """Example 2: the dataset yields everything; ``worker_init_fn`` configures each copy."""

    def __init__(self, start: int, end: int) -> None:
        super(WholeRange).__init__()
        self.start, self.end = start, end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end))


def configure_copy(worker_id: int) -> None:
    """torch's docs: "configures each dataset copy differently"."""
    worker_info = torch.utils.data.get_worker_info()
    dataset = worker_info.dataset  # the dataset copy in this worker
    overall_start, overall_end = dataset.start, dataset.end
    per_worker = math.ceil((overall_end - overall_start) / float(worker_info.num_workers))
    dataset.start = overall_start + worker_info.id * per_worker
    dataset.end = min(dataset.start + per_worker, overall_end)


def _values(batches: list) -> list[int]:
    return [int(b) for b in batches]


@pytest.mark.parametrize(
    ("dataset", "kwargs", "printed"),
    [
        (SplitInIter(3, 7), {"num_workers": 0}, [3, 4, 5, 6]),
        (SplitInIter(3, 7), {"num_workers": 2}, [3, 5, 4, 6]),
        # The docs print [3, 5, 4, 6] here; torch gives this (one item per worker, in worker order).
        (SplitInIter(3, 7), {"num_workers": 12}, [3, 4, 5, 6]),
        (WholeRange(3, 7), {"num_workers": 0}, [3, 4, 5, 6]),
        (WholeRange(3, 7), {"num_workers": 2}, [3, 3, 4, 4, 5, 5, 6, 6]),
        (WholeRange(3, 7), {"num_workers": 2, "worker_init_fn": configure_copy}, [3, 5, 4, 6]),
        (WholeRange(3, 7), {"num_workers": 12, "worker_init_fn": configure_copy}, [3, 4, 5, 6]),
    ],
    ids=["ex1-0", "ex1-2", "ex1-12", "ex2-0", "ex2-2-duplicates", "ex2-2-init", "ex2-12-init"],
)
def test_torch_docs_iterable_examples_load_as_torch_loads_them(
    dataset: Any, kwargs: dict, printed: list
) -> None:
    with quiet():  # 12 workers on this machine's cores
        assert _values(list(ThreadDataLoader(dataset, **kwargs))) == printed
        assert _values(list(torch_loader(dataset, **kwargs))) == printed
    assert (dataset.start, dataset.end) == (3, 7)  # workers configured their copies, not this object


def test_each_worker_configures_its_own_copy_of_a_map_style_dataset() -> None:
    class Tagged(Dataset):
        tag = "main"

        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> tuple[int, str]:
            return get_worker_info().id, self.tag

    def tag(worker_id: int) -> None:  # e.g. a file handle per worker, opened in worker_init_fn
        get_worker_info().dataset.tag = f"worker {worker_id}"

    dataset = Tagged()
    items = list(ThreadDataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=tag))
    assert items == list(torch_loader(dataset, batch_size=None, num_workers=2, worker_init_fn=tag))
    assert items == [[k % 2, f"worker {k % 2}"] for k in range(6)] and dataset.tag == "main"


def test_a_dataset_that_cannot_be_copied_is_shared_with_a_warning() -> None:
    class Uncopyable(Shards):
        def __reduce_ex__(self, protocol: Any) -> Any:
            raise TypeError("cannot copy me")

    with pytest.warns(UserWarning, match="could not copy the dataset for a worker thread .*cannot copy me"):
        batches = list(ThreadDataLoader(Uncopyable(6), batch_size=2, num_workers=2))
    assert sorted(int(v) for b in batches for v in b) == list(range(6))


# -- an IterableDataset that yields more than its len(): torch's warning, torch's words ----------


class Overlong(IterableDataset):
    """Reports 2 items and yields 4 (in every worker: not split between workers either)."""

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Iterator[int]:
        return iter(range(4))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_yielding_more_than_len_warns_on_every_extra_batch_as_torch_does(num_workers: int) -> None:
    dataset = Overlong()

    def run(loader: Any) -> tuple[int, list]:
        assert len(loader) == 2
        batches, caught = recorded(lambda: list(loader))
        return len(batches), caught

    theirs = run(torch_loader(dataset, num_workers=num_workers))
    ours = run(ThreadDataLoader(dataset, num_workers=num_workers))
    assert ours == theirs
    # One warning per batch past len(). Only those are counted: on a machine with fewer CPUs
    # than workers (taskset -c 0) both loaders also warn about the worker count.
    batches, caught = ours
    too_long = [msg for _, msg in caught if msg.startswith("Length of IterableDataset")]
    assert len(too_long) == batches - 2 >= 2
    assert too_long[0].startswith(f"Length of IterableDataset {dataset} was reported to be 2(when accessing")


# -- datapipes: shuffled, seeded and sharded per worker as torch does ---------------------------------


def _pipe(*, shuffler: bool = True) -> Any:
    from torch.utils.data.datapipes.iter import IterableWrapper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Lambda function is not supported by pickle": not needed here
        pipe = IterableWrapper(range(20))
        pipe = pipe.shuffle() if shuffler else pipe
        return pipe.sharding_filter().map(lambda x: x * 10)


def _epochs(make: Callable[..., Any], epochs: int = 2, **kwargs: Any) -> list[list[list[int]]]:
    loader = make(_pipe(), batch_size=4, generator=gen(1), **kwargs)
    out = [[b.tolist() for b in loader] for _ in range(epochs)]
    getattr(loader, "close", lambda: None)()
    return out


@pytest.mark.parametrize("shuffle", [None, True, False])
@pytest.mark.parametrize(("num_workers", "persistent"), [(0, False), (2, False), (2, True), (3, False)])
def test_iter_datapipe_matches_torch(shuffle: bool | None, num_workers: int, persistent: bool) -> None:
    kw = {"shuffle": shuffle, "num_workers": num_workers, "persistent_workers": persistent}
    with quiet():
        theirs, ours = _epochs(torch_loader, **kw), _epochs(ThreadDataLoader, **kw)
    assert ours == theirs
    assert sorted(x for batch in ours[0] for x in batch) == list(range(0, 200, 10))  # sharded: each once
    assert (ours[0] != sorted(ours[0])) == (shuffle is not False)  # shuffled unless turned off


def test_shuffle_true_on_a_datapipe_without_shuffler_warns_and_loads_as_torch() -> None:
    def run(make: Callable[..., Any]) -> tuple[list, list]:
        return recorded(
            lambda: [
                b.tolist() for b in make(_pipe(shuffler=False), batch_size=4, shuffle=True, num_workers=2)
            ]
        )

    theirs, ours = run(torch_loader), run(ThreadDataLoader)
    assert ours == theirs
    assert any("does not contain a `Shuffler`" in msg for _, msg in ours[1])
