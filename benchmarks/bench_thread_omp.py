"""Does each worker thread's own OpenMP team cost CPU in ThreadDataLoader?

torch's intra-op parallel regions (e.g. torch.stack in collate) run on an OpenMP team per calling
thread: every worker thread that runs one gets its own team (here 1 extra thread, which inherits
the worker's OS name, mp-tworker-K). torch's process workers call torch.set_num_threads(1); thread
workers do not (in a thread it would also change torch's process-wide default for threads that
initialise later). This compares, in one process, interleaved: ThreadDataLoader as is versus with
``worker_init_fn=lambda _: torch.set_num_threads(1)``, on the Pillow decode+resize+crop workload.

    python benchmarks/bench_thread_omp.py [--repeats 20]

Not a test: it measures and prints; numbers go to docs/perf/threads.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # memprobe from this checkout
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "scenarios"))  # workloads by name

import torch
from workloads import pillow_decode_resize

from memprobe import ThreadDataLoader


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)


def _run(dataset: object, init: object) -> tuple[float, float]:
    """(items/s, process CPU ms per item) for one epoch."""
    loader = ThreadDataLoader(
        dataset,
        batch_size=32,
        num_workers=2,
        shuffle=True,
        worker_init_fn=init,
        generator=torch.Generator().manual_seed(0),
    )
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    n = sum(batch.shape[0] for batch in loader)
    wall, r1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return n / wall, cpu / n * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    print(
        f"command: python {' '.join(sys.argv)}\nloadavg at start: {Path('/proc/loadavg').read_text().split()[:3]}"
    )
    dataset = pillow_decode_resize(images=256, length=768)
    configs = {"as is": None, "set_num_threads(1) per worker": _one_thread}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    for rep in range(args.repeats):
        for name in list(configs) if rep % 2 == 0 else list(configs)[::-1]:
            results[name].append(_run(dataset, configs[name]))
    print("\n| worker threads | items/s (median) | CPU ms per item (median) | CPU ms per item, min..max |")
    print("|---|---:|---:|---|")
    for name, runs in results.items():
        cpu = [c for _, c in runs]
        print(
            f"| {name} | {statistics.median(r for r, _ in runs):,.0f} | {statistics.median(cpu):.2f} | "
            f"{min(cpu):.2f}..{max(cpu):.2f} |"
        )
    pairs = [b[1] / a[1] for a, b in zip(*results.values(), strict=True)]
    print(
        f"\nCPU per item, set_num_threads(1) / as is, per pair: median {statistics.median(pairs):.3f}, "
        f"{sum(p < 1 for p in pairs)} of {len(pairs)} pairs lower"
    )
    print(
        f"loadavg at end: {Path('/proc/loadavg').read_text().split()[:3]}; threads now: "
        f"{len(os.listdir(f'/proc/{os.getpid()}/task'))}"
    )


if __name__ == "__main__":
    main()
