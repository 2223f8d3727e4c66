"""The logical records every backend holds: annotation-like rows built deterministically.

Each record looks like an entry of a detection dataset's annotation file: an integer id, an
image path string, a class label and a box of floats. Backends differ only in how they hold the
same rows, so runs differ only in that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPLITS = ("train", "val")


@dataclass(frozen=True)
class RecordSpec:
    """How many records, and their shape."""

    records: int = 100_000
    floats: int = 4  # length of the per-record float vector ("box")
    seed: int = 0


@dataclass(frozen=True)
class Columns:
    """The records as columns; the common source of every backend."""

    ids: np.ndarray  # int64
    labels: np.ndarray  # int32
    boxes: np.ndarray  # float32, (n, floats)
    paths: list[str]

    def __len__(self) -> int:
        return len(self.ids)


def make_columns(spec: RecordSpec) -> Columns:
    """Build the records for ``spec``; the same spec always gives the same records."""
    rng = np.random.default_rng(spec.seed)
    n = spec.records
    labels = rng.integers(0, 1000, n, dtype=np.int32)
    boxes = rng.random((n, spec.floats), dtype=np.float32)
    tags = rng.integers(0, 2**32, n, dtype=np.uint64)
    split = rng.random(n) < 0.9
    paths = [
        f"images/{SPLITS[0] if s else SPLITS[1]}/{lab:04d}/{i:09d}_{tag:08x}.jpg"
        for i, lab, tag, s in zip(range(n), labels.tolist(), tags.tolist(), split.tolist(), strict=True)
    ]
    return Columns(ids=np.arange(n, dtype=np.int64), labels=labels, boxes=boxes, paths=paths)


def record_at(columns: Columns, index: int) -> dict:
    """Reference record ``index`` as every backend's ``__getitem__`` must return it."""
    return {
        "id": int(columns.ids[index]),
        "path": columns.paths[index],
        "label": int(columns.labels[index]),
        "box": columns.boxes[index].copy(),
    }
