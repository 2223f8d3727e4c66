"""`memprobe record` on two real trees: exact readings where memory moves, estimates between.

Not a test: it records each job with the default settings, then prints, per process, how many
points its USS curve has per second (exact readings + estimates on cheap ticks), the estimate's
error against the next exact reading, and the sampler's CPU share over the run.

    python benchmarks/bench_record_tree.py                  # both trees (~3 minutes on 2 cores)
    python benchmarks/bench_record_tree.py --tree five      # (a) only
    python benchmarks/bench_record_tree.py --tree torchrun  # (b) only
    python benchmarks/bench_record_tree.py --truth 1 -- python job.py   # any job of yours
    python benchmarks/bench_record_tree.py --overhead 4 --children 200  # items/s alone vs recorded

Trees:
  five      a main process builds a ~700 MB list of dicts, then forks 4 workers (os.fork) that
            iterate it slowly (copy-on-access: each worker's USS climbs toward a full copy);
            5 processes of ~700 MB RSS each.
  torchrun  torchrun --nproc_per_node=2: each rank builds a list of dicts and iterates a DataLoader
            with 4 fork workers (2 epochs, persistent_workers=False): launcher + 2 ranks + 8 workers
            = 11 processes.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd

FIVE = textwrap.dedent("""
    import os, sys, time
    records, seconds = int(sys.argv[1]), float(sys.argv[2])
    rows = [{"id": i, "path": f"images/train/{i % 1000:04d}/{i:09d}.jpg", "label": i % 1000,
             "box": [float(i), 1.0, 2.0, 3.0]} for i in range(records)]
    time.sleep(1.0)
    kids = []
    for w in range(4):
        pid = os.fork()
        if pid == 0:
            # Read every record once over `seconds`, in 100 slices: copy-on-access at a steady pace.
            step = len(rows) // 100
            t0 = time.monotonic()
            for k in range(100):
                s = 0
                for r in rows[k * step:(k + 1) * step]:
                    s += r["id"] + r["label"]
                time.sleep(max(0.0, t0 + seconds * (k + 1) / 100 - time.monotonic()))
            time.sleep(2.0)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    time.sleep(1.0)
""")

# The job of --overhead: main builds a list of dicts and forks CHILDREN children that each read
# their share of it as fast as they can, then wait until every one has (all alive at once: a wide
# tree); it prints its own items/s (every child's items over the wall time from the first fork
# to the last exit).
WIDE = textwrap.dedent("""
    import os, sys, time
    records, children = int(sys.argv[1]), int(sys.argv[2])
    rows = [{"id": i, "label": i % 1000, "box": [float(i), 1.0]} for i in range(records)]
    done_r, done_w = os.pipe()
    go_r, go_w = os.pipe()
    t0 = time.monotonic()
    kids = []
    for c in range(children):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            s = 0
            for r in rows[c::children]:
                s += r["id"] + r["label"]
            os.write(done_w, b"x")
            os.read(go_r, 1)
            os._exit(0)
        kids.append(pid)
    os.close(done_w)
    got = 0
    while got < children:
        got += len(os.read(done_r, children))
    os.close(go_w)
    for pid in kids:
        os.waitpid(pid, 0)
    print(f"ITEMS_PER_S {records / (time.monotonic() - t0):.1f}", flush=True)
""")

RANK = textwrap.dedent("""
    import os, sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    records, pause = int(sys.argv[1]), float(sys.argv[2])

    class Records(Dataset):
        def __init__(self):
            self.rows = [{"id": i, "path": f"images/train/{i % 1000:04d}/{i:09d}.jpg", "label": i % 1000,
                          "box": [float(i), 1.0, 2.0, 3.0]} for i in range(records)]
        def __len__(self):
            return len(self.rows)
        def __getitem__(self, i):
            r = self.rows[i]
            return r["id"] + r["label"]

    torch.set_num_threads(1)
    loader = DataLoader(Records(), batch_size=500, num_workers=4, shuffle=True,
                        persistent_workers=False, multiprocessing_context="fork")
    for epoch in range(2):
        for batch in loader:
            time.sleep(pause)
        print(f"rank {os.environ.get('RANK')} epoch {epoch} done", flush=True)
""")


def markdown(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += [
        "| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |"
        for row in df.itertuples(index=False)
    ]
    return "\n".join(lines)


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    mem = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal")) // 1024
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:,} MB RAM, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def record(out: Path, command: list[str], truth_s: float | None = None) -> float:
    """Run ``memprobe record`` on ``command``; returns the wall time. ``truth_s``: meanwhile,
    read every process of the tree exactly (smaps_rollup, from this process, unknown to the
    sampler) every ``truth_s`` seconds into ``out/truth.csv``: what each estimate is judged on."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memprobe", "record", "--no-report", "-o", str(out), "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rows: list[tuple[float, int, float]] = []
    reader = None
    if truth_s:
        reader = threading.Thread(target=read_truth, args=(proc, truth_s, rows), daemon=True)
        reader.start()
    _, stderr = proc.communicate()
    if reader is not None:
        reader.join()
        pd.DataFrame(rows, columns=["wall", "pid", "uss_mb"]).to_csv(out / "truth.csv", index=False)
    if proc.returncode != 0:
        raise SystemExit(f"record failed ({proc.returncode}):\n{stderr[-3000:]}")
    return time.monotonic() - t0


def read_truth(proc: subprocess.Popen, every_s: float, rows: list[tuple[float, int, float]]) -> None:
    """smaps_rollup of every descendant of memprobe's process but its own, every ``every_s``."""
    import psutil

    me = psutil.Process(proc.pid)
    while proc.poll() is None:
        t = time.monotonic()
        try:
            tree = me.children(recursive=True)
        except psutil.Error:
            break
        for p in tree:
            try:
                wall = time.time()
                m = p.memory_full_info()
            except psutil.Error:
                continue
            rows.append((wall, p.pid, m.uss / 2**20))
        time.sleep(max(0.0, t + every_s - time.monotonic()))


def truth_errors(samples: pd.DataFrame, meta: dict, truth: pd.DataFrame) -> pd.DataFrame:
    """Each independent exact reading against the sampler's curve of that process at the same
    moment (exact readings and estimates, interpolated between its two nearest ticks)."""
    live = samples[~samples["missing"].astype(bool)].copy()
    live["value"] = live["uss_mb"].where(live["tier"] == "pss", live["uss_est_mb"])
    kinds = live.groupby("pid")["kind"].last()
    # A process started or ended between the two ticks: a fork or an exit moves its parent's USS
    # by hundreds of MB at a moment no curve of ticks can place (the line between them is no
    # estimate of anything); such points are shown apart.
    changes = sorted(
        t
        for p in meta.get("processes", [])
        for t in (p.get("start_t"), p.get("end_t"), p.get("last_t"))
        if t is not None
    )
    out = []
    for r in truth.itertuples():
        g = live[(live["pid"] == r.pid) & live["value"].notna()]
        t = r.wall - meta["started"]
        before, after = g[g["t"] <= t].tail(1), g[g["t"] > t].head(1)
        if before.empty or after.empty or r.uss_mb < 1.0:
            continue  # outside the process's curve
        (t0, v0), (t1, v1) = before[["t", "value"]].iloc[0], after[["t", "value"]].iloc[0]
        value = v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        exact_near = bool(((g["tier"] == "pss") & ((g["t"] - t).abs() <= 0.5)).any())
        i = bisect.bisect_right(changes, t0)
        out.append(
            {
                "kind": kinds.get(r.pid),
                "error_pct": 100 * abs(value - r.uss_mb) / r.uss_mb,
                "points": "at a change of the tree"
                if i < len(changes) and changes[i] <= t1
                else ("near an exact reading" if exact_near else "estimated"),
            }
        )
    return pd.DataFrame(out)


def curve_points(samples: pd.DataFrame) -> pd.DataFrame:
    """Per process: points per second of its USS curve (exact + estimated) while it grows."""
    live = samples[~samples["missing"].astype(bool)].copy()
    live["usage"] = live["uss_mb"].where(live["tier"] == "pss", live["uss_est_mb"])
    rows = []
    for pid, g in live.groupby("pid"):
        g = g.sort_values("t")
        curve = g.dropna(subset=["usage"])
        if len(curve) < 2:
            continue
        top = curve["usage"].max()
        # The growth window: from its first point to the first point within 5 % of its peak.
        end_t = float(curve.loc[curve["usage"] >= 0.95 * top, "t"].iloc[0])
        window = curve[curve["t"] <= end_t]
        span = end_t - float(window["t"].iloc[0])
        grew = float(window["usage"].iloc[-1] - window["usage"].iloc[0])
        exact = window[window["tier"] == "pss"]
        rows.append(
            {
                "pid": pid,
                "role": g["role"].iloc[-1],
                "kind": g["kind"].iloc[-1],
                "grew_mb": round(grew, 1),
                "window_s": round(span, 1),
                "points": len(window),
                "exact": len(exact),
                "points_per_s": round(len(window) / span, 2) if span > 0 else None,
                "exact_per_s": round(len(exact) / span, 3) if span > 0 else None,
                "exact_total": int((g["tier"] == "pss").sum()),
            }
        )
    return pd.DataFrame(rows)


def estimate_errors(samples: pd.DataFrame, meta: dict) -> pd.DataFrame:
    """The last estimate before each exact reading (the cheap row of the tick before) against
    that reading, per process kind; the sampler's own check (same tick) is in the meta."""
    live = samples[~samples["missing"].astype(bool)].sort_values(["pid", "t"])
    # Moments the tree's structure changed (a process appeared or went): the counters cannot see
    # what a fork or an exit does to the others' USS; those intervals are shown apart.
    # A child's start counts too, at the tick it fell in: one forked between a tick's children
    # lists and its readings changes its parent's USS at that tick, though its first row comes a
    # tick later.
    ticks = sorted(set(samples["t"]))
    starts = [p["start_t"] for p in meta.get("processes", []) if p.get("start_t") is not None]
    changes = sorted(
        set(live.groupby("pid")["t"].min())
        | set(samples.loc[samples["missing"].astype(bool), "t"])
        | {ticks[i - 1] for i in (bisect.bisect_right(ticks, s) for s in starts) if i > 0}
    )
    # A parent's first fork: its forked children's earliest start (their pages were its own).
    forks: dict[int, float] = {}
    for p in meta.get("processes", []):
        if p.get("forked") and p.get("start_t") is not None:
            forks[p["ppid"]] = min(forks.get(p["ppid"], float("inf")), p["start_t"])
    out = []
    for pid, g in live.groupby("pid"):
        prev = last_exact = None
        for r in g.itertuples():
            if r.tier == "pss" and prev is not None and pd.notna(prev.uss_est_mb) and r.uss_mb >= 1.0:
                since = last_exact if last_exact is not None else float(g["t"].min())
                mine = [c for c in changes if c != float(g["t"].min())]
                out.append(
                    {
                        "pid": pid,
                        "kind": r.kind,
                        "t": r.t,
                        "estimate": prev.uss_est_mb,
                        "exact": r.uss_mb,
                        "error_pct": 100 * abs(prev.uss_est_mb - r.uss_mb) / r.uss_mb,
                        "event": any(since < c <= r.t for c in mine),
                        # The change came at this very tick: the previous tick's estimate could
                        # not know it (the sampler's own check, at the same tick, does).
                        "at_change": any(prev.t < c <= r.t for c in mine),
                        "after_fork": r.t > forks.get(int(pid), float("inf")),
                    }
                )
            if r.tier == "pss":
                last_exact = r.t
            prev = r
    return pd.DataFrame(out)


def error_summary(g: pd.DataFrame) -> dict:
    """n, median, 90th percentile and max of ``error_pct``, and the share within 10 %."""
    return {
        "n": len(g),
        "median %": round(g["error_pct"].median(), 2),
        "p90 %": round(g["error_pct"].quantile(0.9), 2),
        "max %": round(g["error_pct"].max(), 2),
        "within 10 %": f"{(g['error_pct'] <= 10).mean():.0%}",
    }


def report(name: str, command: list[str], out: Path, wall: float) -> None:
    samples = pd.read_parquet(out / "samples.parquet")
    (run_dir,) = (out / "runs").iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    s = meta["sampler"]
    print(f"\n### {name}\n\ncommand: `{' '.join(command)}` (recorded with `memprobe record`, defaults)")
    print(
        f"wall {wall:.1f} s, recorded {meta['elapsed_s']:.1f} s, processes {samples['pid'].nunique()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"sampler: {s['cpu_s']:.3f} s CPU = **{100 * s['cpu_share']:.2f} % of one core**; "
        f"{s['exact_readings']} exact readings in {s['pss_rounds']} ticks, {s['cheap_rounds']} cheap-only ticks; "
        f"exact tick mean {1e3 * (s['pss_round_mean_s'] or 0):.1f} ms, cheap tick {1e3 * (s['cheap_round_mean_s'] or 0):.2f} ms"
    )
    print(f"sampler's own check (estimate vs exact at the same tick): {s['estimate_error']}")
    pts = curve_points(samples)
    if not pts.empty:
        print("\nper process, growth window (first point to first point within 5 % of its peak USS):\n")
        print(markdown(pts))
    err = estimate_errors(samples, meta)
    if not err.empty:
        print("\nestimate before each exact reading vs that reading (USS >= 1 MB):\n")
        plain = err[~err["event"]]
        known = err[~err["at_change"]]
        parents = ("main", "rank", "launcher")
        groups = [
            *((k, g) for k, g in err.groupby("kind")),
            ("all", err),
            ("all, no process of the tree appeared or went since the last reading", plain),
            *((f"{k}, same", g) for k, g in plain.groupby("kind") if k in parents),
            ("all but readings at the tick of a change (the estimate had seen it)", known),
            *((f"{k}, after a change too", g) for k, g in known.groupby("kind") if k in parents),
            # What the parents' model of their workers' copies is judged on.
            *(
                (f"{k}, after its first fork, after a change too", g)
                for k, g in known[known["after_fork"]].groupby("kind")
                if k in parents
            ),
            ("readings at the tick of a change (vs the tick before)", err[err["at_change"]]),
        ]
        rows = [{"kind": kind, **error_summary(g)} for kind, g in groups if not g.empty]
        print(markdown(pd.DataFrame(rows)))
    if (out / "truth.csv").exists():
        truth = truth_errors(samples, meta, pd.read_csv(out / "truth.csv"))
        if not truth.empty:
            print(
                "\nthe curve (estimates and exact readings) vs independent exact readings at the same moment "
                "(USS >= 1 MB; 'estimated': no exact reading of the sampler within 0.5 s; 'at a change': a "
                "process of the tree started or ended between the two ticks around it):\n"
            )
            rows = [
                {"kind": kind, "points": points, **error_summary(g)}
                for (kind, points), g in truth.groupby(["kind", "points"])
            ]
            print(markdown(pd.DataFrame(rows)))


def overhead(pairs: int, children: int, records: int) -> None:
    """The job's own items/s alone and recorded (default settings), interleaved; the sampler's
    share of a core and its mean interval between ticks from each recording's meta."""
    scripts = Path(tempfile.mkdtemp(prefix="bench_record_tree-src-"))
    script = scripts / "wide.py"
    script.write_text(WIDE)
    job = [sys.executable, str(script), str(records), str(children)]
    rows = []
    try:
        for k in range(pairs):
            for recorded in (False, True) if k % 2 == 0 else (True, False):
                out = scripts / f"rec{k}"
                cmd = [sys.executable, "-m", "memprobe", "record", "--no-report", "-o", str(out), "--", *job]
                done = subprocess.run(cmd if recorded else job, capture_output=True, text=True, check=True)
                rate = float(done.stdout.split("ITEMS_PER_S")[1].split()[0])
                row = {"pair": k + 1, "recorded": recorded, "items/s": round(rate)}
                if recorded:
                    (run_dir,) = (out / "runs").iterdir()
                    meta = json.loads((run_dir / "meta.json").read_text())
                    s = meta["sampler"]
                    ticks = s["pss_rounds"] + s["cheap_rounds"]
                    row.update(
                        sampler_core_pct=round(100 * s["cpu_share"], 2),
                        interval_s=round(meta["elapsed_s"] / max(ticks, 1), 2),
                    )
                    shutil.rmtree(out)
                rows.append(row)
    finally:
        shutil.rmtree(scripts, ignore_errors=True)
    df = pd.DataFrame(rows)
    print(
        f"\njob: main + {children} forked children reading {records:,} records, load {os.getloadavg()[0]:.2f}"
    )
    print(markdown(df))
    alone = df[~df["recorded"]].set_index("pair")["items/s"]
    rec = df[df["recorded"]].set_index("pair")["items/s"]
    ratio = (rec / alone).round(3)
    print(f"\nrecorded / alone per pair: {ratio.tolist()}; median {ratio.median():.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", choices=["five", "torchrun", "both"], default="both")
    ap.add_argument(
        "--records", type=int, default=1_500_000, help="(a): records (~700 MB RSS: 466 bytes each)"
    )
    ap.add_argument(
        "--seconds", type=float, default=40.0, help="(a): how long each worker takes to read them all"
    )
    ap.add_argument("--rank-records", type=int, default=600_000, help="(b): records per rank")
    ap.add_argument("--pause", type=float, default=0.02, help="(b): seconds per batch in each rank")
    ap.add_argument("--keep", metavar="DIR", help="keep the results folders here")
    ap.add_argument(
        "--truth",
        type=float,
        metavar="S",
        help="also read every process exactly every S seconds from outside the sampler, and judge "
        "every point of its curve against those readings (costs CPU beside the job)",
    )
    ap.add_argument(
        "--overhead",
        type=int,
        metavar="PAIRS",
        help="instead: the job's own items/s alone and under `memprobe record`, PAIRS pairs "
        "interleaved (alone/recorded, recorded/alone, ...), on a main process forking --children",
    )
    ap.add_argument("--children", type=int, default=200, help="(--overhead): forked children")
    ap.add_argument("--wide-records", type=int, default=1_000_000, help="(--overhead): records")
    ap.add_argument("command", nargs="*", help="after --: record this job instead of the two trees")
    args = ap.parse_args()
    print(f"machine: {machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.overhead:
        overhead(args.overhead, args.children, args.wide_records)
        return
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_record_tree-"))
    base.mkdir(parents=True, exist_ok=True)
    scripts = Path(tempfile.mkdtemp(prefix="bench_record_tree-src-"))
    try:
        if args.command:
            out = base / "job"
            report("a job of yours", args.command, out, record(out, args.command, args.truth))
            return
        if args.tree in ("five", "both"):
            script = scripts / "five.py"
            script.write_text(FIVE)
            cmd = [sys.executable, str(script), str(args.records), str(args.seconds)]
            out = base / "five"
            report(
                "(a) 5 processes of ~700 MB RSS (main + 4 fork workers reading a list of dicts)",
                cmd,
                out,
                record(out, cmd, args.truth),
            )
        if args.tree in ("torchrun", "both"):
            script = scripts / "rank.py"
            script.write_text(RANK)
            torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
            cmd = [torchrun, "--nproc_per_node=2", str(script), str(args.rank_records), str(args.pause)]
            out = base / "torchrun"
            report(
                "(b) torchrun, 2 ranks x DataLoader with 4 fork workers (11 processes)",
                cmd,
                out,
                record(out, cmd, args.truth),
            )
    finally:
        shutil.rmtree(scripts, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
