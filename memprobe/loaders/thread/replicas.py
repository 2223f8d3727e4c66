"""Each worker thread's own dataset object, as each of torch's worker processes has one.

torch's process workers each hold a copy of the dataset (forked or unpickled), so a
``worker_init_fn`` may configure ``get_worker_info().dataset`` for its worker alone (torch's
documented ``IterableDataset`` example sets ``dataset.start`` / ``dataset.end`` that way), and an
``IterDataPipe`` graph, which keeps its iteration state in its nodes, is iterated once per worker.
Worker threads get the same, without copying data:

* a ``Dataset`` object: a *shallow* copy (``copy.copy``), made when the thread starts. Attributes
  set in a worker stay in that worker; the arrays, tables and lists the dataset refers to are
  shared, not duplicated. A dataset that cannot be copied is shared, with a warning.
* an ``IterDataPipe``: a deep copy of the graph (``copy.deepcopy``, which keeps functions and
  lambdas as they are, as fork would), seeded with the iterator's shared seed and sharded
  (``apply_sharding(num_workers * world_size, worker_id * world_size + rank)``) as torch does
  before calling ``worker_init_fn``. Like a process worker's copy, a deep copy duplicates the
  data the graph holds.
* anything else (a list, an array, a tensor, a ``MapDataPipe``): shared as it is.

The loader wraps datapipes as torch's DataLoader does (``_IterDataPipeSerializationWrapper`` /
``_MapDataPipeSerializationWrapper``), applies ``shuffle`` to an ``IterDataPipe``'s shufflers
(``apply_shuffle_settings``), and draws the shared seed for its random datapipes from the loader's
generator at the same points as torch, so the same generator gives the same order.
"""

from __future__ import annotations

import copy
import threading
import warnings
from typing import Any

import torch
from torch.utils.data import Dataset, IterDataPipe, MapDataPipe, graph_settings

__all__ = ["apply_shuffle", "distributed", "prepared", "reseeded", "shared_seed", "worker_replica"]

# torch walks a datapipe graph by pickling it with hooks set on the IterDataPipe and MapDataPipe
# classes, for every thread at once: two worker threads sharding their copies at the same time
# undo each other's hooks ("Can't pickle local object" on a lambda the walk never pickles), and
# a deep copy (also __reduce_ex__) made during a walk would run its hooks. One at a time.
_GRAPH_WALK = threading.RLock()  # re-entrant: a datapipe's own __deepcopy__ may walk a graph


def prepared(dataset: Any) -> Any:
    """The dataset as torch's DataLoader keeps it: datapipes in torch's serialization wrappers."""
    try:
        from torch.utils.data.datapipes.datapipe import (
            _IterDataPipeSerializationWrapper,
            _MapDataPipeSerializationWrapper,
        )
    except ImportError:  # a torch without the wrappers keeps datapipes as they are
        return dataset
    if isinstance(dataset, IterDataPipe):
        return _IterDataPipeSerializationWrapper(dataset)
    if isinstance(dataset, MapDataPipe):
        return _MapDataPipeSerializationWrapper(dataset)
    return dataset


def apply_shuffle(dataset: Any, shuffle: bool | None) -> None:
    """torch's DataLoader: ``shuffle`` switches an ``IterDataPipe``'s shufflers on or off.

    torch warns and appends a Shuffler when ``shuffle=True`` finds none, but keeps the pipe it had
    wrapped already, so the appended one never runs; the same happens here."""
    if isinstance(dataset, IterDataPipe) and shuffle is not None:
        with _GRAPH_WALK:
            graph_settings.apply_shuffle_settings(dataset, shuffle=shuffle)


def distributed() -> tuple[int, int, Any]:
    """(world size, rank, process group for sharing seeds) as torch's DataLoader sees them."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank(), dist.new_group(backend="gloo")
    return 1, 0, None


def shared_seed(generator: torch.Generator | None, group: Any) -> int:
    """One int64 from ``generator`` (rank 0's, where a process group is given), as torch draws it."""
    seed = torch.empty((), dtype=torch.int64).random_(generator=generator)
    if group is not None:
        torch.distributed.broadcast(seed, src=0, group=group)
    return int(seed.item())


def reseeded(dataset: Any, seed: int | None) -> Any:
    """``dataset`` with its random datapipes seeded from ``seed`` (others unchanged)."""
    if seed is None or not isinstance(dataset, IterDataPipe):
        return dataset
    with _GRAPH_WALK:
        return graph_settings.apply_random_seed(dataset, torch.Generator().manual_seed(seed))


def sharded(dataset: Any, instances: int, instance_id: int) -> Any:
    """torch's sharding of a datapipe graph (a no-op for other datasets)."""
    if isinstance(dataset, (IterDataPipe, MapDataPipe)):
        with _GRAPH_WALK:
            graph_settings.apply_sharding(dataset, instances, instance_id)
    return dataset


def worker_replica(dataset: Any, seed: int | None, *, stacklevel: int = 2) -> Any:
    """The object a worker thread loads from (see the module doc); ``seed`` is the iterator's
    shared seed for random datapipes. Made in the thread that creates the iterator, so that a
    copy that fails fails (or warns) there."""
    if isinstance(dataset, IterDataPipe):
        return reseeded(_deep_copy(dataset), seed)
    if isinstance(dataset, MapDataPipe) or not isinstance(dataset, Dataset):
        return dataset
    try:
        return copy.copy(dataset)
    except Exception as exc:  # noqa: BLE001  (the user's __copy__ may raise anything: warn and share)
        warnings.warn(
            f"ThreadDataLoader could not copy the dataset for a worker thread ({type(exc).__name__}: "
            f"{exc}); the worker threads share one dataset object, so attributes a worker sets "
            "on it (e.g. in worker_init_fn) are seen by every worker",
            stacklevel=stacklevel + 1,
        )
        return dataset


def _deep_copy(pipe: IterDataPipe) -> IterDataPipe:
    # torch's wrapper deep-copies by pickling (its __getstate__), which fails on lambdas where
    # forking would not: copy what it wraps and wrap that.
    inner = getattr(pipe, "_datapipe", None)
    with _GRAPH_WALK:
        if inner is None:
            return copy.deepcopy(pipe)
        return type(pipe)(copy.deepcopy(inner))  # type: ignore[call-arg]  # a wrapper type, built on what it wraps
