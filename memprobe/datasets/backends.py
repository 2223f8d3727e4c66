"""Three map-style datasets over the same records, held three ways.

* ``ListDataset``: a Python list of dicts, as most annotation loaders produce. Each record is a
  tree of Python objects with its own reference counts, so a forked worker that reads a record
  writes to its page: copy-on-access.
* ``NumpyDataset``: a few large numpy buffers (ids, labels, boxes, and every path's UTF-8 bytes
  concatenated with an offsets array). A read touches one refcount per buffer, not per record.
* ``ArrowDataset``: a ``pyarrow.Table`` with the same columns, read one scalar at a time.

``__getitem__`` of each returns the same dict: ``{"id", "path", "label", "box"}``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
from torch.utils.data import Dataset

from memprobe.datasets.records import Columns


class ListDataset(Dataset):
    """Records as a list of dicts (per-record Python objects)."""

    def __init__(self, columns: Columns) -> None:
        self.records = [
            {"id": i, "path": p, "label": lab, "box": box}
            for i, p, lab, box in zip(
                columns.ids.tolist(),
                columns.paths,
                columns.labels.tolist(),
                columns.boxes.tolist(),
                strict=True,
            )
        ]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict:
        rec = self.records[index]
        return {
            "id": rec["id"],
            "path": rec["path"],
            "label": rec["label"],
            "box": np.asarray(rec["box"], dtype=np.float32),
        }


class NumpyDataset(Dataset):
    """Records in a handful of numpy buffers; strings serialized into one byte buffer."""

    def __init__(self, columns: Columns) -> None:
        encoded = [p.encode("utf-8") for p in columns.paths]
        self.path_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self.path_offsets[1:])
        self.path_bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.ids = columns.ids.copy()
        self.labels = columns.labels.copy()
        self.boxes = columns.boxes.copy()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        start, end = self.path_offsets[index], self.path_offsets[index + 1]
        return {
            "id": int(self.ids[index]),
            "path": self.path_bytes[start:end].tobytes().decode("utf-8"),
            "label": int(self.labels[index]),
            "box": self.boxes[index].copy(),
        }


class ArrowDataset(Dataset):
    """Records in a ``pyarrow.Table`` (as Hugging Face ``datasets`` holds them)."""

    def __init__(self, columns: Columns) -> None:
        width = columns.boxes.shape[1]
        box = pa.FixedSizeListArray.from_arrays(pa.array(columns.boxes.reshape(-1)), width)
        self.table = pa.table(
            {
                "id": pa.array(columns.ids),
                "path": pa.array(columns.paths, pa.string()),
                "label": pa.array(columns.labels),
                "box": box,
            }
        ).combine_chunks()
        self._bind()

    def _bind(self) -> None:
        # Single-chunk column arrays: indexing a ChunkedArray searches chunks on every call.
        self._id, self._path, self._label = (self.table.column(n).chunk(0) for n in ("id", "path", "label"))
        self._box = self.table.column("box").chunk(0).flatten().to_numpy(zero_copy_only=True)
        self._width = self.table.column("box").type.list_size

    def __getstate__(self) -> dict:
        return {"table": self.table}

    def __setstate__(self, state: dict) -> None:
        self.table = state["table"]
        self._bind()

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, index: int) -> dict:
        w = self._width
        return {
            "id": self._id[index].as_py(),
            "path": self._path[index].as_py(),
            "label": self._label[index].as_py(),
            "box": self._box[index * w : (index + 1) * w].copy(),
        }


BACKENDS: dict[str, Callable[[Columns], Dataset]] = {
    "list": ListDataset,
    "numpy": NumpyDataset,
    "arrow": ArrowDataset,
}
