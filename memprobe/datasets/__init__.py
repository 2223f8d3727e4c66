"""Built-in datasets: the same annotation-like records held as a list, numpy or arrow."""

from __future__ import annotations

from torch.utils.data import Dataset

from memprobe.datasets.backends import BACKENDS, ArrowDataset, ListDataset, NumpyDataset
from memprobe.datasets.records import RecordSpec, make_columns, record_at

__all__ = [
    "BACKENDS",
    "ArrowDataset",
    "ListDataset",
    "NumpyDataset",
    "RecordSpec",
    "build_dataset",
    "make_columns",
    "record_at",
]


def build_dataset(backend: str, spec: RecordSpec) -> Dataset:
    """Build the ``backend`` dataset ("list", "numpy" or "arrow") over ``spec``'s records."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    return BACKENDS[backend](make_columns(spec))
