"""Tests for memprobe.loaders.thread.ThreadDataLoader (thread-based DataLoader drop-in)."""

from __future__ import annotations

import _thread
import gc
import inspect
import random
import threading
import time
import warnings
from collections import namedtuple
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler

from memprobe.loaders import thread as thread_mod
from memprobe.loaders.thread import (
    WORKER_THREAD_PREFIX,
    ThreadDataLoader,
    get_worker_info,
    gil_enabled,
    torch_native_thread_workers_available,
)

Pair = namedtuple("Pair", "x y")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER_THREAD_PREFIX)]


def _wait_no_worker_threads(timeout: float = 2.0, *, collect: bool = True) -> list[threading.Thread]:
    deadline = time.monotonic() + timeout
    while True:
        alive = _worker_threads()
        if not alive or time.monotonic() > deadline:
            return alive
        if collect:
            gc.collect()  # iterators caught in traceback cycles are freed here
        time.sleep(0.02)


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Threads must stop through reference counting alone: a cycle would keep them until GC."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(autouse=True)
def no_leftover_worker_threads() -> Iterator[None]:
    yield
    alive = _wait_no_worker_threads()
    assert not alive, f"worker threads still running: {[t.name for t in alive]}"


def _assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), (a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b, (a, b)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _torch_loader(dataset: Any, **kwargs: Any) -> DataLoader:
    if kwargs.get("num_workers", 0) > 0:
        kwargs.setdefault("multiprocessing_context", "fork")  # fast on 2 cores
    return DataLoader(dataset, **kwargs)


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


def _pair_collate(batch: list[dict]) -> Pair:
    return Pair(torch.stack([b["x"] for b in batch]).sum(0), [b["i"] for b in batch])


# --------------------------------------------------------------------------
# same batches as torch
# --------------------------------------------------------------------------

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
        kwargs["generator"] = _gen(kwargs["generator"])
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
    expected_kwargs = _build_kwargs(CONFIGS[name], num_workers)
    actual_kwargs = _build_kwargs(CONFIGS[name], num_workers)
    expected = list(_torch_loader(dataset, **expected_kwargs))
    actual = list(ThreadDataLoader(dataset, **actual_kwargs))
    assert len(actual) == len(expected) > 0
    _assert_same(actual, expected)


def test_getitems_is_used() -> None:
    batches = list(ThreadDataLoader(BatchedSquares(6), batch_size=3, num_workers=2))
    assert batches[0]["name"] == ["batched"] * 3
    _assert_same(batches, list(_torch_loader(BatchedSquares(6), batch_size=3, num_workers=2)))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_shuffle_with_global_rng_matches_torch(num_workers: int) -> None:
    # No generator: base seed and RandomSampler both draw from torch's global
    # RNG, so the order only matches if the draws happen in torch's order.
    torch.manual_seed(99)
    expected = list(_torch_loader(Squares(), batch_size=4, shuffle=True, num_workers=num_workers))
    after_torch = torch.rand(1)
    torch.manual_seed(99)
    actual = list(ThreadDataLoader(Squares(), batch_size=4, shuffle=True, num_workers=num_workers))
    _assert_same(actual, expected)
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
    expected = list(_torch_loader(Squares(), batch_sampler=EagerShuffleBatches(), num_workers=num_workers))
    torch.manual_seed(5)
    actual = list(ThreadDataLoader(Squares(), batch_sampler=EagerShuffleBatches(), num_workers=num_workers))
    _assert_same(actual, expected)


def test_worker_seeds_match_torch() -> None:
    class SeedPerItem(Dataset):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> int:
            return torch.utils.data.get_worker_info().seed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about 3 workers on 2 cores
        expected = list(_torch_loader(SeedPerItem(), num_workers=3, generator=_gen(5)))
    actual = list(ThreadDataLoader(SeedPerItem(), num_workers=3, generator=_gen(5)))
    _assert_same(actual, expected)
    assert actual[1] - actual[0] == 1 and actual[2] - actual[0] == 2  # base_seed + k


class DrawPerWorker(Dataset):
    """Item k: worker id, seed and first draws of the worker's random / torch / numpy RNGs.

    Under torch's process workers those are the reseeded process-global RNGs; in threads they are
    the worker's own generators in ``get_worker_info().rng``."""

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> tuple:
        info = torch.utils.data.get_worker_info()
        if info.worker_method == "thread":
            py, gen, np_rng = info.rng.random_generator, info.rng.torch_generator, info.rng.numpy_generator
            return info.id, info.seed, py.random(), torch.rand(2, generator=gen), np_rng.random()
        import numpy as np

        return info.id, info.seed, random.random(), torch.rand(2), np.random.random()


def test_worker_rngs_are_seeded_like_torch_workers() -> None:
    np = pytest.importorskip("numpy")
    if "rng" not in inspect.signature(thread_mod.WorkerInfo).parameters:
        pytest.skip("this torch's WorkerInfo has no rng field")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about 3 workers on 2 cores
        expected = list(_torch_loader(DrawPerWorker(), batch_size=None, num_workers=3, generator=_gen(8)))
    actual = list(ThreadDataLoader(DrawPerWorker(), batch_size=None, num_workers=3, generator=_gen(8)))
    assert [a[:2] for a in actual] == [e[:2] for e in expected] and [a[0] for a in actual] == [0, 1, 2]
    for (wid, seed, py, tt, np_draw), (*_, py_t, tt_t, _np_t) in zip(actual, expected):
        # random and torch: the same streams a process worker gets from random.seed /
        # torch.manual_seed(base_seed + id).
        assert py == py_t and torch.equal(tt, tt_t)
        # numpy: a Generator from the same seed state torch gives np.random.seed in a process
        # worker (what torch's own thread workers use), not the legacy global stream.
        base_seed = seed - wid
        state = torch.utils.data._utils.worker._generate_state(base_seed, wid)
        assert np_draw == np.random.default_rng(state).random()
    assert len({a[2] for a in actual}) == 3  # every worker its own stream


def test_threads_do_not_reseed_global_rngs() -> None:
    np = pytest.importorskip("numpy")
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    torch_state, py_state, np_draw = torch.get_rng_state(), random.getstate(), np.random.random()
    np.random.seed(3)
    list(ThreadDataLoader(Squares(8), batch_size=2, num_workers=2, generator=_gen(0)))
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert random.getstate() == py_state
    assert np.random.random() == np_draw


def test_persistent_workers_two_epochs_match_torch_and_reuse_threads() -> None:
    gen_t, gen_m = _gen(11), _gen(11)
    kw = {"batch_size": 4, "shuffle": True, "num_workers": 2, "persistent_workers": True}
    torch_loader = _torch_loader(Squares(), generator=gen_t, **kw)
    loader = ThreadDataLoader(Squares(), generator=gen_m, **kw)
    idents = []
    for _ in range(2):
        expected = list(torch_loader)
        actual = list(loader)
        _assert_same(actual, expected)
        idents.append(sorted(t.ident for t in _worker_threads()))
    assert len(idents[0]) == 2 and idents[0] == idents[1]
    # Stopping mid-epoch must not leak stale batches into the next epoch.
    next(iter(torch_loader))
    next(iter(loader))
    _assert_same(list(loader), list(torch_loader))
    loader.close()
    assert not _wait_no_worker_threads(0.5)


def test_persistent_threads_stop_when_loader_is_deleted() -> None:
    with _no_cyclic_gc():
        loader = ThreadDataLoader(Squares(8), num_workers=2, persistent_workers=True)
        list(loader)
        assert len(_worker_threads()) == 2
        del loader
        assert not _wait_no_worker_threads(collect=False)


# --------------------------------------------------------------------------
# iterable datasets and worker info
# --------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [2, 3])
@pytest.mark.parametrize(
    "info_fn", [torch.utils.data.get_worker_info, get_worker_info], ids=["torch", "memprobe"]
)
def test_iterable_sharding_yields_each_element_once(num_workers: int, info_fn: Callable) -> None:
    dataset = Shards(17, info_fn)
    batches = list(ThreadDataLoader(dataset, batch_size=2, num_workers=num_workers))
    items = [int(v) for b in batches for v in b]
    assert sorted(items) == list(range(17))
    if info_fn is torch.utils.data.get_worker_info:  # same interleaving as torch
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about 3 workers on 2 cores
            _assert_same(batches, list(_torch_loader(dataset, batch_size=2, num_workers=num_workers)))


def test_iterable_drop_last_and_no_batching_match_torch() -> None:
    for kwargs in ({"batch_size": 3, "drop_last": True}, {"batch_size": None}):
        expected = list(_torch_loader(Shards(11), num_workers=2, **kwargs))
        _assert_same(list(ThreadDataLoader(Shards(11), num_workers=2, **kwargs)), expected)


def test_iterable_persistent_epochs_restart_each_shard() -> None:
    kw = {"batch_size": 2, "num_workers": 2, "persistent_workers": True}
    torch_loader, loader = _torch_loader(Shards(9), **kw), ThreadDataLoader(Shards(9), **kw)
    for _ in range(2):
        _assert_same(list(loader), list(torch_loader))
    loader.close()


def test_worker_info_is_per_thread_and_none_outside() -> None:
    seen: list[tuple[str, int, int, int, bool]] = []

    class Record(Dataset):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> int:
            mine, theirs = get_worker_info(), torch.utils.data.get_worker_info()
            name = threading.current_thread().name
            seen.append((name, mine.id, theirs.id, mine.num_workers, mine is theirs))
            assert mine.dataset is self  # threads share the dataset object
            return i

    list(ThreadDataLoader(Record(), num_workers=2))
    assert {(name, wid) for name, wid, *_ in seen} == {
        (f"{WORKER_THREAD_PREFIX}-0", 0),
        (f"{WORKER_THREAD_PREFIX}-1", 1),
    }
    assert all(m == t and n == 2 and same for _, m, t, n, same in seen)
    assert get_worker_info() is None and torch.utils.data.get_worker_info() is None


def test_thread_safe_generator_is_per_worker() -> None:
    safe_gen = getattr(torch.random, "thread_safe_generator", None)
    if safe_gen is None:
        pytest.skip("torch has no thread_safe_generator")

    class Draw(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> torch.Tensor:
            gen = safe_gen()
            assert gen is get_worker_info().rng.torch_generator
            return torch.randint(0, 1 << 30, (1,), generator=gen)

    first = list(ThreadDataLoader(Draw(), num_workers=2, generator=_gen(1)))
    again = list(ThreadDataLoader(Draw(), num_workers=2, generator=_gen(1)))
    _assert_same(first, again)  # per-thread streams are reproducible
    assert safe_gen() is None


def test_worker_init_fn_called_once_per_worker_in_its_thread() -> None:
    calls: list[tuple[int, str, int]] = []
    lock = threading.Lock()

    def init(worker_id: int) -> None:
        with lock:
            calls.append((worker_id, threading.current_thread().name, get_worker_info().id))

    loader = ThreadDataLoader(Squares(9), num_workers=3, worker_init_fn=init, persistent_workers=True)
    list(loader)
    list(loader)
    loader.close()
    assert sorted(calls) == [(k, f"{WORKER_THREAD_PREFIX}-{k}", k) for k in range(3)]


# --------------------------------------------------------------------------
# errors, timeout, shutdown
# --------------------------------------------------------------------------


class FailsAt(Dataset):
    def __init__(self, bad: int, exc: BaseException) -> None:
        self.bad, self.exc = bad, exc

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise self.exc
        return i


def test_worker_exception_reraised_with_worker_id_and_traceback() -> None:
    loader = ThreadDataLoader(FailsAt(5, ValueError("bad item 5")), num_workers=2)
    got = []
    with pytest.raises(ValueError) as excinfo:
        for batch in loader:
            got.append(int(batch))
    msg = str(excinfo.value)
    assert "in ThreadDataLoader worker thread 1" in msg  # index 5 -> slot 5 -> worker 1
    assert "Traceback (most recent call last)" in msg and "__getitem__" in msg and "bad item 5" in msg
    assert got == [0, 1, 2, 3, 4]


def test_worker_exception_odd_types() -> None:
    with pytest.raises(KeyError, match="worker thread 0"):
        list(ThreadDataLoader(FailsAt(0, KeyError("k")), num_workers=1))
    # Exceptions that cannot be rebuilt from one message become RuntimeError.
    odd = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "nope")
    with pytest.raises(RuntimeError, match="Caught UnicodeDecodeError in ThreadDataLoader worker thread 0"):
        list(ThreadDataLoader(FailsAt(0, odd), num_workers=1))


def test_worker_init_fn_exception_is_reraised() -> None:
    def init(worker_id: int) -> None:
        raise OSError(f"init failed {worker_id}")

    with pytest.raises(OSError, match="init failed 0"):
        list(ThreadDataLoader(Squares(4), num_workers=2, worker_init_fn=init))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_worker_thread_dying_is_reported() -> None:
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(ThreadDataLoader(FailsAt(1, SystemExit(3)), num_workers=2))


def test_timeout_raises_promptly() -> None:
    loader = ThreadDataLoader(Slow(4, 0.6), num_workers=1, timeout=0.1)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 0.1 seconds"):
        next(iter(loader))
    assert time.monotonic() - start < 0.4  # not blocked by the item still loading


def test_break_out_of_loop_stops_threads() -> None:
    with _no_cyclic_gc():
        for i, _ in enumerate(ThreadDataLoader(Slow(50, 0.01), num_workers=2)):
            if i == 2:
                break
        assert not _wait_no_worker_threads(collect=False), "threads survived break"


def test_deleting_iterator_stops_threads() -> None:
    with _no_cyclic_gc():
        it = iter(ThreadDataLoader(Squares(), num_workers=2))
        next(it)
        assert len(_worker_threads()) == 2
        del it
        assert not _wait_no_worker_threads(collect=False)


def test_threads_stop_once_a_worker_exception_is_handled() -> None:
    # The for loop dropped its iterator; only the exception's traceback still refers to it.
    with _no_cyclic_gc():
        try:
            for _ in ThreadDataLoader(FailsAt(5, ValueError("bad item 5")), num_workers=2):
                pass
        except ValueError:
            assert len(_worker_threads()) == 2  # like torch: next() could still go on
        assert not _wait_no_worker_threads(collect=False), "threads kept alive by the traceback"


def test_exception_in_loop_body_stops_threads() -> None:
    with _no_cyclic_gc():
        with pytest.raises(KeyboardInterrupt):
            for i, _ in enumerate(ThreadDataLoader(Slow(50, 0.01), num_workers=2)):
                if i == 1:
                    raise KeyboardInterrupt
        assert not _wait_no_worker_threads(collect=False)


def test_keyboard_interrupt_while_waiting_stops_threads() -> None:
    class Interrupts(Slow):
        def __getitem__(self, i: int) -> int:
            if i == 2:
                _thread.interrupt_main()  # main thread is blocked in __next__
            return super().__getitem__(i)

    it = iter(ThreadDataLoader(Interrupts(200, 0.05), num_workers=2))
    with pytest.raises(KeyboardInterrupt):
        for _ in it:
            pass
    assert it.closed  # the iterator shut itself down, without waiting for GC
    assert not _wait_no_worker_threads()


def test_threads_end_with_epoch() -> None:
    it = iter(ThreadDataLoader(Squares(6), num_workers=2))
    assert len(_worker_threads()) == 2
    list(it)
    assert not _worker_threads()  # joined before StopIteration, not left to GC


def test_close_stops_live_iterators() -> None:
    loader = ThreadDataLoader(Squares(), num_workers=2)
    it = iter(loader)
    next(it)
    loader.close()
    assert not _worker_threads()
    with pytest.raises(StopIteration):
        next(it)


# --------------------------------------------------------------------------
# in_order=False, len, validation, helpers
# --------------------------------------------------------------------------


def test_in_order_false_yields_all_batches_early() -> None:
    loader = ThreadDataLoader(Slow(10, 0.4, slow_index=0), num_workers=2, in_order=False)
    batches = [int(b) for b in loader]
    assert sorted(batches) == list(range(10))
    assert batches[0] != 0  # the slow batch 0 did not block the others


def test_in_order_true_waits_for_slow_batch() -> None:
    batches = [int(b) for b in ThreadDataLoader(Slow(6, 0.2, slow_index=0), num_workers=2)]
    assert batches == list(range(6))


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


def test_len_iterable_warns_when_exceeded() -> None:
    class NotSharded(Shards):
        def __iter__(self) -> Iterator[int]:
            return iter(range(self.n))

    loader = ThreadDataLoader(NotSharded(4), batch_size=2, num_workers=2)
    assert len(loader) == 2
    with pytest.warns(UserWarning, match="len\\(\\) was 2"):
        assert len(list(loader)) == 4


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


def test_ignored_torch_only_arguments_warn() -> None:
    with pytest.warns(UserWarning, match="multiprocessing_context"):
        loader = ThreadDataLoader(Squares(4), num_workers=1, multiprocessing_context="fork")
    assert len(list(loader)) == 4


def test_pin_memory_without_cuda_warns_and_still_loads() -> None:
    if torch.cuda.is_available():
        pytest.skip("needs a CPU-only machine")
    with pytest.warns(UserWarning, match="pin_memory"):
        loader = ThreadDataLoader(Squares(4), batch_size=2, num_workers=1, pin_memory=True)
    _assert_same(list(loader), list(DataLoader(Squares(4), batch_size=2)))


def test_signature_matches_torch_positions() -> None:
    ours = list(inspect.signature(ThreadDataLoader.__init__).parameters)
    theirs = [p for p in inspect.signature(DataLoader.__init__).parameters if p != "worker_method"]
    assert ours == theirs


def test_gil_enabled() -> None:
    expected = getattr(__import__("sys"), "_is_gil_enabled", lambda: True)()
    assert gil_enabled() is expected


def test_native_thread_worker_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torch_native_thread_workers_available() is (
        "worker_method" in inspect.signature(DataLoader.__init__).parameters
    )

    class FutureLoader:
        def __init__(self, dataset: Any, *, worker_method: str = "multiprocessing") -> None:
            pass

    monkeypatch.setattr(thread_mod.torch.utils.data, "DataLoader", FutureLoader)
    assert torch_native_thread_workers_available() is True


class _Pinnable:
    """A custom batch type with its own pin_memory(), as torch's docs describe for pinning."""

    def __init__(self, value: int) -> None:
        self.value = value

    def pin_memory(self) -> str:
        return f"pinned {self.value}"


def test_pin_memory_pins_custom_batches_and_keeps_their_containers(monkeypatch: pytest.MonkeyPatch) -> None:
    """With an accelerator, batches are pinned as torch's pin-memory thread pins them: objects
    with their own pin_memory(), inside the caller's own mapping and tuple types."""
    import collections

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        monkeypatch.setattr(accelerator, "is_available", lambda: True)
    else:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    Pair = collections.namedtuple("Pair", "first second")

    def collate(items: list[int]) -> collections.OrderedDict:
        return collections.OrderedDict(batch=Pair(_Pinnable(items[0]), [_Pinnable(i) for i in items]))

    loader = ThreadDataLoader(list(range(4)), batch_size=2, num_workers=1, pin_memory=True, collate_fn=collate)
    batches = list(loader)
    assert [type(b) for b in batches] == [collections.OrderedDict] * 2
    assert type(batches[0]["batch"]) is Pair
    assert batches[1]["batch"] == Pair("pinned 2", ["pinned 2", "pinned 3"])
