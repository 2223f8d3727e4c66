"""The datasets test_cure_command.py hands `memprobe cure` by name: the runs' processes import
this module, which imports torch only (not pytest and the test modules: ~0.2 CPU-s in each run's
process and spawned worker)."""

from __future__ import annotations

from torch.utils.data import Dataset


class Annotations(Dataset):
    """COCO-like annotation dicts in a list, read whole by each worker."""

    def __init__(self, n: int) -> None:
        self.records = [
            {"image_id": i, "file_name": f"train/{i:012d}.jpg", "bbox": [i * 0.5, 1.0, 20.0, 30.0]}
            for i in range(n)
        ]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> int:
        return self.records[i]["image_id"]


def annotations(n: int = 200_000) -> Annotations:
    return Annotations(n)


class NeedsAList(Annotations):
    """Calls a list's method on its records: a SharedList has not got it."""

    def __getitem__(self, i: int) -> int:
        self.records.append  # noqa: B018  (a list's method: the dataset relies on the list)
        return self.records[i]["image_id"]


def needs_a_list(n: int = 2_000) -> NeedsAList:
    return NeedsAList(n)


def broken(split: str = "train") -> Annotations:
    raise ValueError(f"no annotations for split {split!r}")
