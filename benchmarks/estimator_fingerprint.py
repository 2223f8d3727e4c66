"""Every number the USS estimator gives on fixed synthetic trees, as JSON lines: a fingerprint.

Not a test: run it before and after a change to the estimator that must not change what it
computes (a refactoring), and compare the two outputs byte for byte:

    python benchmarks/estimator_fingerprint.py > before.jsonl   # on the old code
    python benchmarks/estimator_fingerprint.py > after.jsonl    # on the new code
    cmp before.jsonl after.jsonl

Each seed drives the planner through a tree as the record sampler would (memprobe.probe.
tree_sampler): a main process that builds data, forks a generation of workers (DataLoader
workers or plain forked children, by seed), a second generation after the first exits, an
exec'd process beside them and a forked child that execs; censuses where the planner wants
them; exact readings where it chooses them within a budget, of a synthetic truth. Every tick
prints the chosen readings, every estimate, priority and census decision (floats by ``repr``:
any change of the last bit shows).
"""

from __future__ import annotations

import argparse
import json
import random

try:
    from memprobe.probe.estimator import ExactPlanner
except ImportError:  # before the estimator had a package of its own
    from memprobe.probe.exact import ExactPlanner  # type: ignore[no-redef]

MiB = 1024 * 1024
PAGE = 4096


def drive(seed: int) -> list[dict]:
    rng = random.Random(seed)
    dealt_kind = seed % 2 == 0
    plan = ExactPlanner(hosts={1})
    out: list[dict] = []
    # pid -> [minflt, rss, truth uss, file rss]
    procs: dict[int, list[float]] = {1: [0, 200 * MiB, 150 * MiB, 20 * MiB]}
    forked: dict[int, int] = {}
    born: dict[int, float] = {}
    groups: dict[int, int] = {1: 1, 50: 50}
    cpu, budget = 0.0, (0.002, 0.01, 0.03)[seed % 3]
    for k in range(260):
        t = round(0.2 * k, 4)
        if k == 10:  # main alone in its tree until then
            procs[50] = [0, 80 * MiB, 60 * MiB, 10 * MiB]
        if k == 60:  # a second parent, of two DataLoader workers
            for pid in (80, 81):
                procs[pid] = [0, procs[50][1], 0.0, procs[50][3]]
                forked[pid], groups[pid] = 50, 50
                born[pid] = t
                procs[50][2] = 2 * MiB
        for pid in (80, 81):
            if pid in procs:
                copy = rng.randint(0, 2 * MiB // PAGE)
                procs[pid][0] += copy
                procs[pid][2] += copy * PAGE
                procs[50][2] += copy * PAGE * 0.2
        # main builds its data, then forks workers at tick 30; they copy, exit at 130; again at 150
        if k < 30 or 100 < k < 150:
            grow = rng.randint(0, 4 * MiB // PAGE)
            procs[1][0] += grow
            procs[1][1] += grow * PAGE
            procs[1][2] += grow * PAGE * rng.uniform(0.8, 1.0)
        if k in (30, 150):
            for w in range(4):
                pid = 100 + 10 * (k // 150) + w
                procs[pid] = [0, procs[1][1], 0.0, procs[1][3]]
                forked[pid], groups[pid] = 1, 1
                born[pid] = t - rng.uniform(0.0, 0.2)
            procs[1][2] = 5 * MiB
        if k == 40:  # a forked child that execs later (a torchrun rank seen before its exec)
            procs[70] = [0, procs[1][1], 0.0, 0.0]
            forked[70], groups[70] = 1, 1
        if k == 48:
            del forked[70]
            groups[70] = 70
            procs[70] = [0, 30 * MiB, 25 * MiB, 5 * MiB]
        for pid in [p for p in procs if p >= 100]:
            if rng.random() < 0.8:
                copy = rng.randint(0, 3 * MiB // PAGE)
                procs[pid][0] += copy
                procs[pid][2] += copy * PAGE
                procs[1][2] += copy * PAGE * rng.uniform(0.0, 0.3)
            if rng.random() < 0.05:
                procs[pid][3] = max(procs[pid][3] - 256 * 1024, 0.0)
                procs[pid][1] -= 256 * 1024
        if 50 in procs and rng.random() < 0.3:
            d = rng.randint(-2 * MiB, 2 * MiB)
            procs[50][1] += d
            procs[50][2] = max(procs[50][2] + d, 0.0)
        if k in (130, 250):
            for pid in [p for p in procs if p >= 100]:
                del procs[pid], forked[pid]  # their group stays known: their sharers are told
                procs[1][2] += 10 * MiB
        if k == 200:
            del procs[70], groups[70]
        counters = {pid: (int(p[0]), int(p[1])) for pid, p in procs.items()}
        files = {pid: float(p[3]) for pid, p in procs.items()}
        dealt = {p for p in forked if dealt_kind or p in (80, 81)}
        plan.observe(t, counters, dict(groups), dict(forked), dict(born), dealt, files)
        plan.hosts = {1, 50, 70} & set(procs)
        plan.files_moved = k % 17 == 0
        rec: dict = {"t": t}
        # censuses, as TreeSampler._censuses orders them
        new = plan.census_new()
        for pid in new:
            plan.census(pid, *census_of(procs[pid], rng), start="fork", error=1e5, level_error=2e5)
        due = plan.census_due()
        for pid in due:
            if rng.random() < 0.05:
                plan.drop_census(pid)
            else:
                plan.census(pid, *census_of(procs[pid], rng), error=1e5, level_error=3e5)
        stale = plan.census_stale()
        for pid in stale:
            plan.census(pid, *census_of(procs[pid], rng), start="carry", error=1e5, level_error=2e5)
        rec["census"] = [new, due, stale]
        rec["quiet"] = sorted(p for p, tr in plan.tracks.items() if tr.went_quiet())
        rec["expected_error"] = {p: tr.expected_error() for p, tr in sorted(plan.tracks.items())}
        rec["needs"] = sorted(p for p in plan.tracks if plan.needs_reading(p))
        rec["priority"] = {p: plan.priority(p, t) for p in sorted(plan.tracks)}
        rec["cost"] = {p: plan.predicted_cost(p) for p in sorted(plan.tracks)}
        earned = budget * t
        chosen = plan.choose(t, 0.85 * earned - cpu, everyone=k % 97 == 96, reserve_s=0.1 * earned)
        rec["chosen"] = chosen
        rec["replaced"] = {}
        for pid in chosen:
            if pid == 50 and k % 11 == 0 and k > 80:
                plan.tried(pid)  # unreadable this once
                continue
            p = procs[pid]
            cost = 60e-6 + rng.uniform(5e-9, 15e-9) * p[1] / PAGE
            cpu += cost
            rec["replaced"][pid] = plan.exact(pid, t, float(p[2]), int(p[1]), cost, float(p[3]) * 0.5)
            if plan.wants_census(pid):
                plan.census(pid, *census_of(p, rng), start="reading", error=1e5, level_error=2e5)
        if k % 23 == 5:
            plan.want(1)
        rec["estimate"] = {p: plan.estimate(p) for p in sorted(procs)}
        rec["wants_census"] = sorted(p for p in plan.tracks if plan.wants_census(p))
        rec["planner"] = [plan.s_per_byte, plan.pool_share, len(plan.checks)]
        out.append(rec)
    out.append({"checks": [[c.t, c.pid, c.estimate, c.exact, c.event, c.error_pct] for c in plan.checks]})
    return out


def census_of(p: list[float], rng: random.Random) -> tuple[float, float]:
    return p[2] * rng.uniform(0.9, 1.05), p[1] * 0.9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=6)
    args = ap.parse_args()
    for seed in range(args.seeds):
        for rec in drive(seed):
            print(json.dumps({"seed": seed, **rec}, default=repr))


if __name__ == "__main__":
    main()
