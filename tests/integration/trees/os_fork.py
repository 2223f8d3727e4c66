"""Plain os.fork(): N children of the main process, each reading the whole dataset.

--parent-grows MB: once its children run, the main process allocates MB of new memory (1 MB
objects, 10 a tenth of a second) and keeps it until they end.
--workers-allocate MB: each child, once memprobe has sampled it (when recorded), first allocates
MB of new memory the same way and keeps it until it exits (memory of its own, not pages copied
from its parent): all of it after its first sample, however late the sampler comes.
--then-builds MB: once its children ended, the main process allocates MB of new memory with none
of them alive, then forks N more (a second generation) that read the dataset as the first did."""

from __future__ import annotations

import os
import sys
import time

import coco


def allocate(mb: int) -> list[bytes]:
    """MB of new memory, 1 MB objects, 10 every tenth of a second."""
    held: list[bytes] = []
    while len(held) < mb:
        held.extend(b"\x01" * (1 << 20) for _ in range(min(10, mb - len(held))))
        time.sleep(0.1)
    return held


def fork_children(ds: coco.DatasetFromList, args, first: int = 0) -> list[int]:
    """N children that each read the whole dataset (after allocating what they were told to)."""
    children = []
    for i in range(first, first + args.workers):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # Kept to the end: freed after reading, a reading the sampler took between the
                # free and the exit ended the child's growth there (74 of 122 MB seen).
                if args.workers_allocate:
                    coco.wait_until_sampled()
                _kept = allocate(args.workers_allocate)
                coco.worker_main(ds, args.seconds, args.hold, worker=i)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    return children


def failed(children: list[int]) -> list[int]:
    return [pid for pid in children if os.waitpid(pid, 0)[1] != 0]


if __name__ == "__main__":
    parser = coco.arguments(__doc__)
    parser.add_argument("--parent-grows", type=int, default=0, metavar="MB")
    parser.add_argument("--workers-allocate", type=int, default=0, metavar="MB")
    parser.add_argument("--then-builds", type=int, default=0, metavar="MB")
    args = parser.parse_args()
    ds = coco.build(args.data, args.json)
    children = fork_children(ds, args)
    grown = allocate(args.parent_grows)
    bad = failed(children)
    if args.then_builds:
        built = allocate(args.then_builds)  # none of its children is alive: built, not growth
        bad += failed(fork_children(ds, args, first=args.workers))
    sys.exit(1 if bad else 0)
