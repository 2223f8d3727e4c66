"""Worker info and seeding per worker thread; what threads cannot seed as processes do, said."""

from __future__ import annotations

import inspect
import random
import threading
import warnings

import pytest
import torch
from threadtest import Squares, assert_same, gen, quiet, recorded, torch_loader
from torch.utils.data import Dataset

from memprobe.loaders import thread as thread_mod
from memprobe.loaders.thread import (
    WORKER_THREAD_PREFIX,
    ThreadDataLoader,
    ThreadWorkerWarning,
    get_worker_info,
)


def test_worker_seeds_match_torch() -> None:
    class SeedPerItem(Dataset):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> int:
            return torch.utils.data.get_worker_info().seed

    with quiet():  # both warn about 3 workers on 2 cores
        expected = list(torch_loader(SeedPerItem(), num_workers=3, generator=gen(5)))
        actual = list(ThreadDataLoader(SeedPerItem(), num_workers=3, generator=gen(5)))
    assert_same(actual, expected)
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
            py, gen_, np_rng = info.rng.random_generator, info.rng.torch_generator, info.rng.numpy_generator
            return info.id, info.seed, py.random(), torch.rand(2, generator=gen_), np_rng.random()
        import numpy as np

        return info.id, info.seed, random.random(), torch.rand(2), np.random.random()


def test_worker_rngs_are_seeded_like_torch_workers() -> None:
    np = pytest.importorskip("numpy")
    if "rng" not in inspect.signature(thread_mod.WorkerInfo).parameters:
        pytest.skip("this torch's WorkerInfo has no rng field")
    with quiet():
        expected = list(torch_loader(DrawPerWorker(), batch_size=None, num_workers=3, generator=gen(8)))
        actual = list(ThreadDataLoader(DrawPerWorker(), batch_size=None, num_workers=3, generator=gen(8)))
    assert [a[:2] for a in actual] == [e[:2] for e in expected] and [a[0] for a in actual] == [0, 1, 2]
    for (wid, seed, py, tt, np_draw), (*_, py_t, tt_t, _np_t) in zip(actual, expected, strict=True):
        # random and torch: the same streams a process worker gets from random.seed /
        # torch.manual_seed(base_seed + id).
        assert py == py_t and torch.equal(tt, tt_t)
        # numpy: a Generator from the same seed state torch gives np.random.seed in a process
        # worker (what torch's own thread workers use), not the legacy global stream.
        state = torch.utils.data._utils.worker._generate_state(seed - wid, wid)
        assert np_draw == np.random.default_rng(state).random()
    assert len({a[2] for a in actual}) == 3  # every worker its own stream


def test_threads_do_not_reseed_global_rngs() -> None:
    np = pytest.importorskip("numpy")
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    torch_state, py_state, np_draw = torch.get_rng_state(), random.getstate(), np.random.random()
    np.random.seed(3)
    list(ThreadDataLoader(Squares(8), batch_size=2, num_workers=2, generator=gen(0)))
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert random.getstate() == py_state
    assert np.random.random() == np_draw


def test_worker_info_is_per_thread_and_none_outside() -> None:
    seen: list[tuple[str, int, int, int, bool]] = []

    class Record(Dataset):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> int:
            mine, theirs = get_worker_info(), torch.utils.data.get_worker_info()
            seen.append(
                (threading.current_thread().name, mine.id, theirs.id, mine.num_workers, mine is theirs)
            )
            assert mine.dataset is self  # the worker's own copy, which it loads from
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
            g = safe_gen()
            assert g is get_worker_info().rng.torch_generator
            return torch.randint(0, 1 << 30, (1,), generator=g)

    first = list(ThreadDataLoader(Draw(), num_workers=2, generator=gen(1)))
    again = list(ThreadDataLoader(Draw(), num_workers=2, generator=gen(1)))
    assert_same(first, again)  # per-thread streams are reproducible
    assert safe_gen() is None


def test_worker_init_fn_called_once_per_worker_in_its_thread() -> None:
    calls: list[tuple[int, str, int]] = []
    lock = threading.Lock()

    def init(worker_id: int) -> None:
        with lock:
            calls.append((worker_id, threading.current_thread().name, get_worker_info().id))

    with quiet():
        loader = ThreadDataLoader(Squares(9), num_workers=3, worker_init_fn=init, persistent_workers=True)
        list(loader)
        list(loader)
    loader.close()
    assert sorted(calls) == [(k, f"{WORKER_THREAD_PREFIX}-{k}", k) for k in range(3)]


# -- a worker_init_fn that seeds the global RNGs: said at run time -----------------------------------


def _seed_numpy_like_torch_docs(worker_id: int) -> None:
    import numpy as np

    np.random.seed(np.random.get_state()[1][0] + worker_id)  # the recipe of many training scripts


class RandomCrops(Dataset):
    """Draws from torch's global RNG in every item, as torchvision's random transforms do."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randint(0, 100, (1,))


def test_worker_init_fn_seeding_global_rngs_is_said_once() -> None:
    pytest.importorskip("numpy")
    loader = ThreadDataLoader(
        RandomCrops(), batch_size=2, num_workers=2, worker_init_fn=_seed_numpy_like_torch_docs
    )
    batches, caught = recorded(lambda: list(loader))
    notices = [msg for category, msg in caught if category is ThreadWorkerWarning]
    assert len(batches) == 8 and len(notices) == 1
    assert "worker_init_fn changed the process-wide numpy.random random generator" in notices[0]
    assert "get_worker_info().seed" in notices[0]


def test_no_notice_for_init_fns_that_leave_global_rngs_alone() -> None:
    """Items drawing from the global RNG (random transforms) are not mistaken for the init fn."""
    opened: list[int] = []
    for init in (None, opened.append):
        loader = ThreadDataLoader(RandomCrops(), batch_size=2, num_workers=2, worker_init_fn=init)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ThreadWorkerWarning)
            assert len(list(loader)) == 8
    assert sorted(opened) == [0, 1]
