"""The dataset test_shared_list_loaders.py runs under real DataLoaders: the runs' processes, the
jobs it starts and their spawned workers import this module, which imports torch and memprobe
only (not pytest and the test module: ~0.2 CPU-s in each of them)."""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset

import memprobe


class Annotations(Dataset):
    """A COCO-like annotation list, held as a list or as a SharedList."""

    def __init__(self, records: int, shared: bool, blob: int = 0) -> None:
        recs = (
            {"id": i, "file": f"images/{i:012d}.jpg", "box": [i * 0.5, 2.0, 30.0, 40.0], "blob": bytes(blob)}
            for i in range(records)
        )
        self.records = memprobe.SharedList(recs) if shared else list(recs)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        rec = self.records[index]
        return {"id": rec["id"], "box": rec["box"]}


def annotations(records: int, shared: bool, blob: int = 0) -> Annotations:
    return Annotations(records, shared, blob)
