"""torch's DataLoader arguments, checks and warnings, and the package's small helpers."""

from __future__ import annotations

import collections
import inspect
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from threadtest import Shards, Squares, assert_same, recorded, torch_loader
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from memprobe.loaders import thread as thread_mod
from memprobe.loaders.thread import ThreadDataLoader, gil_enabled, torch_native_thread_workers_available


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"batch_size": 3}, 8),
        ({"batch_size": 3, "drop_last": True}, 7),
        ({"batch_size": None}, 23),
        ({"batch_sampler": [[0, 1], [2]]}, 2),
    ],
)
def test_len_map_style(kwargs: dict, expected: int) -> None:
    assert len(ThreadDataLoader(Squares(), **kwargs)) == expected == len(DataLoader(Squares(), **kwargs))


def test_len_iterable() -> None:
    assert len(ThreadDataLoader(Shards(11), batch_size=3)) == 4
    assert len(ThreadDataLoader(Shards(11), batch_size=3, drop_last=True)) == 3

    class NoLen(IterableDataset):
        def __iter__(self) -> Iterator[int]:
            return iter(range(3))

    with pytest.raises(TypeError):
        len(ThreadDataLoader(NoLen()))


_SAMPLER = SequentialSampler(range(4))
_BATCH_SAMPLER = BatchSampler(_SAMPLER, 2, False)
INVALID = [
    ({"num_workers": -1}, "num_workers"),
    ({"timeout": -1}, "timeout"),
    ({"prefetch_factor": 2}, "prefetch_factor"),
    ({"num_workers": 2, "prefetch_factor": -1}, "prefetch_factor"),
    ({"persistent_workers": True}, "persistent_workers"),
    ({"sampler": _SAMPLER, "shuffle": True}, "mutually exclusive with shuffle"),
    ({"batch_sampler": _BATCH_SAMPLER, "batch_size": 2}, "batch_sampler option is mutually"),
    ({"batch_sampler": _BATCH_SAMPLER, "shuffle": True}, "batch_sampler option is mutually"),
    ({"batch_sampler": _BATCH_SAMPLER, "sampler": _SAMPLER}, "batch_sampler option is mutually"),
    ({"batch_sampler": _BATCH_SAMPLER, "drop_last": True}, "batch_sampler option is mutually"),
    ({"batch_size": None, "drop_last": True}, "batch_size=None"),
    ({"dataset": Shards(4), "batch_size": None, "drop_last": True}, "batch_size=None"),
    ({"dataset": Shards(4), "shuffle": True}, "expected unspecified shuffle"),
    ({"dataset": Shards(4), "sampler": _SAMPLER}, "expected unspecified sampler"),
    ({"dataset": Shards(4), "batch_sampler": [[0]]}, "expected unspecified batch_sampler"),
]


@pytest.mark.parametrize(("kwargs", "match"), INVALID)
def test_invalid_arguments_raise_like_torch(kwargs: dict, match: str) -> None:
    kwargs = dict(kwargs)
    dataset = kwargs.pop("dataset", Squares(4))
    with pytest.raises(ValueError):
        DataLoader(dataset, **kwargs)
    with pytest.raises(ValueError, match=match):
        ThreadDataLoader(dataset, **kwargs)


def test_stricter_than_torch_validation() -> None:
    with pytest.raises(ValueError, match="prefetch_factor"):
        ThreadDataLoader(Squares(), num_workers=2, prefetch_factor=0)
    with pytest.raises(ValueError, match="timeout option needs num_workers > 0"):
        ThreadDataLoader(Squares(), timeout=1)


def test_attributes_frozen_after_init_and_defaults() -> None:
    loader = ThreadDataLoader(Squares(), num_workers=2)
    assert loader.prefetch_factor == 2 and loader.in_order is True
    with pytest.raises(ValueError, match="batch_size attribute"):
        loader.batch_size = 3
    assert ThreadDataLoader(Squares()).prefetch_factor is None


def test_more_workers_than_cpus_warns_as_torch_does() -> None:
    """Same category and words (filters on torch's message keep working), at the same points:
    when the loader is made and whenever an iterator starts new workers. The CPUs counted as
    torch counts them (2.10 in its check itself, 2.13 in torch._utils.cpu_count, which 2.10 does
    not have): the CPUs this process may run on."""
    too_many = len(os.sched_getaffinity(0)) + 1

    def run(make: Any, **kwargs: Any) -> list:
        def go() -> None:
            loader = make(Squares(4), num_workers=too_many, **kwargs)
            for _ in range(2):
                list(loader)
            getattr(loader, "close", lambda: None)()

        return recorded(go)[1]

    for kwargs in ({}, {"persistent_workers": True}):
        theirs, ours = run(torch_loader, **kwargs), run(ThreadDataLoader, **kwargs)
        assert ours == theirs
        assert len(ours) == (2 if kwargs else 3)
        assert ours[0][0] is UserWarning and ours[0][1].startswith(
            f"This DataLoader will create {too_many} worker"
        )
    _, quiet_run = recorded(lambda: list(ThreadDataLoader(Squares(4), num_workers=1)))
    assert quiet_run == []


def test_ignored_torch_only_arguments_warn() -> None:
    with pytest.warns(UserWarning, match="multiprocessing_context"):
        loader = ThreadDataLoader(Squares(4), num_workers=1, multiprocessing_context="fork")
    assert len(list(loader)) == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pin_memory": True},
        {"pin_memory": True, "num_workers": 0},
        {"pin_memory": True, "pin_memory_device": "cuda"},
        {"pin_memory": True, "persistent_workers": True},
        {"pin_memory_device": "cuda"},  # nothing to pin: torch says nothing
    ],
)
def test_pinning_warns_as_torch_does_and_still_loads(kwargs: dict) -> None:
    """torch's words (users silence "'pin_memory' argument is set as true" by message on CPU
    machines), at its moments: each new iterator, a persistent one once."""
    if torch.cuda.is_available():
        pytest.skip("needs a CPU-only machine")

    def run(make: Any) -> tuple[list, list]:
        def go() -> list:
            loader = make(Squares(4), batch_size=2, **{"num_workers": 1, **kwargs})
            batches = [list(loader) for _ in range(2)]
            getattr(loader, "close", lambda: None)()
            return batches

        return recorded(go)

    (theirs, their_warnings), (ours, our_warnings) = run(torch_loader), run(ThreadDataLoader)
    assert our_warnings == their_warnings
    assert_same(ours, theirs)
    assert bool(our_warnings) == bool(kwargs.get("pin_memory"))


class _Pinnable:
    """A custom batch type with its own pin_memory(), as torch's docs describe for pinning."""

    def __init__(self, value: int) -> None:
        self.value = value

    def pin_memory(self) -> str:
        return f"pinned {self.value}"


def test_pin_memory_pins_custom_batches_and_keeps_their_containers(monkeypatch: pytest.MonkeyPatch) -> None:
    """With an accelerator, batches are pinned as torch's pin-memory thread pins them: objects
    with their own pin_memory(), inside the caller's own mapping and tuple types."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        monkeypatch.setattr(accelerator, "is_available", lambda: True)
    else:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    Pair = collections.namedtuple("Pair", "first second")

    def collate(items: list[int]) -> collections.OrderedDict:
        return collections.OrderedDict(batch=Pair(_Pinnable(items[0]), [_Pinnable(i) for i in items]))

    loader = ThreadDataLoader(
        list(range(4)), batch_size=2, num_workers=1, pin_memory=True, collate_fn=collate
    )
    batches = list(loader)
    assert [type(b) for b in batches] == [collections.OrderedDict] * 2
    assert type(batches[0]["batch"]) is Pair
    assert batches[1]["batch"] == Pair("pinned 2", ["pinned 2", "pinned 3"])


def test_signature_matches_torch_positions() -> None:
    ours = list(inspect.signature(ThreadDataLoader.__init__).parameters)
    theirs = [p for p in inspect.signature(DataLoader.__init__).parameters if p != "worker_method"]
    assert ours == theirs


def test_gil_enabled() -> None:
    assert gil_enabled() is getattr(sys, "_is_gil_enabled", lambda: True)()


def test_native_thread_worker_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torch_native_thread_workers_available() is (
        "worker_method" in inspect.signature(DataLoader.__init__).parameters
    )

    class FutureLoader:
        def __init__(self, dataset: Any, *, worker_method: str = "multiprocessing") -> None:
            pass

    monkeypatch.setattr(thread_mod.torch.utils.data, "DataLoader", FutureLoader)
    assert torch_native_thread_workers_available() is True
