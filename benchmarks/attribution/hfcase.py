"""A Hugging Face `datasets` table converted with to_list(), as users do for speed; the table kept."""

import datasets
import torch


class Captions(torch.utils.data.Dataset):
    def __init__(self, n: int = 200_000):
        table = datasets.Dataset.from_dict(
            {
                "text": [f"caption number {i} of a photo" for i in range(n)],
                "label": [i % 10 for i in range(n)],
            }
        )
        self.hf = table  # Arrow-backed: never read by __getitem__
        self.rows = table.to_list()  # a list of dicts: what the workers read

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        r = self.rows[i]
        return len(r["text"]), r["label"]


def build(n: int = 200_000) -> Captions:
    return Captions(n)
