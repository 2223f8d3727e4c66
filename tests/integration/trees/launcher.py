"""A torchrun-like launcher: starts --nproc copies of a program (fork + exec of the same
interpreter), each with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in its environment, waits for all and exits with the worst exit code.

    python launcher.py --nproc 2 -- dataloader_train.py --json coco.json --workers 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("program", nargs=argparse.REMAINDER)
    args = p.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    ranks = []
    for r in range(args.nproc):
        env = {
            **os.environ,
            "RANK": str(r),
            "LOCAL_RANK": str(r),
            "WORLD_SIZE": str(args.nproc),
            "LOCAL_WORLD_SIZE": str(args.nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29511",
        }
        ranks.append(subprocess.Popen([sys.executable, *program], env=env))
    sys.exit(max(abs(proc.wait()) for proc in ranks))
