"""multiprocessing.Pool (fork): N pool workers, one task each (a barrier makes sure no worker
takes two), each reading the whole dataset the main process built before the pool started."""

from __future__ import annotations

import multiprocessing as mp

import coco

DATASET = None
BARRIER = None


def _init(barrier) -> None:
    global BARRIER
    BARRIER = barrier


def task(index: int, seconds: float, hold: float) -> int:
    BARRIER.wait()
    coco.worker_main(DATASET, seconds, hold, worker=index)
    return index


if __name__ == "__main__":
    args = coco.arguments(__doc__).parse_args()
    DATASET = coco.build(args.data, args.json)
    ctx = mp.get_context("fork")
    with ctx.Pool(args.workers, initializer=_init, initargs=(ctx.Barrier(args.workers),)) as pool:
        done = pool.starmap(task, [(i, args.seconds, args.hold) for i in range(args.workers)], chunksize=1)
        pool.close()
        pool.join()
    assert sorted(done) == list(range(args.workers)), done
