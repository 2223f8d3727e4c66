"""A synthetic long recording: the results folder `memprobe record` leaves before its finish.

Not a test: it writes, in seconds instead of hours, what `memprobe record -- CMD` writes over a
job of ``--hours`` with ``--processes`` processes (a main process and its forked workers), up to
the moment the job ended and memprobe gathers the rows (or was killed: the manifest still says
``running`` and names a writer that is gone, so `memprobe report DIR` finishes it). The same files
and fields as a real recording (studied on `memprobe record -o /tmp/x -- python -c ...`):

    manifest.json                 kind record, status running, writer: a pid that ended
    runs/<run>/meta.json          the run's record as written when the job ended (status ok)
    runs/<run>/samples.jsonl      one row per process per tick (0.2 s, the default --interval),
                                  the first tick with every column, later rows compact (no empty
                                  fields); an exact (PSS) reading of each process every 10 s,
                                  spread over the ticks, with estimated USS on the cheap ticks
    runs/<run>/system.jsonl       one row per tick; MemAvailable every 1 s
    runs/<run>/{progress,threads,events}.jsonl, marks.txt   empty (no memprobe.mark)

Memory: the main process holds 400 MB (its workers share it); each worker starts with 20 MB of its
own and grows 10 MB an hour, worker 1 grows 60 MB an hour (the job's leak), all with noise.

    python benchmarks/gen_long_record.py OUT --hours 8 --processes 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from memprobe.probe.sampler import SAMPLE_COLUMNS

INTERVAL_S = 0.2  # memprobe record's default --interval (cli/record.py)
EXACT_EVERY = 50  # ticks between two exact readings of one process (10 s, the PSS rounds' maximum)
MEM_AVAILABLE_EVERY = 5  # ticks (1 s: sampling.mem_available_interval_s)
SETTINGS = {
    "interval_s": INTERVAL_S,
    "pss_cpu_budget": 0.01,
    "pss_min_interval_s": 0.25,
    "pss_max_interval_s": 10.0,
    "group_scan_interval_s": 10.0,
    "mem_available_interval_s": 1.0,
    "threads_of_main": False,
    "enabled": True,
}
# the exact tier's columns: SAMPLE_COLUMNS after the cheap ones
EXACT_FIELDS = SAMPLE_COLUMNS[SAMPLE_COLUMNS.index("pss_mb") :]


def ended_pid() -> int:
    """The pid of a process that has ended: the manifest's writer, gone (memprobe killed)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


class Proc:
    def __init__(self, index: int, pid: int, shared_mb: float, own_mb: float, growth_mb_h: float) -> None:
        self.index, self.pid = index, pid
        self.worker = index - 1
        self.role = "main" if index == 0 else f"worker {self.worker}"
        self.kind = "main" if index == 0 else "fork"
        self.shared_mb, self.own_mb, self.growth_mb_h = shared_mb, own_mb, growth_mb_h
        self.cpu_s = 0.0

    def row(self, t: float, tick: int, n: int, rnd: random.Random, new: bool) -> dict:
        """The process's row at ``tick`` (``new``: its first, an exact reading)."""
        own = self.own_mb + self.growth_mb_h * t / 3600 + rnd.uniform(-2.0, 2.0)
        rss = self.shared_mb + own + 3.0
        self.cpu_s += INTERVAL_S * 0.9
        exact = new or (tick + self.index * 7) % EXACT_EVERY == 0
        row: dict = {
            "t": round(t, 4),
            "pid": self.pid,
            "role": self.role,
            "worker": self.worker,
            "state": "S",
            "tier": "pss" if exact else "cheap",
            "missing": False,
            "reason": None,
            "rss_mb": rss,
            "rss_anon_mb": rss - 3.0,
            "rss_file_mb": 3.0,
            "rss_shmem_mb": 0.0,
            "cpu_s": round(self.cpu_s, 2),
            "minflt": int(own * 256),
            "threads": 1,
            "sys_cpu_s": round(self.cpu_s / 10, 2),
        }
        if exact:
            row.update(dict.fromkeys(EXACT_FIELDS, 0.0))
            row.update(
                pss_mb=own + self.shared_mb / n,
                pss_anon_mb=own + self.shared_mb / n,
                uss_mb=own,
                private_dirty_mb=own,
                shared_dirty_mb=self.shared_mb,
                shared_clean_mb=3.0,
            )
        row.update(rank=-1, kind=self.kind, uss_est_mb=None if exact else own + rnd.uniform(-0.5, 0.5))
        return (
            row if tick == 0 else {k: v for k, v in row.items() if v is not None}
        )  # see tree_sampler._compact


def system_line(t: float, tick: int, processes: int, procs: list[Proc]) -> str:
    available = 20000.0 - 400.0 - sum(p.growth_mb_h * t / 3600 for p in procs)
    return (
        json.dumps(
            {
                "t": round(t, 4),
                "dev_shm_mb": 0.05,
                "mem_available_mb": available if tick % MEM_AVAILABLE_EVERY == 0 else None,
                "sampler_cpu_s": round(t * 0.008, 6),
                "processes": processes,
            }
        )
        + "\n"
    )


def write_ticks(samples: TextIO, system: TextIO, procs: list[Proc], rnd: random.Random, ticks: range) -> None:
    """Every process's row at each of ``ticks`` (all alive, none new): `Proc.row`'s lines, byte for byte.

    The same random draws in the same order and the same arithmetic as `Proc.row` and
    `system_line`, formatted by templates made once per process (`json.dumps` writes a float as its
    repr, the keys in insertion order, a compact row without its None fields) and written in blocks
    of ticks: 116 MB (0.3 h x 64) in 3 s instead of 32 with a dict and a `json.dumps` per row.
    """
    n = len(procs)
    step = INTERVAL_S * 0.9
    draw = rnd.random
    # by process: the text before its rss_mb (cheap, exact) and after its last field (cheap, exact)
    heads, tails = {}, {}
    for p in procs:
        head = f'"pid": {p.pid}, "role": {json.dumps(p.role)}, "worker": {p.worker}, "state": "S", '
        tail = f', "rank": -1, "kind": {json.dumps(p.kind)}'
        heads[p.index] = (
            head + '"tier": "cheap", "missing": false, "rss_mb": ',
            head + '"tier": "pss", "missing": false, "rss_mb": ',
        )
        tails[p.index] = (tail + ', "uss_est_mb": ', tail + "}")
    block: list[str] = []
    sys_block: list[str] = []
    for tick in ticks:
        t = 0.0017 + tick * INTERVAL_S
        ts = '{"t": ' + repr(round(t, 4)) + ", "
        for p in procs:
            own = p.own_mb + p.growth_mb_h * t / 3600 + (-2.0 + (2.0 - -2.0) * draw())
            rss = p.shared_mb + own + 3.0
            p.cpu_s += step
            cpu = p.cpu_s
            is_exact = (tick + p.index * 7) % EXACT_EVERY == 0
            cheap_part = (
                f'{rss!r}, "rss_anon_mb": {rss - 3.0!r}, "rss_file_mb": 3.0, "rss_shmem_mb": 0.0, '
                f'"cpu_s": {round(cpu, 2)!r}, "minflt": {int(own * 256)}, "threads": 1, '
                f'"sys_cpu_s": {round(cpu / 10, 2)!r}'
            )
            if is_exact:
                pss = own + p.shared_mb / n
                block.append(
                    f'{ts}{heads[p.index][1]}{cheap_part}, "pss_mb": {pss!r}, "pss_anon_mb": {pss!r}, '
                    f'"pss_file_mb": 0.0, "pss_shmem_mb": 0.0, "uss_mb": {own!r}, "shared_clean_mb": 3.0, '
                    f'"shared_dirty_mb": {p.shared_mb!r}, "private_clean_mb": 0.0, '
                    f'"private_dirty_mb": {own!r}, "swap_mb": 0.0, "swap_pss_mb": 0.0, '
                    f'"anon_huge_mb": 0.0{tails[p.index][1]}\n'
                )
            else:
                est = own + (-0.5 + (0.5 - -0.5) * draw())
                block.append(f"{ts}{heads[p.index][0]}{cheap_part}{tails[p.index][0]}{est!r}}}\n")
        if tick % MEM_AVAILABLE_EVERY == 0:
            sys_block.append(system_line(t, tick, n, procs))
        else:
            sys_block.append(
                f'{ts}"dev_shm_mb": 0.05, "mem_available_mb": null, "sampler_cpu_s": {round(t * 0.008, 6)!r}, '
                f'"processes": {n}}}\n'
            )
        if len(block) >= 50_000:
            samples.write("".join(block))
            system.write("".join(sys_block))
            block.clear()
            sys_block.clear()
    samples.write("".join(block))
    system.write("".join(sys_block))


def generate(out: Path, hours: float, processes: int, seed: int = 1) -> dict:
    rnd = random.Random(seed)
    out.mkdir(parents=True)
    run = "python"
    run_dir = out / "runs" / run
    run_dir.mkdir(parents=True)
    started = time.time() - hours * 3600
    procs = [Proc(0, 1000, 0.0, 400.0, 5.0)] + [
        Proc(i, 1000 + i, 400.0, 20.0, 60.0 if i == 2 else 10.0) for i in range(1, processes)
    ]
    ticks = int(hours * 3600 / INTERVAL_S)
    command = ["python", "train.py"]
    with open(run_dir / "samples.jsonl", "w") as samples, open(run_dir / "system.jsonl", "w") as system:
        for tick in range(min(ticks, 2)):  # every process's first row: `Proc.row`, with every column
            t = 0.0017 + tick * INTERVAL_S
            # the workers are forked at 0.1 s: first seen at the second tick
            alive = procs if tick else procs[:1]
            lines = [
                json.dumps(p.row(t, tick, processes, rnd, tick == (0 if p.index == 0 else 1))) for p in alive
            ]
            samples.write("\n".join(lines) + "\n")
            system.write(system_line(t, tick, processes, procs))
        write_ticks(samples, system, procs, rnd, range(2, ticks))
    for name in ("progress", "threads", "events"):
        (run_dir / f"{name}.jsonl").touch()
    (run_dir / "marks.txt").touch()
    end = round(0.0017 + ticks * INTERVAL_S, 4)
    last = round(0.0017 + (ticks - 1) * INTERVAL_S, 4)
    meta = {
        "run_id": run,
        "index": 0,
        "kind": "record",
        "status": "ok",
        "error": None,
        "items": 0,
        "batches": 0,
        "milestones": {"warm": 0.2017, "done": end},
        "marks_recorded": False,
        "started": started,
        "elapsed_s": end,
        "exit_code": 0,
        "sampler": {
            "cpu_s": end * 0.008,
            "cpu_share": 0.008,
            "pss_rounds": ticks // 10,
            "cheap_rounds": ticks - ticks // 10,
            "pss_round_mean_s": 0.002,
            "cheap_round_mean_s": 0.0003,
            "exact_readings": ticks * processes // EXACT_EVERY,
            "estimate_error": {
                "median_pct": None,
                "max_pct": None,
                "n": 0,
                "n_events": 0,
                "events_median_pct": None,
            },
        },
        "dataset_info": {},
        "root_pid": procs[0].pid,
        "ranks": {},
        "start_methods": {},
        "processes": [
            {
                "pid": p.pid,
                "ppid": 999 if p.index == 0 else procs[0].pid,
                "role": p.role,
                "kind": p.kind,
                "forked": p.index > 0,
                "start_method": None,
                "rank": -1,
                "worker": p.worker,
                "generation": None if p.index == 0 else 0,
                "parent_role": None if p.index == 0 else "main",
                "start_t": -0.0025 if p.index == 0 else 0.1,
                "first_t": 0.0017 if p.index == 0 else 0.2017,
                "last_t": last,
                "end_t": end,
                "command": " ".join(command),
                "first_pss_t": 0.0017 if p.index == 0 else 0.2017,
                "last_pss_t": last,
                "exact_readings": ticks // EXACT_EVERY,
                "threads_first_t": None,
                "threads_last_t": None,
                "threads_max": 0,
            }
            for p in procs
        ],
        "spec": {
            "run_id": run,
            "backend": "python",
            "mode": "record",
            "workers": processes - 1,
            "workload": "record",
            "verdict": {"growth_threshold_mb": 50.0},
            "expect": None,
            "timeout_s": None,
            "sampling": SETTINGS,
            "command": command,
        },
    }
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2))
    manifest = {
        "schema_version": 2,
        "kind": "record",
        "scenario": "record-python",
        "scenario_path": None,
        "description": "memprobe record: python train.py (synthetic: benchmarks/gen_long_record.py)",
        "status": "running",
        "started": started,
        "finished": None,
        "environment": {"memprobe": "0.1.0", "python": sys.version.split()[0], "cpu_count": os.cpu_count()},
        "runs": [run],
        "writer": {"pid": ended_pid(), "start_ticks": 0, "boot_id": None},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    size = sum(f.stat().st_size for f in run_dir.iterdir())
    return {"rows": ticks * processes - processes + 1, "ticks": ticks, "jsonl_mb": size / 2**20}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the results folder to create (must not exist)")
    p.add_argument("--hours", type=float, required=True, help="the job's length")
    p.add_argument("--processes", type=int, required=True, help="processes in the tree (main + workers)")
    args = p.parse_args()
    if args.processes < 1 or args.hours <= 0 or not math.isfinite(args.hours):
        p.error("--processes at least 1, --hours above 0")
    t0 = time.monotonic()
    facts = generate(args.out, args.hours, args.processes)
    print(
        f"{args.out}: {args.hours:g} h x {args.processes} processes: {facts['rows']:,} sample rows, "
        f"{facts['jsonl_mb']:,.0f} MB of JSON lines, written in {time.monotonic() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
