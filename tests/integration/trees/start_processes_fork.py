"""The demonstration's main-naive.py: torch.multiprocessing.start_processes(start_method="fork")
starts N workers that each read the whole dataset built by the main process."""

from __future__ import annotations

import coco
import torch


def worker(index: int, dataset: coco.DatasetFromList, seconds: float, hold: float) -> None:
    coco.worker_main(dataset, seconds, hold, worker=index)


if __name__ == "__main__":
    args = coco.arguments(__doc__).parse_args()
    ds = coco.build(args.data, args.json)
    ctx = torch.multiprocessing.start_processes(
        worker,
        (ds, args.seconds, args.hold),
        nprocs=args.workers,
        join=False,
        daemon=True,
        start_method="fork",
    )
    while not ctx.join():
        pass
