"""Two more thread-based loaders, listed in ``memprobe.loaders.EXTRA_MODES`` under their scenario mode names.

``torch-thread``
    torch's own thread workers: ``DataLoader(..., worker_method="thread")``. They exist only on
    torch's development branch; on a torch without them, building the loader raises a
    :class:`~memprobe.core.errors.MemprobeError` that says so (the runner records the run as failed
    with that message).

``torchdata-thread``
    A ``torchdata.nodes`` pipeline with thread workers, built the way torchdata's docs build a
    map-style DataLoader replacement::

        SamplerWrapper(RandomSampler(dataset, generator) | SequentialSampler(dataset))
          -> ParallelMapper(dataset.__getitem__, num_workers=W, method="thread", in_order=True)
          -> Batcher(batch_size, drop_last=False)
          -> ParallelMapper(collate_fn, num_workers=1, method="thread", in_order=True)
          -> Prefetcher(prefetch_factor * W)
          -> Loader

    Items are loaded one per task by ``W`` threads (at most ``2 * W`` items in flight: torchdata's
    default, which its ``max_concurrent`` can only lower); one more thread batches and collates, so
    collation overlaps item loading instead of stalling it; the Prefetcher keeps
    ``prefetch_factor * W`` collated batches ready, the same number of batches torch's DataLoader
    keeps in flight. The order of items is torch's: with ``shuffle=True`` one int64 is drawn from
    ``generator`` before the permutation, as torch's DataLoader draws its base seed, so the same
    generator state gives the same order as ``DataLoader(shuffle=True, generator=...)``.

    Differences from torch's DataLoader worth knowing (they are torchdata's behaviour):

    * threads are started afresh every epoch (``persistent_workers`` is accepted and ignored);
    * ``torch.utils.data.get_worker_info()`` is ``None`` inside the map threads;
    * each map thread calls ``torch.set_num_threads(1)``, which is process-wide: after the first
      epoch the *main* process's torch intra-op pool is one thread too.
"""

from __future__ import annotations

import inspect
import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler, Sampler, SequentialSampler, default_collate

from memprobe.core.errors import MemprobeError

__all__ = ["TorchdataThreadLoader", "build_torch_thread", "build_torchdata_thread", "torchdata_nodes"]

TORCHDATA_HINT = "pip install 'torchdata>=0.10' (torchdata.nodes; e.g. pip install torchdata)"


# -- torch-thread ------------------------------------------------------------------------------


def torch_native_thread_workers_available() -> bool:
    """Return True if the installed torch DataLoader takes ``worker_method``.

    Native thread workers exist only on torch's development branch; this inspects the signature
    rather than trusting a version number.
    """
    try:
        params = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    except (TypeError, ValueError):
        return False
    return "worker_method" in params


def torch_thread_missing_reason() -> str | None:
    """None when the installed torch's DataLoader takes ``worker_method``, else why not."""
    if torch_native_thread_workers_available():
        return None
    return (
        f"this torch ({torch.__version__}) has no native thread workers (DataLoader has no "
        "'worker_method' argument); they exist only on torch's development branch: install a "
        "torch built from it to use this mode, or use mode 'thread' (memprobe's "
        "ThreadDataLoader) or 'torchdata-thread' instead"
    )


def build_torch_thread(
    dataset: Any,
    *,
    num_workers: int,
    prefetch_factor: int = 2,
    persistent_workers: bool = False,
    batch_size: int = 1,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    collate_fn: Callable | None = None,
) -> DataLoader:
    """``DataLoader(dataset, worker_method="thread", ...)``; MemprobeError where torch lacks it."""
    reason = torch_thread_missing_reason()
    if reason is not None:
        raise MemprobeError(reason)
    kwargs: dict[str, Any] = {
        "batch_size": batch_size,
        "shuffle": shuffle,
        "generator": generator,
        "num_workers": num_workers,
        "persistent_workers": persistent_workers,
    }
    if num_workers > 0:
        kwargs["prefetch_factor"] = prefetch_factor
    if collate_fn is not None:
        kwargs["collate_fn"] = collate_fn
    # A keyword of the torch builds that have thread workers (checked before this is registered),
    # not of every torch the type check sees.
    kwargs["worker_method"] = "thread"
    return DataLoader(dataset, **kwargs)


# -- torchdata-thread --------------------------------------------------------------------------


def torchdata_nodes() -> Any:
    """The ``torchdata.nodes`` module, or a MemprobeError saying how to install it."""
    try:
        import torchdata
    except ImportError:
        raise MemprobeError(f"torchdata is not installed: {TORCHDATA_HINT}") from None
    try:
        import torchdata.nodes as nodes
    except ImportError as exc:
        version = getattr(torchdata, "__version__", "?")
        raise MemprobeError(
            f"this torchdata ({version}) has no usable torchdata.nodes ({exc}); "
            f"it needs torchdata 0.10 or later: {TORCHDATA_HINT}"
        ) from None
    return nodes


class _TorchOrderSampler(Sampler[int]):
    """Indices of ``inner``, after drawing the one int64 torch's DataLoader draws per iterator.

    torch's DataLoader takes its workers' base seed from ``generator`` when an iterator is made,
    before its sampler's first draw; drawing it here too keeps shuffled orders identical."""

    def __init__(self, inner: Sampler[int], generator: torch.Generator | None) -> None:
        self.inner = inner
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        yield from self.inner

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]


class TorchdataThreadLoader:
    """A DataLoader-like iterable over a ``torchdata.nodes`` thread pipeline (see module doc).

    ``len()`` is the number of batches per epoch; iterating yields collated batches in sampler
    order. :meth:`close` (or the garbage collection of the loader) stops every pipeline thread;
    a fully consumed epoch stops them by itself.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        num_workers: int,
        prefetch_factor: int = 2,
        persistent_workers: bool = False,
        batch_size: int = 1,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        collate_fn: Callable | None = None,
        drop_last: bool = False,
        collate_workers: int = 1,
    ) -> None:
        tn = torchdata_nodes()
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1 for torchdata-thread, got {num_workers}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be >= 1, got {prefetch_factor}")
        self.dataset = dataset
        self.num_workers = num_workers
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers  # accepted for the common signature; no effect
        self.collate_fn = collate_fn or default_collate
        inner = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        self.sampler = _TorchOrderSampler(inner, generator)
        items = tn.ParallelMapper(
            tn.SamplerWrapper(self.sampler),
            map_fn=dataset.__getitem__,
            num_workers=num_workers,
            method="thread",
            in_order=True,
        )
        batches = tn.Batcher(items, batch_size=batch_size, drop_last=drop_last)
        collated = tn.ParallelMapper(
            batches, map_fn=self.collate_fn, num_workers=collate_workers, method="thread", in_order=True
        )
        self.root = tn.Prefetcher(collated, prefetch_factor=prefetch_factor * num_workers)
        self._loader = tn.Loader(self.root)
        # Stop order: producer first, so each stage's threads see their upstream end and exit
        # at once instead of waiting for one more item or batch.
        self._stages = [items, collated, self.root]
        self._finalizer = weakref.finalize(self, _shutdown_stages, self._stages)
        self._finalizer.atexit = False  # daemon threads; don't make interpreter exit wait on joins

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        # The iterator keeps the loader alive: ``for b in TorchdataThreadLoader(...)`` must not
        # let the loader's finalizer stop the pipeline under it.
        return _LoaderIter(self, iter(self._loader))

    def close(self) -> None:
        """Stop and join every thread of the pipeline (bounded: torchdata joins with a timeout)."""
        _shutdown_stages(self._stages)

    def __enter__(self) -> TorchdataThreadLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"TorchdataThreadLoader(num_workers={self.num_workers}, batch_size={self.batch_size}, "
            f"prefetch_factor={self.prefetch_factor})"
        )


class _LoaderIter:
    """An iterator over one epoch of a :class:`TorchdataThreadLoader` that holds its loader."""

    def __init__(self, owner: TorchdataThreadLoader, it: Iterator[Any]) -> None:
        self._owner = owner
        self._it = it

    def __iter__(self) -> _LoaderIter:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def __len__(self) -> int:
        return len(self._owner)


def _shutdown_stages(stages: list[Any]) -> None:
    """Shut down the running iterator of each stage (a Prefetcher or a ParallelMapper).

    torchdata stops a stage's threads when its iterator is reset or garbage collected; the Loader
    and its iterator reference each other, so that collection waits for the cyclic GC. This stops
    them now, through the same ``_shutdown`` torchdata calls itself."""
    for stage in stages:
        it = getattr(stage, "_it", None)
        it = getattr(it, "_it", it)  # ParallelMapper -> _ParallelMapperImpl -> its iterator
        shutdown = getattr(it, "_shutdown", None)
        if shutdown is not None:
            shutdown()


def build_torchdata_thread(
    dataset: Any,
    *,
    num_workers: int,
    prefetch_factor: int = 2,
    persistent_workers: bool = False,
    batch_size: int = 1,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    collate_fn: Callable | None = None,
) -> TorchdataThreadLoader:
    """The ``torchdata-thread`` loader (the ``EXTRA_MODES`` signature)."""
    return TorchdataThreadLoader(
        dataset,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=collate_fn,
    )
