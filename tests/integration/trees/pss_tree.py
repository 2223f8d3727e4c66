"""A still tree for reading memory at a known moment: the main process builds a list of dicts
(~--mb MB), forks 3 children, child k reads the first (k+1)/4 of the records (so each has its
own amount of private memory), then every process waits on stdin. The main process prints
``READY <main pid> <child pids>`` once all children have read; closing stdin ends the tree.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys

if __name__ == "__main__":
    gc.disable()  # no collection touches the rest of the list: each child copies what it reads
    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 100.0
    n = int(mb * 1024 * 1024 / 560)  # ~560 bytes per record, measured on CPython 3.11
    records = [
        {"id": i, "path": f"images/train/{i:09d}.jpg", "box": [float(i + k) for k in range(8)]}
        for i in range(n)
    ]
    ready_r, ready_w = os.pipe()
    children = []
    for k in range(3):
        pid = os.fork()
        if pid == 0:
            for i in range(len(records) * (k + 1) // 4):
                pickle.dumps(records[i])
            os.write(ready_w, b"x")
            os.read(0, 1)
            os._exit(0)
        children.append(pid)
    got = b""
    while len(got) < len(children):
        got += os.read(ready_r, len(children) - len(got))
    print("READY", os.getpid(), *children, flush=True)
    os.read(0, 1)
    sys.exit(max(os.waitpid(pid, 0)[1] for pid in children) and 1)
