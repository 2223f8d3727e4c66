"""Dataset factories that look like users' datasets, for scenarios/user_datasets.yaml and tests.

Each returns a map-style torch Dataset. The verdicts they should get under fork:

* ``coco_style``       a COCO-like list of annotation dicts (nested lists of floats): grows.
* ``pandas_rows``      a DataFrame read row by row with ``df.iloc[i]``: grows with object-dtype
                       string columns (``string_dtype="object"``); stays flat with pandas'
                       arrow-backed strings (``string_dtype="string[pyarrow]"``), the default of
                       pandas 3 when pyarrow is installed.
* ``packed_buffers``   the same COCO-like records serialized into one numpy byte buffer plus
                       offsets: flat.
* ``coco_stream``      the COCO-like records as a torch IterableDataset (a stream, as from
                       shards), each worker taking every n-th record through get_worker_info():
                       grows under fork like the list it iterates.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from torch.utils.data import Dataset, IterableDataset, get_worker_info

CATEGORIES = ("person", "bicycle", "car", "dog", "cat", "chair", "bottle", "cup", "tree", "sign")


def _coco_records(images: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    boxes = rng.random((images, 4)) * 600
    poly = rng.random((images, 12)) * 600
    cats = rng.integers(0, len(CATEGORIES), images)
    return [
        {
            "image_id": i,
            "file_name": f"train2017/{i:012d}.jpg",
            "category": CATEGORIES[c],
            "bbox": b.tolist(),
            "segmentation": [p.tolist()],
            "iscrowd": 0,
        }
        for i, (b, p, c) in enumerate(zip(boxes, poly, cats.tolist(), strict=True))
    ]


class CocoStyle(Dataset):
    """Annotations as a list of dicts, as json.load(instances.json) gives them."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict:
        r = self.records[i]
        return {
            "image_id": r["image_id"],
            "file_name": r["file_name"],
            "bbox": np.asarray(r["bbox"], dtype=np.float32),
            "polygon_points": len(r["segmentation"][0]) // 2,
        }


class PackedBuffers(Dataset):
    """The same records, each serialized to JSON bytes in one numpy buffer plus offsets."""

    def __init__(self, records: list[dict]) -> None:
        blobs = [json.dumps(r).encode() for r in records]
        self.offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in blobs], out=self.offsets[1:])
        self.buffer = np.frombuffer(b"".join(blobs), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict:
        r = json.loads(self.buffer[self.offsets[i] : self.offsets[i + 1]].tobytes())
        return {
            "image_id": r["image_id"],
            "file_name": r["file_name"],
            "bbox": np.asarray(r["bbox"], dtype=np.float32),
            "polygon_points": len(r["segmentation"][0]) // 2,
        }


class PandasRows(Dataset):
    """A DataFrame read one row at a time, the way many training scripts do."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, i: int) -> dict:
        row = self.frame.iloc[i]
        return {"path": str(row["path"]), "caption": str(row["caption"]), "label": int(row["label"])}


class CocoStream(IterableDataset):
    """The records streamed: worker k of n yields records k, k+n, k+2n, ... (torch's pattern for
    splitting an iterable dataset between workers; also right in memprobe's thread workers)."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(start, len(self.records), step):
            yield self.records[i]


def coco_style(images: int = 200_000, seed: int = 0) -> CocoStyle:
    return CocoStyle(_coco_records(images, seed))


def coco_stream(images: int = 200_000, seed: int = 0) -> CocoStream:
    return CocoStream(_coco_records(images, seed))


def packed_buffers(images: int = 200_000, seed: int = 0) -> PackedBuffers:
    return PackedBuffers(_coco_records(images, seed))


def pandas_rows(rows: int = 200_000, string_dtype: str = "object", seed: int = 0) -> PandasRows:
    """``string_dtype``: "object" (Python str objects) or "string[pyarrow]" (arrow buffers)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 1000, rows)
    frame = pd.DataFrame(
        {
            "path": [f"s3://bucket/shard-{i % 512:04d}/{i:010d}.jpg" for i in range(rows)],
            "caption": [
                f"a photo of a {CATEGORIES[label % 10]} number {i}" for i, label in enumerate(labels.tolist())
            ],
            "label": labels,
        }
    )
    # pandas >= 3 infers its arrow-backed "str" dtype for strings: ask for the dtype explicitly.
    return PandasRows(frame.astype({"path": string_dtype, "caption": string_dtype}))
