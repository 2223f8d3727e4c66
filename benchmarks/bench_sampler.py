"""What sampling costs: one round of each tier, the sampler's CPU share, and its effect on a loader.

Not a test: it measures and prints markdown for docs/performance.md.

    python benchmarks/bench_sampler.py                 # everything (~6 minutes on 2 cores)
    python benchmarks/bench_sampler.py --part rounds   # round costs only

Parts:
  rounds    cost of one cheap round (stat+status) and one PSS round (smaps_rollup) over a parent
            holding a list dataset of 100 MB or 1 GB (torch imported) and 2/4/8 forked workers.
  share     the sampler's CPU time / wall time at default settings, over real runs.
  overhead  loader items/s with the sampler on versus off, alternated side by side.
  budget    the sampler's share and the PSS rounds in the growth window for pss_cpu_budget 0.015,
            0.012 (the default) and 0.010, interleaved (list x fork, 500k records).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memprobe.probe import procfs

MB = 1024 * 1024


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    mem = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal")) // 1024
    return f"{cpu}, {os.cpu_count()} cores, {mem:,} MB RAM, Linux {platform.release()}, Python {platform.python_version()}"


def _hold(size_mb: int) -> list:
    # ~ 100 bytes per record as Python objects, all resident.
    return [("record", i, float(i)) for i in range(size_mb * MB // 150)]


def _fork_workers(n: int) -> list[int]:
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
        pids.append(pid)
    return pids


def _median_cost(fn, pids: list[int], repeats: int = 15) -> float:
    costs = []
    for _ in range(repeats):
        t = time.thread_time()
        for pid in pids:
            fn(pid)
        costs.append(time.thread_time() - t)
    return statistics.median(costs)


def part_rounds() -> None:
    import torch  # noqa: F401  (the realistic baseline: a process that imported torch)

    print("\n### One sampling round (median of 15; CPU time of the reading thread)\n")
    print("| dataset in parent | workers | processes | cheap round | PSS round | PSS per process |")
    print("|---|---|---|---|---|---|")
    for size in (100, 1024):
        data = _hold(size)
        rss = procfs.read_cheap(os.getpid()).rss / MB
        for n in (2, 4, 8):
            workers = _fork_workers(n)
            try:
                time.sleep(0.3)
                pids = [os.getpid(), *workers]
                cheap = _median_cost(procfs.read_cheap, pids)
                pss = _median_cost(procfs.read_pss, pids)
                print(
                    f"| {size} MB (RSS {rss:,.0f} MB) | {n} | {len(pids)} | {cheap * 1e3:.2f} ms "
                    f"| {pss * 1e3:.1f} ms | {pss / len(pids) * 1e3:.1f} ms |"
                )
            finally:
                for pid in workers:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
        del data


def _spec(backend: str, mode: str, records: int):
    from memprobe.run.scenario import parse_scenario

    s = parse_scenario(
        f"{{dataset: {{records: {records}}}, backends: [{backend}], modes: [{mode}], workers: [2]}}",
        "bench.yaml",
    )
    return s.runs()[0]


def part_share(repeats: int) -> None:
    from memprobe.run.runner import execute

    print("\n### Sampler CPU share at default settings (sampler CPU s / run wall s)\n")
    print("| run | wall s | sampler CPU s | share of one core | PSS rounds | mean PSS round |")
    print("|---|---|---|---|---|---|")
    tmp = Path(tempfile.mkdtemp())
    try:
        for backend, mode in (("list", "fork"), ("numpy", "spawn"), ("arrow", "thread")):
            for r in range(repeats):
                st = execute(_spec(backend, mode, 500_000), tmp / f"{backend}-{mode}-{r}")
                s = st.sampler
                print(
                    f"| {backend} x {mode} #{r + 1} | {st.elapsed_s:.1f} | {s['cpu_s']:.3f} | "
                    f"{s['cpu_s'] / st.elapsed_s:.2%} | {s['pss_rounds']} | {s['pss_round_mean_s'] * 1e3:.1f} ms |"
                )
    finally:
        shutil.rmtree(tmp)


def _rate(state) -> float:
    milestones = state.milestones
    return state.items / (milestones["done"] - milestones["warm"])


def part_overhead(repeats: int) -> None:
    from memprobe.run.runner import execute

    print("\n### Loader throughput, sampler on vs off (list x fork, 2 workers, 500k records)\n")
    print("| pair | items/s off | items/s on | on / off |")
    print("|---|---|---|---|")
    tmp = Path(tempfile.mkdtemp())
    ratios = []
    try:
        for r in range(repeats):
            rates = {}
            order = (True, False) if r % 2 else (False, True)
            for sample in order:
                st = execute(_spec("list", "fork", 500_000), tmp / f"{r}-{sample}", sample=sample)
                rates[sample] = _rate(st)
            ratios.append(rates[True] / rates[False])
            print(f"| {r + 1} | {rates[False]:,.0f} | {rates[True]:,.0f} | {ratios[-1]:.3f} |")
        print(f"\nmedian on/off ratio over {repeats} alternated pairs: {statistics.median(ratios):.3f}")
    finally:
        shutil.rmtree(tmp)


def part_budget(repeats: int) -> None:
    from dataclasses import replace

    from memprobe.results.files import read_jsonl
    from memprobe.run.runner import execute

    budgets = (0.015, 0.012, 0.010)
    print(
        "\n### Budget vs share and PSS rounds in the growth window (list x fork, 2 workers, 500k records)\n"
    )
    print("| pss_cpu_budget | share of one core, per run | PSS rounds in the window, per run |")
    print("|---|---|---|")
    tmp = Path(tempfile.mkdtemp())
    out: dict[float, list[tuple[float, int]]] = {b: [] for b in budgets}
    try:
        for r in range(repeats):
            for b in budgets if r % 2 == 0 else budgets[::-1]:
                base = _spec("list", "fork", 500_000)
                spec = replace(base, sampling=replace(base.sampling, pss_cpu_budget=b))
                st = execute(spec, tmp / f"{b}-{r}")
                ticks = {
                    row["t"] for row in read_jsonl(tmp / f"{b}-{r}" / "samples.jsonl") if row["tier"] == "pss"
                }
                window = sum(st.milestones["warm"] <= t <= st.milestones["done"] + 1.0 for t in ticks)
                out[b].append((st.sampler["cpu_s"] / st.elapsed_s, window))
        for b, runs in out.items():
            print(
                f"| {b} | {', '.join(f'{s:.2%}' for s, _ in runs)} | {', '.join(str(w) for _, w in runs)} |"
            )
    finally:
        shutil.rmtree(tmp)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("rounds", "share", "overhead", "budget", "all"), default="all")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    print(
        f"machine: {machine()}\ncommand: python {' '.join(sys.argv)}\nloadavg at start: "
        f"{Path('/proc/loadavg').read_text().split()[:3]}"
    )
    if args.part in ("rounds", "all"):
        part_rounds()
    if args.part in ("share", "all"):
        part_share(max(1, args.repeats // 3))
    if args.part in ("overhead", "all"):
        part_overhead(args.repeats)
    if args.part == "budget":  # not in "all": a comparison for choosing the default
        part_budget(args.repeats)
    print(f"\nloadavg at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
