"""pytorch/pytorch#13246's demonstration dataset (mprostock), its class as the script has it."""

import numpy as np
import torch
from torch.utils.data import Dataset


class DataIter(Dataset):
    def __init__(self):
        self.data_np = np.array([x for x in range(6000000)])  # noqa: C416 (the issue's code as posted)
        self.data = [x for x in range(6000000)]  # noqa: C416

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        data = self.data[idx]
        data = np.array([data], dtype=np.int64)
        return torch.tensor(data)


def build():
    return DataIter()
