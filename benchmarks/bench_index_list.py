"""The main process's memory and CPU for one epoch's shuffled indices: torch's RandomSampler
(``shuffle=True``), SubsetRandomSampler and memprobe.ChunkedRandomSampler, and a DDP rank's (rank
0 of 2): torch's DistributedSampler and memprobe.ChunkedDistributedSampler, each in a fresh
process, interleaved round by round (docs/performance.md, "The sampler's index list").

    python benchmarks/bench_index_list.py [--records 6000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

SAMPLERS = ("random", "subset", "chunked", "distributed", "chunked-distributed")

CHILD = """
import sys, time
import torch
from torch.utils.data import DistributedSampler, RandomSampler, SubsetRandomSampler
import memprobe

n = int(sys.argv[2])
make = {
    "random": RandomSampler,
    "subset": SubsetRandomSampler,
    "chunked": memprobe.ChunkedRandomSampler,
    "distributed": lambda d: DistributedSampler(d, num_replicas=2, rank=0),
    "chunked-distributed": lambda d: memprobe.ChunkedDistributedSampler(d, num_replicas=2, rank=0),
}


def anon_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon"))


sampler = make[sys.argv[1]](range(n))
before = anon_kb()
t = time.process_time()
it = iter(sampler)
next(it)
first = peak = anon_kb()
for k, _ in enumerate(it):
    if k % 500_000 == 0:
        peak = max(peak, anon_kb())
print(f"{(first - before) / 1024:.0f} {(peak - before) / 1024:.0f} {time.process_time() - t:.2f}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=6_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("round  sampler              MB after the first index  peak MB  CPU-s for the epoch's indices")
    for r in range(1, args.rounds + 1):
        for name in SAMPLERS:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, name, str(args.records)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            print(f"{r:>5}  {name:<19}  {out[0]:>24}  {out[1]:>7}  {out[2]:>29}")


if __name__ == "__main__":
    main()
