"""Batches of numpy arrays: one ``numpy.stack`` in worker threads where it gives torch's tensor,
torch's own path (its errors and warnings) everywhere else (memprobe/loaders/thread/collate.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from threadtest import assert_same, torch_loader
from torch.utils.data import Dataset
from torch.utils.data._utils.collate import collate, default_collate_fn_map

from memprobe.loaders.thread import ThreadDataLoader
from memprobe.loaders.thread import collate as thread_collate


class Arrays(Dataset):
    """Item i: ``make(i)``, a numpy array or a dict holding some."""

    def __init__(self, make: Callable[[int], Any], length: int = 10) -> None:
        self.make = make
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        return self.make(i)


ITEMS = {
    "float32 box": lambda i: np.arange(4, dtype=np.float32) + i,
    "int64": lambda i: np.arange(3, dtype=np.int64) * i,
    "bool": lambda i: np.array([i % 2 == 0, True]),
    "float16 2d": lambda i: np.full((2, 3), i, dtype=np.float16),
    "complex64": lambda i: np.array([i + 1j], dtype=np.complex64),
    "0-d float64": lambda i: np.array(i / 3),
    "uint8 image": lambda i: np.full((3, 4, 4), i, dtype=np.uint8),
    "record": lambda i: {"id": i, "box": np.arange(4, dtype=np.float32) * i, "path": f"{i}.jpg"},
    # torch's path: not one plain numeric dtype, shape and layout
    "uint16": lambda i: np.arange(3, dtype=np.uint16) + i,
    "strided": lambda i: (np.arange(8, dtype=np.float32) + i)[::2],
    "read-only": lambda i: _read_only(np.arange(4, dtype=np.float32) + i),
    "mixed dtypes": lambda i: np.arange(3, dtype=np.float32 if i % 2 else np.float64),
    "memmap-like subclass": lambda i: (np.arange(3, dtype=np.float32) + i).view(_Sub),
}


class _Sub(np.ndarray):
    pass


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.fixture
def torch_paths() -> Iterator[list[int]]:
    """Counts the batches that went to torch's own ``collate_numpy_array_fn``."""
    list(ThreadDataLoader(Arrays(ITEMS["int64"], 2), batch_size=2, num_workers=1))  # installed
    original = thread_collate._torch_collate_numpy_array
    assert original is not None
    calls: list[int] = []

    def counting(batch: Any, *, collate_fn_map: Any = None) -> Any:
        calls.append(len(batch))
        return original(batch, collate_fn_map=collate_fn_map)

    thread_collate._torch_collate_numpy_array = counting
    try:
        yield calls
    finally:
        thread_collate._torch_collate_numpy_array = original


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("kind", list(ITEMS))
def test_numpy_batches_are_torchs_tensors(kind: str) -> None:
    ds = Arrays(ITEMS[kind])
    ours = list(ThreadDataLoader(ds, batch_size=4, num_workers=2))
    theirs = list(torch_loader(ds, batch_size=4, num_workers=0))
    assert_same(ours, theirs)
    for a, b in zip(ours, theirs, strict=True):
        a, b = (a["box"], b["box"]) if isinstance(a, dict) else (a, b)
        assert a.shape == b.shape and a.stride() == b.stride() and a.is_contiguous()
        assert not a.is_shared()
        assert a.untyped_storage().resizable() == b.untyped_storage().resizable()


def test_plain_arrays_take_one_stack_and_the_rest_torchs_own_path(torch_paths: list[int]) -> None:
    for kind in ("float32 box", "record", "uint8 image", "0-d float64"):
        list(ThreadDataLoader(Arrays(ITEMS[kind]), batch_size=4, num_workers=2))
    assert torch_paths == []
    for kind in ("uint16", "strided", "mixed dtypes", "memmap-like subclass"):
        list(ThreadDataLoader(Arrays(ITEMS[kind]), batch_size=4, num_workers=2))
    assert len(torch_paths) == 4 * 3  # three batches of 10 items each
    # the main thread (num_workers=0) collates as torch does, wherever the arrays are plain
    torch_paths.clear()
    list(ThreadDataLoader(Arrays(ITEMS["float32 box"]), batch_size=4, num_workers=0))
    assert torch_paths == [4, 4, 2]


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_read_only_array_goes_to_torch_which_warns_about_it(torch_paths: list[int]) -> None:
    list(ThreadDataLoader(Arrays(ITEMS["read-only"]), batch_size=5, num_workers=2))
    assert torch_paths == [5, 5]


@pytest.mark.parametrize(
    "make",
    [
        lambda i: np.zeros(3 if i < 2 else 4, dtype=np.float32),  # shapes differ
        lambda i: np.array(["a", "b"]),  # strings
        lambda i: np.arange(3, dtype=">i4"),  # non-native byte order
        lambda i: np.arange(6, dtype=np.float32)[::-2],  # negative strides
    ],
    ids=["shapes", "strings", "byte order", "negative strides"],
)
def test_what_torch_refuses_fails_with_torchs_error(make: Callable[[int], Any]) -> None:
    ds = Arrays(make, 4)
    with pytest.raises(Exception) as theirs:
        list(torch_loader(ds, batch_size=4, num_workers=0))
    with pytest.raises(type(theirs.value)) as ours:
        list(ThreadDataLoader(ds, batch_size=4, num_workers=2))
    assert str(theirs.value) in str(ours.value)


def test_a_users_own_tensor_collation_is_used_for_arrays_as_torch_uses_it(torch_paths: list[int]) -> None:
    def halves(batch: list[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
        return torch.stack(batch) / 2

    custom = {**default_collate_fn_map, torch.Tensor: halves}

    def collate_fn(items: list[np.ndarray]) -> Any:  # torch's documented way to extend collation
        return collate(items, collate_fn_map=custom)

    ds = Arrays(ITEMS["int64"], 4)
    ours = list(ThreadDataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate_fn))
    assert torch_paths == [4]  # the worker thread's batch went through `halves`, as torch's would
    assert_same(ours, list(torch_loader(ds, batch_size=4, num_workers=0, collate_fn=collate_fn)))
