"""Plain os.fork(): N children of the main process, each reading the whole dataset.

--parent-grows MB: once its children run, the main process allocates MB of new memory (1 MB
objects, 10 a tenth of a second) and keeps it until they end."""

from __future__ import annotations

import os
import sys
import time

import coco

if __name__ == "__main__":
    parser = coco.arguments(__doc__)
    parser.add_argument("--parent-grows", type=int, default=0, metavar="MB")
    args = parser.parse_args()
    ds = coco.build(args.data, args.json)
    children = []
    for i in range(args.workers):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                coco.worker_main(ds, args.seconds, args.hold, worker=i)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    grown = []
    while len(grown) < args.parent_grows:
        grown.extend(b"\x01" * (1 << 20) for _ in range(min(10, args.parent_grows - len(grown))))
        time.sleep(0.1)
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    sys.exit(1 if failed else 0)
