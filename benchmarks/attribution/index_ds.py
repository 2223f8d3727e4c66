"""Records kept inside an object of the user's own class (self.index.entries): cure cannot convert it."""

from torch.utils.data import Dataset


class Index:
    def __init__(self, n):
        self.entries = [
            {"image_id": i, "file_name": f"train2017/{i:012d}.jpg", "height": 480, "width": 640}
            for i in range(n)
        ]


class Indexed(Dataset):
    def __init__(self, n=300_000):
        self.index = Index(n)
        self.labels = list(range(n))

    def __len__(self):
        return len(self.index.entries)

    def __getitem__(self, i):
        e = self.index.entries[i]
        return e["image_id"] % 7, len(e["file_name"])


def build(n=300_000):
    return Indexed(n)
