"""The time to the limit against what then happened (docs/performance.md, "The forecast of the
time to the limit against real jobs"): a training-like job recorded with `memprobe record` in a
memory cgroup of its own made here (as root, cgroup v1 or v2), and its forecast made again from
the recording as it stood some minutes before its end.

    python benchmarks/bench_forecast.py run killed --limit-mb 1400 -o /tmp/fc/killed
    python benchmarks/bench_forecast.py run levels --limit-mb 4096 --epochs 40 -o /tmp/fc/levels
    python benchmarks/bench_forecast.py run shared --limit-mb 1800 --bystander-mb 500 -o /tmp/fc/shared
    python benchmarks/bench_forecast.py replay /tmp/fc/killed --before 1,2,3,5

The job (JOB): a list of dicts with object strings read by 4 forked DataLoader workers,
recreated every epoch (each generation copies the pages it reads: copy-on-access), and a
training loop that keeps every ``--keep-every``-th loss with its graph (``levels``: none). ``shared``
runs a bystander in the same cgroup, started first: a process that allocates ``--bystander-mb``
over ``--bystander-s`` seconds and then holds it.

``run`` makes the cgroup beside memprobe's own (memory.limit_in_bytes on v1, memory.max on v2),
moves memprobe into it before it starts the job (memprobe and the job in it, as in a container),
records with ``--live`` (one line of the live view every 10 s to live.log), and removes the
cgroup after. ``replay`` re-analyses the recording cut at some minutes before its end (or
before its first OOM kill) and prints the forecast then against what happened, beside what the
charge's own rate (memprobe before issue 40) said then.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

JOB = r"""
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

records, epochs, keep_every = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


class Records(Dataset):
    def __init__(self, n):
        self.rows = [{"id": i, "text": f"record {i} " * 4, "label": i % 10} for i in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        return torch.tensor([len(r["text"]), r["label"]], dtype=torch.float32)


model = torch.nn.Linear(2, 16)
losses = []
loader = DataLoader(Records(records), batch_size=64, shuffle=True, num_workers=4)
start = time.time()
for epoch in range(epochs):
    for k, x in enumerate(loader):
        x = (x - 5.0) / 10.0  # normalised in the main process: the graph keeps this copy, not the shared batch
        loss = model(x).pow(2).mean()
        if keep_every and k % keep_every == 0:
            losses.append(loss)  # kept with its graph: the leak
    print(f"epoch {epoch + 1} ended at {time.time() - start:.1f} s", flush=True)
"""

BYSTANDER = r"""
import sys, time
mb, seconds = int(sys.argv[1]), float(sys.argv[2])
held = []
for _ in range(mb):
    held.append(bytearray(1 << 20))
    time.sleep(seconds / mb)
print("bystander holds", mb, "MB", flush=True)
while True:
    time.sleep(60)
"""


def make_cgroup(limit_mb: int) -> Path:
    from memprobe.probe import cgroup

    where = cgroup.locate(os.getpid())
    if where is None:
        sys.exit("no memory cgroup mounted")
    d = where.mount / f"memprobe-forecast-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    limit_file = "memory.limit_in_bytes" if where.version == 1 else "memory.max"
    (d / limit_file).write_text(str(limit_mb * 1024 * 1024))
    return d


def remove_cgroup(d: Path) -> None:
    for _ in range(100):
        try:
            d.rmdir()
            return
        except OSError:
            time.sleep(0.2)


def run(args: argparse.Namespace) -> None:
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    d = make_cgroup(args.limit_mb)
    enter = lambda: (d / "cgroup.procs").write_text(str(os.getpid()))  # noqa: E731
    bystander = None
    try:
        if args.kind == "shared":
            bystander = subprocess.Popen(
                [sys.executable, "-c", BYSTANDER, str(args.bystander_mb), str(args.bystander_s)],
                preexec_fn=enter,  # noqa: PLW1509  (this process runs no thread of its own)
            )
            time.sleep(1.0)
        keep = args.keep_every if args.kind != "levels" else 0
        argv = [sys.executable, "-m", "memprobe", "record", "-o", str(out), "--live", "--every", "10"]
        argv += [
            "--",
            sys.executable,
            "-W",
            "ignore",
            "-c",
            JOB,
            str(args.records),
            str(args.epochs),
            str(keep),
        ]
        started = time.time()
        with open(str(out) + ".live.log", "w") as live, open(str(out) + ".stdout", "w") as stdout:
            done = subprocess.run(argv, stdout=stdout, stderr=live, preexec_fn=enter, check=False)
        print(f"{args.kind}: exit {done.returncode} after {time.time() - started:.0f} s; cgroup {d}")
        if bystander is not None:
            print(f"bystander: {'alive' if bystander.poll() is None else f'ended {bystander.returncode}'}")
    finally:
        if bystander is not None and bystander.poll() is None:
            bystander.kill()
            bystander.wait()
        remove_cgroup(d)


def cut(results, t: float):
    """The recording's tables and meta as they stood ``t`` s after its start."""
    meta = json.loads(json.dumps(results.metas[0]))
    run_id = meta["run_id"]
    tables = {name: results.run_table(name, run_id) for name in ("samples", "progress", "system")}
    tables = {k: v[v["t"] <= t] if len(v) and "t" in v else v for k, v in tables.items()}
    procs = []
    for p in meta["processes"]:
        if p["start_t"] > t:
            continue
        p["last_t"] = min(p["last_t"], t)
        if p.get("end_t") is not None and p["end_t"] > t:
            p["end_t"] = None
        procs.append(p)
    meta["processes"] = procs
    meta["elapsed_s"] = t
    system = tables["system"]
    group = meta.get("cgroup") or {}
    if len(system) and "cgroup_mb" in system:
        charge = system["cgroup_mb"].dropna()
        kills = system["cgroup_oom_kills"].dropna() if "cgroup_oom_kills" in system else []
        group["usage_mb"] = float(charge.iloc[-1]) if len(charge) else group.get("usage_mb")
        group["oom_kills"] = int(kills.iloc[-1]) if len(kills) else group.get("oom_kills")
    return meta, tables


def replay(args: argparse.Namespace) -> None:
    from memprobe.analysis import limit
    from memprobe.analysis.recorded import analyse
    from memprobe.core import forecast_words
    from memprobe.results.folder import ResultSet

    results = ResultSet.load(Path(args.results))
    meta = results.metas[0]
    env = results.manifest.get("environment") or {}
    full = analyse(
        meta,
        results.run_table("samples", meta["run_id"]),
        results.run_table("progress", meta["run_id"]),
        system=results.run_table("system", meta["run_id"]),
        mem_total_mb=env.get("mem_total_mb"),
    ).summary
    lim = full.memory_limit or {}
    kills = lim.get("oom_killed") or []
    end = kills[0]["t"] if kills else float(full.duration_s or 0.0)
    what = (
        f"first OOM kill at {end:.0f} s ({', '.join(kills[0]['victims'])})"
        if kills
        else f"end at {end:.0f} s, no kill"
    )
    print(
        f"{args.results}: limit {lim.get('limit_mb')} MB; {what}; peak total PSS {full.total_pss_peak_mb:.0f} MB"
    )
    print(f"  full record: {forecast_words.words(lim.get('forecast'), lim.get('limit_mb'))}")
    for minutes in (float(m) for m in args.before.split(",")):
        t = end - 60 * minutes
        if t <= 0:
            continue
        m, tables = cut(results, t)
        s = analyse(
            m,
            tables["samples"],
            tables["progress"],
            system=tables["system"],
            mem_total_mb=env.get("mem_total_mb"),
        ).summary
        f = (s.memory_limit or {}).get("forecast") or {}
        at = f.get("limit_at_t")
        soon, late = f.get("limit_at_soonest_t"), f.get("limit_at_latest_t")
        # What memprobe said before issue 40: the charge's rate as it rose to its peak, from that
        # peak to the limit.
        charge = limit.cgroup_charge(tables["system"], tables["samples"], limit.entered_at(m))
        rate = limit.charge_rate(charge)
        old_at = (
            float(charge.idxmax()) + 60 * (lim["limit_mb"] - float(charge.max())) / rate
            if charge is not None and rate is not None and rate >= 1.0
            else None
        )
        print(
            f"  at {t:.0f} s ({minutes:g} min before): forecast "
            + (
                f"limit at {at:.0f} s ({soon:.0f}-{late:.0f} s)"
                if at is not None and late is not None
                else f"limit at {at:.0f} s (from {soon:.0f} s)"
                if at is not None
                else f"none ({f.get('why_none')})"
            )
            + (f", epoch {f['generation_at_limit']:.1f}" if f.get("generation_at_limit") else "")
            + "; the charge's rate said "
            + (f"limit at {old_at:.0f} s" if old_at is not None else "none")
        )
        print(f"    {forecast_words.words(f, lim.get('limit_mb'))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("kind", choices=("killed", "levels", "shared"))
    r.add_argument("-o", "--output", required=True)
    r.add_argument("--limit-mb", type=int, required=True)
    r.add_argument("--records", type=int, default=300_000)
    r.add_argument("--epochs", type=int, default=1000)
    r.add_argument("--keep-every", type=int, default=8)
    r.add_argument("--bystander-mb", type=int, default=500)
    r.add_argument("--bystander-s", type=float, default=120.0)
    p = sub.add_parser("replay")
    p.add_argument("results")
    p.add_argument("--before", default="1,2,3,5")
    args = ap.parse_args()
    (run if args.command == "run" else replay)(args)


if __name__ == "__main__":
    main()
