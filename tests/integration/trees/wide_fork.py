"""A wide fork tree whose total PSS the job reads itself: the main process fills --parent-mb MB
(--before-mb of it, then a pause of --pause s, then the rest), forks --children children that
each write --child-kb KiB of their own and report ready, then, with every child alive and
holding, reads every process's /proc/PID/smaps_rollup (its own included) and writes one line to
--truth: ``<time.monotonic()> <sum of Pss in MB> <processes read>``. It marks that moment
(:func:`memprobe.mark`) when run under ``memprobe record``. The children hold until that reading
is done, then --hold s more; the main process waits for them and exits.

    python wide_fork.py --children 200 --parent-mb 100 --truth /tmp/truth.txt

Nothing here depends on the machine's speed: every step waits for the one before it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

MiB = 1024 * 1024


def fill(mb: float) -> bytearray:
    """``mb`` MB of anonymous memory, every page written (resident, private)."""
    return bytearray(range(256)) * int(mb * 4096)  # no page of zeros, no copy on the way


def pss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError(f"no Pss in /proc/{pid}/smaps_rollup")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--children", type=int, default=200)
    ap.add_argument("--parent-mb", type=float, default=100.0)
    ap.add_argument("--before-mb", type=float, default=None, help="filled before the pause (default: all)")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between the two fills")
    ap.add_argument("--child-kb", type=int, default=256)
    ap.add_argument("--hold", type=float, default=3.0, help="seconds the children hold after the reading")
    ap.add_argument("--truth", required=True)
    args = ap.parse_args()
    before = args.parent_mb if args.before_mb is None else min(args.before_mb, args.parent_mb)
    data = [fill(before)]
    if args.pause > 0:
        time.sleep(args.pause)
    data.append(fill(args.parent_mb - before))
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    children = []
    for _ in range(args.children):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(go_w)
            mine = bytes(range(256)) * (args.child_kb * 4)  # written: its own pages
            os.write(ready_w, b"x")
            os.read(go_r, 1)  # held until the main process has read every smaps_rollup
            time.sleep(args.hold)
            os._exit(0 if mine else 1)
        children.append(pid)
    os.close(ready_w)
    os.close(go_r)
    got = 0
    while got < len(children):
        got += len(os.read(ready_r, len(children) - got))
    at = time.monotonic()
    total_kb = sum(pss_kb(pid) for pid in [os.getpid(), *children])
    try:
        import memprobe

        memprobe.mark(1)
    except ImportError:
        pass
    with open(args.truth, "w") as f:
        f.write(f"{at:.6f} {total_kb / 1024:.3f} {len(children) + 1}\n")
    print(f"TRUTH t={at:.3f} pss_mb={total_kb / 1024:.1f} processes={len(children) + 1}", flush=True)
    os.close(go_w)  # every child goes on
    status = max(os.waitpid(pid, 0)[1] for pid in children)
    return 1 if status or not data else 0


if __name__ == "__main__":
    sys.exit(main())
