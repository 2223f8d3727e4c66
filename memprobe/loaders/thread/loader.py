"""ThreadDataLoader: torch's DataLoader arguments and checks, iterated by worker threads."""

from __future__ import annotations

import itertools
import math
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    IterDataPipe,
    RandomSampler,
    Sampler,
    SequentialSampler,
    default_collate,
    default_convert,
)

from memprobe.loaders.thread import replicas
from memprobe.loaders.thread.iterator import SingleThreadIter, ThreadPoolIter, accelerator_available

__all__ = ["ThreadDataLoader"]

T = TypeVar("T")


class _InfiniteNoneSampler(Sampler):
    """Endless ``None`` indices: IterableDatasets ignore the index (as in torch)."""

    def __init__(self) -> None:
        pass

    def __iter__(self) -> Iterator[None]:
        return itertools.repeat(None)

    def __len__(self) -> int:
        raise TypeError("Cannot determine the ThreadDataLoader length of an IterableDataset without __len__")


def _checked_prefetch(
    num_workers: int, timeout: float, prefetch_factor: int | None, persistent: bool
) -> int | None:
    """Validate worker arguments like torch; return the effective prefetch_factor."""
    if num_workers < 0:
        raise ValueError(
            "num_workers option should be non-negative; use num_workers=0 to load in the calling thread."
        )
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and timeout > 0:
        raise ValueError("timeout option needs num_workers > 0 (torch fails on it at iteration time)")
    if persistent and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if num_workers == 0:
        if prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified with worker threads; "
                "let num_workers > 0, otherwise set prefetch_factor to None."
            )
        return None
    if prefetch_factor is None:
        return 2
    if prefetch_factor < 1:
        raise ValueError("prefetch_factor option should be a positive integer when num_workers > 0")
    return prefetch_factor


def _checked_sampling(
    dataset: Any,
    shuffle: bool | None,
    sampler: Any,
    batch_sampler: Any,
    batch_size: int | None,
    drop_last: bool,
) -> tuple[bool, int | None, bool]:
    """Validate sampling arguments like torch; return (shuffle, batch_size, drop_last)."""
    if isinstance(dataset, IterableDataset):
        # Indices mean nothing to an IterableDataset, so torch refuses these; an IterDataPipe
        # takes ``shuffle`` as the switch of its own shufflers instead.
        prefix = "ThreadDataLoader with IterableDataset: expected unspecified"
        if isinstance(dataset, IterDataPipe):
            replicas.apply_shuffle(dataset, shuffle)
        elif shuffle not in (False, None):
            raise ValueError(f"{prefix} shuffle option, but got shuffle={shuffle}")
        if sampler is not None:
            raise ValueError(f"{prefix} sampler option, but got sampler={sampler}")
        if batch_sampler is not None:
            raise ValueError(f"{prefix} batch_sampler option, but got batch_sampler={batch_sampler}")
        shuffle = False  # no index sampler to shuffle
    shuffle = bool(shuffle)
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
            )
        return shuffle, None, False
    if batch_size is None and drop_last:
        raise ValueError(
            "batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
        )
    return shuffle, batch_size, drop_last


def _warn_if_too_many_workers(loader: ThreadDataLoader) -> None:
    """torch's own check (same rule, category and words): more workers than usable CPUs."""
    check = getattr(DataLoader, "check_worker_number_rationality", None)
    if check is not None:
        check(loader)  # reads only ``num_workers``


class ThreadDataLoader(Generic[T]):
    """Drop-in for :class:`torch.utils.data.DataLoader` whose workers are threads.

    Arguments mean what they mean for torch's DataLoader (positions included).
    ``multiprocessing_context`` is accepted only so call sites can switch classes, and ignored
    with a warning. ``pin_memory_device`` is ignored as torch ignores it, with torch's warning;
    pinning happens only if an accelerator is available (torch's warning again otherwise).
    ``timeout`` needs ``num_workers > 0``.

    For the same dataset, sampler and generator state, iteration yields the same batches in the
    same order as torch (``in_order=True``), with ``num_workers`` 0 or more, datapipes included
    (shuffled, seeded and sharded per worker as torch does). Each worker thread has its own
    shallow copy of the dataset (a deep copy of an ``IterDataPipe``); the data they refer to is
    shared. torch's warnings come with torch's words: too many workers for the CPUs, an
    ``IterableDataset`` yielding more than its ``len()``. ``persistent_workers=True`` keeps
    threads across epochs; they stop when the loader's iterator is garbage collected or
    :meth:`close` is called.
    """

    _FROZEN = frozenset(
        {"batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"}
    )

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler | Iterable | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        self._initialized = False
        prefetch = _checked_prefetch(num_workers, timeout, prefetch_factor, persistent_workers)
        self._is_iterable = isinstance(dataset, IterableDataset)
        shuffle, batch_size, drop_last = _checked_sampling(
            dataset, shuffle, sampler, batch_sampler, batch_size, drop_last
        )
        if multiprocessing_context is not None:
            warnings.warn(
                "ThreadDataLoader ignores multiprocessing_context: workers are threads", stacklevel=2
            )
        if sampler is None:
            sampler = self._default_sampler(dataset, shuffle, generator)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = replicas.prepared(dataset)
        self.batch_size = batch_size
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.drop_last = drop_last
        self.generator = generator
        self.num_workers = num_workers
        self.prefetch_factor = prefetch
        self.collate_fn = collate_fn or (default_collate if batch_sampler is not None else default_convert)
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._pin = pin_memory and accelerator_available()
        self._iterable_len_called: int | None = None
        self._iterator: ThreadPoolIter | None = None
        self._live: weakref.WeakSet[ThreadPoolIter] = weakref.WeakSet()
        self._initialized = True
        _warn_if_too_many_workers(self)

    def __setattr__(self, name: str, value: Any) -> None:
        # Like torch: changing these after construction would desync the samplers.
        if name in self._FROZEN and getattr(self, "_initialized", False):
            raise ValueError(f"{name} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(name, value)

    @staticmethod
    def _default_sampler(dataset: Any, shuffle: bool, generator: torch.Generator | None) -> Sampler:
        if isinstance(dataset, IterableDataset):
            return _InfiniteNoneSampler()
        if shuffle:
            return RandomSampler(dataset, generator=generator)
        return SequentialSampler(dataset)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers == 0:
            return SingleThreadIter(self)
        if not self.persistent_workers:
            return self._new_pool_iter()
        if self._iterator is None or self._iterator.closed:
            self._iterator = self._new_pool_iter()
        else:
            self._iterator._reset(self)
        return self._iterator

    def _new_pool_iter(self) -> ThreadPoolIter:
        _warn_if_too_many_workers(self)  # torch checks again for every new set of workers
        it = ThreadPoolIter(self)
        self._live.add(it)
        return it

    def __len__(self) -> int:
        if not self._is_iterable:
            return len(self._index_sampler)
        length = len(self.dataset)
        if self.batch_size is not None:
            length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
        self._iterable_len_called = length
        return length

    def close(self) -> None:
        """Stop and join the worker threads of every live iterator of this loader."""
        for it in list(self._live):
            it.shutdown()
        self._iterator = None

    def __enter__(self) -> ThreadDataLoader[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
