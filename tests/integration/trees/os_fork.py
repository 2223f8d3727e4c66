"""Plain os.fork(): N children of the main process, each reading the whole dataset."""

from __future__ import annotations

import os
import sys

import coco

if __name__ == "__main__":
    args = coco.arguments(__doc__).parse_args()
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
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    sys.exit(1 if failed else 0)
