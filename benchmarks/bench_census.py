"""How close a page census (memprobe.probe.census) comes to the full count, and what it costs.

Not a test. A parent builds a list of dicts (~600 MB), forks 4 workers that each read 40 % of
the records and wait: either distinct records in a shuffled order (a DataLoader's workers) or
the same records in order (os.fork workers running the parent's loop). Then, for panels of
several shapes (runs x pages per run, positions random or evenly spaced), drawn again and again
from fresh random starts, it prints the standard error and bias of the census of the parent's
private anonymous pages against all of them counted (the whole pagemap of those mappings) and
against smaps_rollup's USS, and the time a census takes.

    python benchmarks/bench_census.py                 # both access patterns
    python benchmarks/bench_census.py --pattern same  # one
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import numpy as np

from memprobe.core.system import PAGE_SIZE
from memprobe.probe import procfs
from memprobe.probe.census import mappings, systematic_runs

SHAPES = [(64, 32), (128, 16), (256, 8), (256, 16), (512, 4)]


def exclusive_pages(fd: int, runs: list[tuple[int, int]]) -> int:
    entries = np.frombuffer(
        b"".join(os.pread(fd, n * 8, a * 8) for a, n in runs), dtype=np.uint64
    ) >> np.uint64(56)
    return int(np.count_nonzero((entries & np.uint64(0x81)) == np.uint64(0x81)))


def random_runs(
    maps: list[tuple[int, int]], runs: int, run_pages: int, rng: random.Random
) -> list[tuple[int, int]]:
    """Runs at random positions over the mappings laid end to end (the alternative measured)."""
    sizes = np.array([n for _, n in maps], dtype=float)
    ends = np.cumsum(sizes)
    out = []
    for x in sorted(rng.random() * ends[-1] for _ in range(runs)):
        i = int(np.searchsorted(ends, x, side="right"))
        first, n = maps[i]
        length = min(run_pages, n)
        out.append((first + min(int(x - (ends[i] - n)), n - length), length))
    return out


def measure(pattern: str, records: int, panels: int) -> None:
    data = [{"id": i, "path": f"images/{i:09d}.jpg", "box": [float(i), 1.0]} for i in range(records)]
    ready_r, ready_w = os.pipe()
    kids = []
    for k in range(4):
        pid = os.fork()
        if pid == 0:
            order = list(range(k, len(data), 4)) if pattern == "distinct" else list(range(len(data)))
            if pattern == "distinct":
                random.Random(k).shuffle(order)
            total = 0
            for i in order[: len(order) * 4 // 10]:
                total += data[i]["id"]
            os.write(ready_w, b"x")
            time.sleep(600)
            os._exit(0)
        kids.append(pid)
    try:
        for _ in kids:
            os.read(ready_r, 1)
        me = os.getpid()
        fd = os.open(f"/proc/{me}/pagemap", os.O_RDONLY)
        with open(f"/proc/{me}/maps") as f:
            anon, _ = mappings(f.read())
        population = sum(n for _, n in anon)
        full = exclusive_pages(fd, anon) * PAGE_SIZE / 2**20
        pss = procfs.read_pss(me)
        uss = pss.uss / 2**20 if pss else float("nan")
        print(
            f"\n{pattern}: parent's private anonymous pages, all counted {full:.1f} MB (USS {uss:.1f} MB)\n"
        )
        print("| runs x pages | positions | standard error | bias | time per census |")
        print("|---|---|---:|---:|---:|")
        rng = random.Random(1)
        for runs, run_pages in SHAPES:
            for kind in ("random", "evenly spaced"):
                values, spent = [], 0.0
                for _ in range(panels):
                    if kind == "random":
                        chosen = random_runs(anon, runs, run_pages, rng)
                    else:
                        chosen = systematic_runs(anon, runs=runs, run_pages=run_pages, start=rng.random())
                    t0 = time.perf_counter()
                    count = exclusive_pages(fd, chosen)
                    spent += time.perf_counter() - t0
                    values.append(count * population / sum(n for _, n in chosen) * PAGE_SIZE / 2**20)
                v = np.array(values)
                print(
                    f"| {runs} x {run_pages} | {kind} | {100 * v.std() / full:.1f} % | "
                    f"{100 * (v.mean() - full) / full:+.1f} % | {1e3 * spent / panels:.2f} ms |"
                )
    finally:
        for pid in kids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pattern", choices=["distinct", "same", "both"], default="both")
    ap.add_argument("--records", type=int, default=1_500_000)
    ap.add_argument("--panels", type=int, default=40)
    args = ap.parse_args()
    print(f"{sys.version.split()[0]}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
    for pattern in ("distinct", "same") if args.pattern == "both" else (args.pattern,):
        measure(pattern, args.records, args.panels)


if __name__ == "__main__":
    main()
