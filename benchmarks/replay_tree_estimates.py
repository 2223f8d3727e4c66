"""Replay a recorded tree through memprobe.probe.estimator.ExactPlanner, offline.

Not a test: it feeds a results folder's rows (``memprobe record`` or ``watch``, e.g. one kept by
``bench_record_tree.py --keep DIR``) to a fresh planner, tick by tick, so that a change to the
USS estimate can be judged on the same readings before it is judged on a new run (the machine's
load makes no two runs alike).

    python benchmarks/replay_tree_estimates.py DIR            # the recording's own exact readings
    python benchmarks/replay_tree_estimates.py DIR --budget 0.01
        # DIR recorded with a big --pss-budget (processes read at most ticks while they move):
        # the planner chooses its readings within this budget (the CPU simulated: 0.6 ms a
        # tick, 16.8 ms per 700 MB read), and gets those the recording has at that tick

It prints, per kind of process, the estimate of the tick before each (chosen) exact reading
against that reading, as bench_record_tree.py does, apart for readings after a change of the tree
(a process appeared or went since the last reading) and at the tick of one.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from memprobe.probe.estimator import ExactPlanner
from memprobe.probe.estimator.tuning import MiB

PARENTS = ("main", "rank", "launcher")
# The simulated sampler's CPU: a tick without readings, and a reading (overhead + page walk), as
# measured on the 2-core machine (0.4-0.8 ms a tick; 16.8 ms for a 700 MB process).
TICK_S = 0.0006
READ_S_PER_BYTE = 16.8e-3 / (700 * MiB)


@dataclass
class Error:
    pid: int
    kind: str
    t: float
    estimate: float
    exact: float
    after_change: bool  # a process of the tree appeared or went since this process's last reading
    at_change: bool  # ... at this very tick: the tick before could not know it

    @property
    def pct(self) -> float:
        return 100.0 * abs(self.estimate - self.exact) / max(self.exact, MiB)


def load(folder: Path) -> tuple[pd.DataFrame, dict]:
    samples = pd.read_parquet(folder / "samples.parquet")
    (run_dir,) = (folder / "runs").iterdir()
    return samples, json.loads((run_dir / "meta.json").read_text())


def families(meta: dict) -> tuple[dict[int, int], dict[int, int]]:
    """pid -> its fork-connected family, and forked child -> parent, from meta.json ``processes``."""
    procs = {p["pid"]: p for p in meta["processes"]}
    forked = {pid: p["ppid"] for pid, p in procs.items() if p.get("forked") and p.get("ppid") in procs}

    def head(pid: int) -> int:
        while pid in forked:
            pid = forked[pid]
        return pid

    return {pid: head(pid) for pid in procs}, forked


def replay(folder: Path, budget: float | None, make: type[ExactPlanner] = ExactPlanner) -> list[Error]:
    samples, meta = load(folder)
    kinds = {p["pid"]: p.get("kind") or p["role"] for p in meta["processes"]}
    groups, forked = families(meta)
    born = {p["pid"]: p["start_t"] for p in meta["processes"] if p.get("start_t") is not None}
    live = samples[~samples["missing"].astype(bool)].sort_values(["t"], kind="stable")
    plan = make()
    errors: list[Error] = []
    seen: set[int] = set()
    last_read: dict[int, float] = {}
    changes: list[float] = []
    before: dict[int, float | None] = {}
    cpu, t_first = 0.0, None
    for t, tick in live.groupby("t", sort=True):
        t = float(t)
        t_first = t if t_first is None else t_first
        pids = set(tick["pid"].astype(int))
        if pids - seen or seen - pids:
            changes.append(t)
        gone = {p for p in seen if p not in pids}
        seen = (seen | pids) - gone
        counters = {
            int(r.pid): (int(r.minflt), int(float(r.rss_mb) * MiB))
            for r in tick.itertuples()
            if pd.notna(r.minflt)
        }
        mine = {p: forked[p] for p in counters if p in forked}
        plan.observe(t, counters, groups, mine, born, {p for p in mine if kinds.get(p) == "dataloader"})
        exact = {int(r.pid): r for r in tick.itertuples() if r.tier == "pss" and pd.notna(r.uss_mb)}
        if budget is None:
            chosen = [p for p in exact if p in plan.tracks]
        else:
            cpu += TICK_S
            earned = budget * (t - t_first)
            chosen = plan.choose(t, 0.9 * earned - cpu, reserve_s=0.1 * earned)
            chosen = [p for p in chosen if p in exact]
        for pid in chosen:
            r = exact[pid]
            rss = int(float(r.rss_mb) * MiB)
            cpu += 60e-6 + READ_S_PER_BYTE * rss
            prev = before.get(pid)
            since = last_read.get(pid, -1.0)
            if prev is not None and float(r.uss_mb) >= 1.0:
                errors.append(
                    Error(
                        pid,
                        kinds.get(pid, "?"),
                        t,
                        prev,
                        float(r.uss_mb) * MiB,
                        any(since < c <= t for c in changes),
                        bool(changes) and changes[-1] == t,
                    )
                )
            clean = float(r.private_clean_mb) * MiB if pd.notna(r.private_clean_mb) else 0.0
            plan.exact(pid, t, float(r.uss_mb) * MiB, rss, 60e-6 + READ_S_PER_BYTE * rss, clean)
            last_read[pid] = t
        before = {pid: plan.estimate(pid) for pid in pids}
    return errors


def summary(errors: list[Error]) -> list[str]:
    rows = ["| kind | readings | n | median % | max % | within 10 % |", "|---|---|---|---|---|---|"]
    for kind in sorted({e.kind for e in errors}):
        mine = [e for e in errors if e.kind == kind]
        for label, group in (
            ("no change since the last", [e for e in mine if not e.after_change]),
            ("after a change too", [e for e in mine if not e.at_change]),
            ("at the tick of a change", [e for e in mine if e.at_change]),
        ):
            if not group:
                continue
            pct = [e.pct for e in group]
            within = sum(p <= 10 for p in pct) / len(pct)
            rows.append(
                f"| {kind} | {label} | {len(pct)} | {statistics.median(pct):.1f} | {max(pct):.1f} | {within:.0%} |"
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a results folder of memprobe record/watch")
    ap.add_argument(
        "--budget", type=float, help="choose the readings within this CPU share (dense recordings)"
    )
    ap.add_argument("--verbose", action="store_true", help="every parent's check")
    args = ap.parse_args()
    errors = replay(args.folder, args.budget)
    print("\n".join(summary(errors)))
    if args.verbose:
        for e in errors:
            if e.kind in PARENTS:
                print(
                    f"{e.t:8.2f} {e.kind:8} {e.pid:7} est {e.estimate / MiB:8.1f} exact {e.exact / MiB:8.1f}"
                    f" {e.pct:6.1f} %{' after change' if e.after_change else ''}{' AT change' if e.at_change else ''}"
                )


if __name__ == "__main__":
    main()
