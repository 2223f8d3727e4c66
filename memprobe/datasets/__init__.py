"""Built-in datasets: the same annotation-like records held as a list, numpy or arrow; and
``SharedList`` (``shared_list.py``), records pickled into one buffer that workers share.

The names are imported on first use: ``memprobe.SharedList`` (and a spawned worker unpickling
one) imports neither torch nor pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.data import Dataset

    from memprobe.datasets.backends import BACKENDS, ArrowDataset, ListDataset, NumpyDataset
    from memprobe.datasets.records import RecordSpec, make_columns, record_at
    from memprobe.datasets.shared_list import SharedList

__all__ = [
    "BACKENDS",
    "ArrowDataset",
    "ListDataset",
    "NumpyDataset",
    "RecordSpec",
    "SharedList",
    "build_dataset",
    "make_columns",
    "record_at",
]

_HOMES = {
    "BACKENDS": "backends",
    "ArrowDataset": "backends",
    "ListDataset": "backends",
    "NumpyDataset": "backends",
    "RecordSpec": "records",
    "make_columns": "records",
    "record_at": "records",
    "SharedList": "shared_list",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"memprobe.datasets.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'memprobe.datasets' has no attribute {name!r}")


def build_dataset(backend: str, spec: RecordSpec) -> Dataset:
    """Build the ``backend`` dataset ("list", "numpy" or "arrow") over ``spec``'s records."""
    from memprobe.datasets.backends import BACKENDS
    from memprobe.datasets.records import make_columns

    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    return BACKENDS[backend](make_columns(spec))
