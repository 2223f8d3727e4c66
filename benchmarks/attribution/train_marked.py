"""A training script as a user writes it, with the opt-in line: DatasetFolder-shaped records."""

import sys

import torch
from torch.utils.data import DataLoader, Dataset

import memprobe


class FolderLike(Dataset):
    def __init__(self, n):
        self.samples = [(f"/data/train/c{i % 1000:04d}/img_{i:08d}.JPEG", i % 1000) for i in range(n)]
        self.targets = [1000 + i % 1000 for i in range(n)]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        return torch.tensor([len(path)]), target


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    ds = FolderLike(n)
    if "nomark" not in sys.argv:
        memprobe.mark_dataset(ds)
    loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=2)
    for _epoch in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1):
        for _x, y in loader:
            memprobe.mark(len(y))
