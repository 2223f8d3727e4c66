"""The record/watch sampler's own CPU cost on wide fork trees, and its effect on the job.

Not a test: it measures and prints markdown for docs/performance.md.

    python benchmarks/bench_wide_sampler.py --widths 50 200 300 --repeats 3
    python benchmarks/bench_wide_sampler.py --src before=/tmp/main-src --src after=.   # side by side
    python benchmarks/bench_wide_sampler.py --items 4 --children 200 2   # items/s recorded / alone

Cost (default): ``memprobe record --no-report`` of ``tests/integration/trees/wide_fork.py``: a
main process filling --parent-mb MB forks N children that each write 256 KiB and hold --hold s
(all alive at once). The sampler's CPU seconds, share of one core, ticks, mean cheap tick and
exact readings come from each run's meta.json (``sampler``); the job's own reading of every
smaps_rollup (its truth line) against the sampler's total at that moment is not judged here
(tests/integration/test_trees.py does). Widths, repeats and sources are interleaved (the order
alternates each repeat), so a machine loaded by others weighs on every variant alike; the load
average is printed with every row.

``--src LABEL=DIR`` runs ``memprobe`` from the source tree DIR (put first on PYTHONPATH), e.g. a
``git archive`` of the commit to compare against; without it, the installed memprobe.

``--ticks N``: instead, in this process, N ticks of the sampler itself (``TreeSampler.run_round``,
no budget left for exact readings: the cheap tier and its bookkeeping, rows JSON-encoded as the
record's writer does) on a real tree of each width: the first ticks' cost (every process new),
then the median tick's; ``--profile``: with cProfile on the thread clock. Compare sources with
``PYTHONPATH=DIR python benchmarks/bench_wide_sampler.py --ticks 16``.

``--items PAIRS``: instead, the job's own items/s alone and under ``memprobe record``, interleaved
(bench_record_tree.py's wide job: main + N forked children reading a list of dicts), for each
--children N and each source.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WIDE_FORK = HERE.parent / "tests" / "integration" / "trees" / "wide_fork.py"


def env_for(src: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    return env


def record(out: Path, job: list[str], src: str | None) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-m", "memprobe", "record", "--no-report", "-o", str(out), "--", *job]
    # Run from the results' folder: ``python -m`` puts the working directory first on sys.path.
    done = subprocess.run(cmd, capture_output=True, text=True, env=env_for(src), check=True, cwd=out.parent)
    (run_dir,) = (out / "runs").iterdir()
    return done, json.loads((run_dir / "meta.json").read_text())


def cost_row(meta: dict, width: int) -> dict:
    s = meta["sampler"]
    ticks = s["pss_rounds"] + s["cheap_rounds"]
    return {
        "core_pct": round(100 * s["cpu_share"], 3),
        "cpu_s": s["cpu_s"],
        "ticks": ticks,
        "interval_s": round(meta["elapsed_s"] / max(ticks, 1), 2),
        "cheap_tick_ms": None
        if s["cheap_round_mean_s"] is None
        else round(1000 * s["cheap_round_mean_s"], 2),
        "ms_per_process_tick": round(1000 * s["cpu_s"] / max(ticks, 1) / (width + 1), 4),
        "exact": s.get("exact_readings"),
        "elapsed_s": round(meta["elapsed_s"], 1),
        "load": round(os.getloadavg()[0], 2),
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def costs(
    widths: list[int], repeats: int, srcs: list[tuple[str, str | None]], parent_mb: float, hold: float
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench_wide_sampler-"))
    rows = []
    try:
        for r in range(repeats):
            order = srcs if r % 2 == 0 else srcs[::-1]
            for width in widths if r % 2 == 0 else widths[::-1]:
                for label, src in order:
                    out = tmp / f"{label}-{width}-{r}"
                    job = [
                        sys.executable,
                        str(WIDE_FORK),
                        "--children",
                        str(width),
                        "--parent-mb",
                        str(parent_mb),
                    ]
                    job += ["--hold", str(hold), "--truth", str(tmp / "truth.txt")]
                    _, meta = record(out, job, src)
                    row = {"src": label, "children": width, "repeat": r + 1, **cost_row(meta, width)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    shutil.rmtree(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        "\n| source | children | sampler, % of a core | ms per tick per process | interval s | cheap tick ms | exact readings | load |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, _ in srcs:
        for width in widths:
            g = [x for x in rows if x["src"] == label and x["children"] == width]
            print(
                f"| {label} | {width} | {spread([x['core_pct'] for x in g])} | "
                f"{spread([x['ms_per_process_tick'] for x in g])} | {spread([x['interval_s'] for x in g])} | "
                f"{spread([x['cheap_tick_ms'] or 0 for x in g])} | {spread([x['exact'] or 0 for x in g])} | "
                f"{spread([x['load'] for x in g])} |"
            )


def items(pairs: int, widths: list[int], srcs: list[tuple[str, str | None]], records: int) -> None:
    sys.path.insert(0, str(HERE))
    from bench_record_tree import WIDE  # the job of bench_record_tree.py --overhead

    tmp = Path(tempfile.mkdtemp(prefix="bench_wide_sampler-"))
    script = tmp / "wide.py"
    script.write_text(WIDE)
    rows = []
    try:
        for k in range(pairs):
            for width in widths:
                job = [sys.executable, str(script), str(records), str(width)]
                variants: list[tuple[str | None, str | None]] = [(None, None), *srcs]
                for label, src in variants if k % 2 == 0 else variants[::-1]:
                    if label is None:
                        done = subprocess.run(job, capture_output=True, text=True, check=True)
                        row = {"children": width, "pair": k + 1, "src": "alone"}
                    else:
                        out = tmp / f"{label}-{width}-{k}"
                        done, meta = record(out, job, src)
                        shutil.rmtree(out)
                        row = {"children": width, "pair": k + 1, "src": label, **cost_row(meta, width)}
                    row["items_s"] = float(done.stdout.split("ITEMS_PER_S")[1].split()[0])
                    row["load"] = round(os.getloadavg()[0], 2)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| children | source | recorded / alone, per pair | median | sampler % of a core | load |")
    print("|---:|---|---|---:|---:|---:|")
    for width in widths:
        alone = {x["pair"]: x["items_s"] for x in rows if x["children"] == width and x["src"] == "alone"}
        for label, _ in srcs:
            g = [x for x in rows if x["children"] == width and x["src"] == label]
            ratios = [x["items_s"] / alone[x["pair"]] for x in g]
            print(
                f"| {width} | {label} | {', '.join(f'{v:.3f}' for v in ratios)} | {statistics.median(ratios):.3f} | "
                f"{spread([x['core_pct'] for x in g])} | {spread([x['load'] for x in g])} |"
            )


def ticks(widths: list[int], n: int, profile: bool) -> None:
    import cProfile
    import pstats
    import time

    from memprobe.probe.sampler import SamplerSettings
    from memprobe.probe.tree_sampler import TreeSampler

    for width in widths:
        go_r, go_w = os.pipe()
        root = os.fork()
        if root == 0:  # the wide tree: a parent holding 100 MB, children holding 256 KiB each
            os.close(go_w)
            data = bytearray(range(256)) * (100 * 4096)
            for _ in range(width):
                if os.fork() == 0:
                    mine = bytes(range(256)) * 1024
                    os.read(go_r, 1)
                    os._exit(0 if mine and data else 1)
            os.read(go_r, 1)
            os._exit(0)
        os.close(go_r)
        time.sleep(2 + width * 0.01)  # every child forked (the first tick then sees them all new)
        sampler = TreeSampler(
            root,
            lambda table, rows: "".join(json.dumps(r) + "\n" for r in rows),
            SamplerSettings(interval_s=0.2, pss_cpu_budget=1e-9),  # no budget: cheap ticks only
            t0=time.monotonic(),
        )
        prof = cProfile.Profile(time.thread_time) if profile else None
        costs = []
        for k in range(n):
            c0 = time.thread_time()
            if prof is not None and k >= 3:
                prof.enable()
            sampler.run_round(time.monotonic())
            if prof is not None:
                prof.disable()
            costs.append(time.thread_time() - c0)
            time.sleep(0.25)
        os.close(go_w)
        os.waitpid(root, 0)
        steady = costs[3:]
        print(
            f"children {width}: first ticks {', '.join(f'{1000 * c:.1f}' for c in costs[:3])} ms; then median "
            f"{1000 * statistics.median(steady):.2f} ms ({1000 * min(steady):.2f}-{1000 * max(steady):.2f}), "
            f"{1000 * statistics.median(steady) / (width + 1):.4f} ms per process; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if prof is not None:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[50, 200, 300], help="children of the wide tree")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parent-mb", type=float, default=100.0)
    ap.add_argument("--hold", type=float, default=12.0, help="seconds the children hold after the truth")
    ap.add_argument("--src", action="append", default=[], help="LABEL=DIR: memprobe from source tree DIR")
    ap.add_argument("--ticks", type=int, default=0, help="instead: N ticks of the sampler in this process")
    ap.add_argument("--profile", action="store_true", help="(--ticks) with cProfile")
    ap.add_argument("--items", type=int, default=0, help="instead: PAIRS of items/s alone vs recorded")
    ap.add_argument("--children", type=int, nargs="+", default=[200, 2], help="(--items) children")
    ap.add_argument("--records", type=int, default=1_000_000, help="(--items) records of the job")
    args = ap.parse_args()
    srcs: list[tuple[str, str | None]] = [tuple(s.split("=", 1)) for s in args.src] or [("installed", None)]  # type: ignore[misc]
    print(f"load average at start: {os.getloadavg()}")
    if args.ticks:
        ticks(args.widths, args.ticks, args.profile)
    elif args.items:
        items(args.items, args.children, srcs, args.records)
    else:
        costs(args.widths, args.repeats, srcs, args.parent_mb, args.hold)


if __name__ == "__main__":
    main()
