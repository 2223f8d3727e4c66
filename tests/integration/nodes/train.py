"""One rank of a multi-node job (tests/integration/test_nodes_job.py): torch.distributed over gloo,
a DataLoader with fork workers over a list of dicts. Reading an item touches its dict, its name
and its box (their reference counts), so each worker copies the pages it reads: with shuffled
indices, nearly all of them (copy-on-access: every worker grows)."""

import argparse
import os
import time

import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __init__(self, n: int) -> None:
        self.rows = [{"id": i, "name": f"item {i:08d}", "box": [float(i), 1.0, 2.0, 3.0]} for i in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> int:
        row = self.rows[i]
        return len(row["name"]) + len(row["box"])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rows", type=int, default=350_000)
    a = p.parse_args()
    dist.init_process_group("gloo")
    loader = DataLoader(
        Rows(a.rows),
        batch_size=1024,
        num_workers=a.workers,
        collate_fn=sum,
        shuffle=True,
        multiprocessing_context="fork",
    )
    batches = 0
    for _ in loader:
        batches += 1
        time.sleep(0.01)  # a training step
    print(f"NODE rank={dist.get_rank()} group={os.environ.get('GROUP_RANK')} batches={batches}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
