"""Plain os.fork(): N children of the main process, each reading the whole dataset.

--parent-grows MB: once its children run, the main process allocates MB of new memory (1 MB
objects, 10 a tenth of a second) and keeps it until they end.
--workers-allocate MB: each child first allocates MB of new memory the same way and keeps it
while it reads (memory of its own, not pages copied from its parent)."""

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


if __name__ == "__main__":
    parser = coco.arguments(__doc__)
    parser.add_argument("--parent-grows", type=int, default=0, metavar="MB")
    parser.add_argument("--workers-allocate", type=int, default=0, metavar="MB")
    args = parser.parse_args()
    ds = coco.build(args.data, args.json)
    children = []
    for i in range(args.workers):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                mine = allocate(args.workers_allocate)
                coco.worker_main(ds, args.seconds, args.hold, worker=i)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    grown = allocate(args.parent_grows)
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    sys.exit(1 if failed else 0)
