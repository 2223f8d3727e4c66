"""A training loop: a torch DataLoader with fork workers over the dataset, one short step per
batch. Run alone or under torchrun (each rank builds its own dataset).

--relaunch N does what PyTorch Lightning's DDP does (strategy="ddp"): the script re-runs itself
for ranks 1..N-1 with LOCAL_RANK in their environment and trains as rank 0 itself.

--rename gives the workers the name torch's development branch gives them
(pt_multiprocess_data_worker, which the kernel cuts to pt_multiprocess) instead of today's
pt_data_worker: torch names its workers through torch.multiprocessing._set_thread_name, which
is wrapped here before the loader starts, so a worker is never seen under the old name.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import coco
import torch
import torch.multiprocessing
from torch.utils.data import DataLoader

UPCOMING_NAME = "pt_multiprocess_data_worker"


def pickled_size(batch: list) -> int:
    return sum(len(pickle.dumps(r)) for r in batch)


def rename_workers() -> None:
    original = torch.multiprocessing._set_thread_name

    def renamed(name: str) -> None:
        original(UPCOMING_NAME if name == "pt_data_worker" else name)

    torch.multiprocessing._set_thread_name = renamed


def say_name(worker_id: int) -> None:
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    line = (
        f"TREE_WORKER rank={os.environ.get('RANK', '-')} worker={worker_id} pid={os.getpid()} comm={comm}\n"
    )
    os.write(1, line.encode())  # one write: print's text and newline may interleave with a sibling's


if __name__ == "__main__":
    p = coco.arguments(__doc__)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--step", type=float, default=0.004, help="seconds per training step")
    p.add_argument("--rename", action="store_true")
    p.add_argument("--relaunch", type=int, default=1, help="ranks in all, this process being rank 0")
    args = p.parse_args()
    if args.rename:
        rename_workers()
    ranks = []
    if args.relaunch > 1 and "LOCAL_RANK" not in os.environ:
        for k in range(1, args.relaunch):
            env = {**os.environ, "LOCAL_RANK": str(k), "WORLD_SIZE": str(args.relaunch)}
            ranks.append(subprocess.Popen([sys.executable, *sys.argv], env=env))
    ds = coco.build(args.data, args.json)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        num_workers=args.workers,
        shuffle=True,
        collate_fn=pickled_size,
        worker_init_fn=say_name,
        persistent_workers=False,
        multiprocessing_context="fork",
    )
    for epoch in range(args.epochs):
        total = 0
        for size in loader:
            total += size
            time.sleep(args.step)
        print(f"TREE_EPOCH rank={os.environ.get('RANK', '-')} epoch={epoch} bytes={total}", flush=True)
    for rank in ranks:
        rank.wait()
