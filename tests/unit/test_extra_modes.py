"""The extra thread modes: torchdata-thread (torchdata.nodes) and torch-thread (torch's native)."""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from memprobe.core.errors import MemprobeError
from memprobe.loaders import EXTRA_MODES, build_loader, extra
from memprobe.loaders.thread import torch_native_thread_workers_available


class Squares(Dataset):
    """Item i -> {"i": i, "x": tensor of i, i*i}; cheap and order-revealing."""

    def __init__(self, n: int, delay_s: float = 0.0) -> None:
        self.n, self.delay_s = n, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if self.delay_s:
            time.sleep(self.delay_s)
        return {"i": i, "x": torch.tensor([i, i * i], dtype=torch.float32)}


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def _wait_threads_gone(before: set[threading.Thread], timeout: float = 60.0) -> set[threading.Thread]:
    deadline = time.monotonic() + timeout
    while True:
        extra_threads = {t for t in _threads() - before if t.is_alive()}
        if not extra_threads or time.monotonic() > deadline:
            return extra_threads
        gc.collect()
        time.sleep(0.05)


def _ids(loader) -> list[list[int]]:
    return [b["i"].tolist() for b in loader]


td = pytest.importorskip("torchdata.nodes", reason="torchdata-thread needs torchdata: pip install torchdata")


def test_both_modes_are_registered() -> None:
    assert EXTRA_MODES["torchdata-thread"] is extra.build_torchdata_thread
    assert EXTRA_MODES["torch-thread"] is extra.build_torch_thread


@pytest.mark.parametrize("n,batch_size", [(100, 8), (64, 16), (5, 8), (1, 1)])
def test_torchdata_thread_same_batches_in_order_without_shuffle(n: int, batch_size: int) -> None:
    ds = Squares(n)
    loader = build_loader(ds, mode="torchdata-thread", workers=2, batch_size=batch_size, shuffle=False)
    reference = DataLoader(ds, batch_size=batch_size, shuffle=False)
    assert len(loader) == len(reference) == -(-n // batch_size)
    got, want = list(loader), list(reference)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a["i"].tolist() == b["i"].tolist()
        assert torch.equal(a["x"], b["x"])


def test_torchdata_thread_shuffle_uses_the_generator() -> None:
    ds = Squares(200)
    runs = [
        _ids(build_loader(ds, mode="torchdata-thread", workers=2, batch_size=16, shuffle=True, seed=s))
        for s in (1, 1, 2)
    ]
    flat = [sorted(i for b in r for i in b) for r in runs]
    assert flat[0] == flat[1] == flat[2] == list(range(200))  # the same set of items, each once
    assert runs[0] == runs[1]  # same seed, same order
    assert runs[0] != runs[2]  # another seed, another order
    assert [i for b in runs[0] for i in b] != list(range(200))  # actually shuffled
    # Same generator state -> the same order as torch's DataLoader (which draws a base seed first).
    ref = _ids(build_loader(ds, mode="fork", workers=0, batch_size=16, shuffle=True, seed=1))
    assert runs[0] == ref


def test_torchdata_thread_epochs_reshuffle_like_torch() -> None:
    ds = Squares(50)
    loader = build_loader(ds, mode="torchdata-thread", workers=2, batch_size=10, shuffle=True, seed=7)
    reference = build_loader(ds, mode="fork", workers=0, batch_size=10, shuffle=True, seed=7)
    epochs = [_ids(loader) for _ in range(3)]
    assert epochs == [_ids(reference) for _ in range(3)]
    assert epochs[0] != epochs[1]


def test_torchdata_thread_custom_collate_and_parallelism() -> None:
    ds = Squares(40, delay_s=0.01)
    seen: set[str] = set()

    def collate(items: list[dict]) -> list[int]:
        seen.add(threading.current_thread().name)
        return [d["i"] for d in items]

    loader = extra.build_torchdata_thread(ds, num_workers=2, batch_size=8, shuffle=False, collate_fn=collate)
    assert list(loader) == [list(range(k, k + 8)) for k in range(0, 40, 8)]
    assert threading.current_thread().name not in seen  # collation runs off the consuming thread


def test_torchdata_thread_threads_end_after_an_epoch_and_after_close() -> None:
    before = _threads()
    loader = build_loader(Squares(64), mode="torchdata-thread", workers=2, batch_size=8, shuffle=True)
    assert len(list(loader)) == 8
    assert not _wait_threads_gone(before), "threads left after a full epoch"
    # Abandoned mid-epoch: close() stops them.
    it = iter(loader)
    next(it)
    assert _threads() - before  # the pipeline is running
    loader.close()
    assert not _wait_threads_gone(before), "threads left after close()"
    # And the loader still works afterwards.
    assert sorted(i for b in _ids(loader) for i in b) == list(range(64))
    assert not _wait_threads_gone(before)


def test_torchdata_thread_iterating_a_temporary_loader_yields_everything() -> None:
    # Only the iterator references the loader here; the loader must not be finalized under it.
    batches = [
        b["i"].tolist()
        for b in build_loader(Squares(40), mode="torchdata-thread", workers=2, batch_size=8, shuffle=False)
    ]
    assert batches == [list(range(k, k + 8)) for k in range(0, 40, 8)]


def test_torchdata_thread_threads_end_when_the_loader_is_dropped() -> None:
    before = _threads()
    loader = build_loader(Squares(64), mode="torchdata-thread", workers=2, batch_size=8, shuffle=False)
    it = iter(loader)
    next(it)
    del it, loader
    assert not _wait_threads_gone(before), "threads left after the loader was garbage collected"


def test_torchdata_thread_errors_reach_the_caller() -> None:
    class Bad(Squares):
        def __getitem__(self, i: int) -> dict:
            if i == 13:
                raise ValueError("bad item 13")
            return super().__getitem__(i)

    before = _threads()
    loader = build_loader(Bad(40), mode="torchdata-thread", workers=2, batch_size=8, shuffle=False)
    with pytest.raises(ValueError, match="bad item 13"):
        list(loader)
    loader.close()
    assert not _wait_threads_gone(before)


def test_torchdata_missing_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchdata", None)  # import torchdata -> ImportError
    monkeypatch.setitem(sys.modules, "torchdata.nodes", None)
    with pytest.raises(MemprobeError, match=r"torchdata is not installed: pip install"):
        build_loader(Squares(4), mode="torchdata-thread", workers=2, batch_size=2, shuffle=False)


@pytest.mark.skipif(torch_native_thread_workers_available(), reason="this torch has native thread workers")
def test_torch_thread_raises_a_clear_error_on_this_torch() -> None:
    with pytest.raises(MemprobeError) as err:
        build_loader(Squares(4), mode="torch-thread", workers=2, batch_size=2, shuffle=False)
    msg = str(err.value)
    assert torch.__version__.split("+")[0] in msg
    assert "no native thread workers" in msg and "worker_method" in msg and "development branch" in msg


@pytest.mark.skipif(not torch_native_thread_workers_available(), reason="needs torch's native thread workers")
def test_torch_thread_matches_dataloader_where_available() -> None:
    ds = Squares(50)
    loader = build_loader(ds, mode="torch-thread", workers=2, batch_size=8, shuffle=False)
    assert len(loader) == 7
    assert _ids(loader) == _ids(DataLoader(ds, batch_size=8))


def test_workers_zero_ignores_the_mode() -> None:
    loader = build_loader(Squares(10), mode="torchdata-thread", workers=0, batch_size=4, shuffle=False)
    assert isinstance(loader, DataLoader) and _ids(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
