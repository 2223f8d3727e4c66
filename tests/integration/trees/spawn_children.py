"""multiprocessing spawn context: N children, each an exec'd interpreter that receives the
dataset pickled through its start-up pipe (its own copy from the start), then reads it all."""

from __future__ import annotations

import multiprocessing as mp
import sys

import coco


def worker(index: int, dataset, seconds: float, hold: float) -> None:
    coco.worker_main(dataset, seconds, hold, worker=index)


if __name__ == "__main__":
    args = coco.arguments(__doc__).parse_args()
    ds = coco.build(args.data, args.json)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(i, ds, args.seconds, args.hold)) for i in range(args.workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode for p in procs))
