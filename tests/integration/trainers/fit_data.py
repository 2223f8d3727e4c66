"""The datasets of the trainer scripts beside this file (imported by them as scripts, from their
folder): a list of dicts, whose forked DataLoader workers copy what they read, and the same
records as one numpy array, which they do not copy."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class Lists(Dataset):
    """``n`` records as dicts in a list: an item is ``(x, y)``, 8 floats and a label."""

    def __init__(self, n: int) -> None:
        self.rows = [{"x": [float(i % 7)] * 8, "y": float(i % 2), "id": f"row-{i}"} for i in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        r = self.rows[i]
        return torch.tensor(r["x"]), torch.tensor(r["y"])


class Arrays(Dataset):
    """The same records in two numpy arrays."""

    def __init__(self, n: int) -> None:
        self.x = np.repeat((np.arange(n) % 7).astype(np.float32)[:, None], 8, axis=1)
        self.y = (np.arange(n) % 2).astype(np.float32)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return torch.from_numpy(self.x[i]), torch.tensor(self.y[i])
