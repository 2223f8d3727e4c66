"""The datasets test_attribution_run.py profiles by name: attributes read by __getitem__ and never
read, of known sizes. Imports torch only (the runs' processes import this module)."""

from __future__ import annotations

from torch.utils.data import Dataset


class Index:
    """Records kept inside an object of the user's own class (``dataset.index.entries``)."""

    def __init__(self, n: int) -> None:
        self.entries = [
            {"image_id": i, "file_name": f"train/{i:012d}.jpg", "area": i * 0.5} for i in range(n)
        ]


class Parts(Dataset):
    """``index.entries`` is read for every item; ``captions`` (as large) never is."""

    def __init__(self, n: int) -> None:
        self.index = Index(n)
        self.captions = [f"a caption of image {i:012d} that no worker ever reads" for i in range(n)]

    def __len__(self) -> int:
        return len(self.index.entries)

    def __getitem__(self, i: int) -> int:
        entry = self.index.entries[i]
        return entry["image_id"] + len(entry["file_name"])


def parts(n: int = 100_000) -> Parts:
    return Parts(n)
