"""Hand-made recorded jobs (record / watch results) for the analysis and report tests: rows of
samples per process, the meta's process list, and a results folder written from them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from memprobe.results.files import RunWriter, write_json_atomic
from memprobe.results.folder import SCHEMA_VERSION
from memprobe.results.gather import consolidate
from memprobe.results.upgrade import complete_processes

MB_PER_FAULT = 4096 / 2**20


def proc_rows(
    pid: int,
    role: str,
    worker: int,
    points: list[tuple],
    *,
    rank: int = -1,
    kind: str | None = None,
    anon_is_faults: bool = False,
) -> list[dict]:
    """Rows of one process: points are (t, tier, uss, rss, faults_mb[, uss_est]); faults in MB of 4 KiB pages.
    ``anon_is_faults``: its anonymous RSS is its faults (a parent whose every fault is a new page)."""
    out = []
    for t, tier, uss, rss, faults_mb, *est in points:
        row = {
            "t": t,
            "pid": pid,
            "role": role,
            "worker": worker,
            "rank": rank,
            "state": "S",
            "tier": tier,
            "missing": False,
            "reason": None,
            "rss_mb": rss,
            "pss_mb": (uss + 5) if tier == "pss" else None,
            "uss_mb": uss if tier == "pss" else None,
            "minflt": faults_mb / MB_PER_FAULT,
            "cpu_s": t,
            "private_dirty_mb": uss if tier == "pss" else None,
            "uss_est_mb": est[0] if est else None,
            "anon_huge_mb": 0.0 if tier == "pss" else None,
        }
        if kind is not None:
            row["kind"] = kind
        if anon_is_faults:
            row["rss_anon_mb"] = faults_mb
        out.append(row)
    return out


def gone_row(pid: int, role: str, worker: int, t: float, rank: int = -1) -> dict:
    return {
        "t": t,
        "pid": pid,
        "role": role,
        "worker": worker,
        "rank": rank,
        "state": None,
        "tier": "gone",
        "missing": True,
        "reason": "exited",
        "rss_mb": None,
        "pss_mb": None,
        "uss_mb": None,
        "minflt": None,
        "cpu_s": None,
    }


def proc_info(
    pid: int,
    role: str,
    kind: str,
    *,
    ppid: int | None,
    start_t: float,
    last_t: float,
    worker: int = -1,
    rank: int = -1,
    forked: bool = False,
    start_method: str | None = None,
    generation: int | None = None,
    end_t: float | None = None,
) -> dict:
    return {
        "pid": pid,
        "ppid": ppid,
        "role": role,
        "kind": kind,
        "forked": forked,
        "start_method": start_method,
        "rank": rank,
        "worker": worker,
        "generation": generation,
        "parent_role": None,
        "start_t": start_t,
        "first_t": start_t + 0.1,
        "last_t": last_t,
        "end_t": end_t,
        "first_pss_t": None,
        "last_pss_t": None,
        "exact_readings": 0,
        "command": "",
    }


def job_meta(
    procs: list[dict],
    *,
    items: int = 0,
    milestones: dict | None = None,
    ranks: dict | None = None,
    mode: str = "fork",
    workers: int = 2,
    kind: str = "record",
) -> dict:
    return {
        "run_id": "train",
        "index": 0,
        "kind": kind,
        "status": "ok",
        "error": None,
        "items": items,
        "milestones": milestones or {"warm": 5.5, "done": 20.0},
        "elapsed_s": 21.0,
        "sampler": {"cpu_s": 0.1},
        "root_pid": 1,
        "ranks": ranks or {},
        "start_methods": {"fork": workers},
        "processes": procs,
        "start_method": None if mode in ("record", "watch") else mode,
        "max_workers": workers,
        "verdict": {"growth_threshold_mb": 50.0},
    }


# -- a main process that builds a list of dicts, then forks two DataLoader workers that copy it ----

# main's readings as it builds 300 MB by t=4, and at its first tick after it forked at 5 (its
# USS falls to 10 MB: everything is shared).
MAIN_BUILDS = [
    (0.1, "pss", 5, 20, 5),
    (2.0, "pss", 150, 165, 150),
    (4.0, "pss", 300, 315, 300),
    (5.2, "pss", 10, 316, 301),
]


def fork_job(worker_growth: float = 200.0, allocated_share: float | None = None) -> tuple[dict, pd.DataFrame]:
    """main builds 300 MB by t=4; workers fork at t=5 (main's USS falls to 10 MB: everything is
    shared) and each copies ``worker_growth`` MB by t=20; main's pages become private again as
    they copy (no faults of its own). ``allocated_share``: the workers' anonymous RSS is known
    and rises by that share of their faults (memory they allocate rather than copy)."""
    g = worker_growth
    main = proc_rows(
        1,
        "main",
        -1,
        [
            *MAIN_BUILDS,
            (10.0, "pss", 10 + g / 2, 316, 302),
            (20.0, "pss", 10 + g, 317, 303),
        ],
        kind="main",
        anon_is_faults=True,
    )
    workers = []
    for pid, w in ((11, 0), (12, 1)):
        workers += proc_rows(
            pid,
            f"worker {w}",
            w,
            [
                (5.2, "pss", 1, 300, 1),
                (7.0, "cheap", None, 300, g / 4),
                (10.0, "pss", g / 2, 310, g / 2),
                (20.0, "pss", g, 320, g),
            ],
            kind="dataloader",
        )
        workers.append(gone_row(pid, f"worker {w}", w, 21.0))
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=20.0),
        proc_info(
            11,
            "worker 0",
            "dataloader",
            ppid=1,
            start_t=5.0,
            last_t=20.0,
            worker=0,
            forked=True,
            start_method="fork",
            generation=0,
            end_t=21.0,
        ),
        proc_info(
            12,
            "worker 1",
            "dataloader",
            ppid=1,
            start_t=5.0,
            last_t=20.0,
            worker=1,
            forked=True,
            start_method="fork",
            generation=0,
            end_t=21.0,
        ),
    ]
    samples = pd.DataFrame(main + workers)
    if allocated_share is not None:
        alive = samples["pid"].isin([11, 12]) & ~samples["missing"].fillna(False).astype(bool)
        samples.loc[alive, "rss_anon_mb"] = (
            290 + allocated_share * samples.loc[alive, "minflt"] * MB_PER_FAULT
        )
    return job_meta(procs), samples


# -- a main process that allocates while its workers run ------------------------------------------


def main_job(anon: list[float] | None = None) -> tuple[dict, pd.DataFrame]:
    """Flat workers (forked at 5 s); main allocates 120 MB while they run, read every 0.5 s from
    5.2 s: its anonymous RSS at each reading is ``anon`` (by default a steady rise)."""
    meta, samples = fork_job(worker_growth=6.0)
    n = 20
    anon = anon or [301 + 120 * k / (n - 1) for k in range(n)]
    points = [(0.1, "pss", 5, 20, 5), (2.0, "pss", 150, 165, 150), (4.0, "pss", 300, 315, 300)]
    points += [(5.2 + 0.5 * k, "pss", 10 + 190 * k / (n - 1), 316, a + 1) for k, a in enumerate(anon)]
    rows = proc_rows(1, "main", -1, points, kind="main")
    for row, a in zip(rows, [5, 150, 300, *anon], strict=True):
        row["rss_anon_mb"] = a
    return meta, pd.concat([samples[samples["pid"] != 1], pd.DataFrame(rows)], ignore_index=True)


# main's anonymous RSS over its 20 readings (5.2 to 14.7 s; its workers start at 5): +120 MB in
# one step as they start (a sampler's index list), or half of it then and half at the end (neither).
STEP_AT_START = [301.0] + [421.0] * 19
HALF_AND_HALF = [301.0] + [361.0] * 15 + [376.0, 391.0, 406.0, 421.0]


# -- ranks ------------------------------------------------------------------------------------------


def rank_job(growth: tuple[float, float] = (150.0, 3.0)) -> tuple[dict, pd.DataFrame]:
    """torchrun-like: a launcher, rank 0 whose two fork workers copy 150 MB each, rank 1 whose
    workers stay flat."""
    rows = proc_rows(
        1, "main", -1, [(0.1, "pss", 8, 30, 8), (20.0, "pss", 9, 30, 9)], kind="launcher", anon_is_faults=True
    )
    procs = [proc_info(1, "main", "launcher", ppid=None, start_t=0.0, last_t=20.0)]
    for rank, grow in enumerate(growth):
        rp = 10 + rank
        rows += proc_rows(
            rp,
            f"rank {rank}",
            -1,
            [
                (1.0, "pss", 20, 40, 20),
                (4.0, "pss", 400, 420, 400),
                (5.3, "pss", 30, 420, 401),
                (20.0, "pss", 30 + grow, 421, 402),
            ],
            rank=rank,
            kind="rank",
            anon_is_faults=True,
        )
        procs.append(proc_info(rp, f"rank {rank}", "rank", ppid=1, start_t=0.5, last_t=20.0, rank=rank))
        for w in (0, 1):
            wp = 100 + 10 * rank + w
            # Between the two exact readings, the sampler's estimate (5% short of the next reading).
            est = [
                (
                    t,
                    "cheap",
                    None,
                    400 + (t - 5.3) / 2,
                    grow * (t - 5.3) / 14.7,
                    1 + 0.95 * grow * (t - 5.3) / 14.7,
                )
                for t in (8.0, 11.0, 14.0, 17.0, 19.8)
            ]
            rows += rank_worker(
                procs, wp, rp, rank, w, [(5.3, "pss", 1, 400, 1), *est, (20.0, "pss", grow, 410, grow)]
            )
    return job_meta(procs, ranks={"0": 10, "1": 11}, workers=4), pd.DataFrame(rows)


def rank_worker(
    procs: list[dict], pid: int, rank_pid: int, rank: int, w: int, points: list[tuple]
) -> list[dict]:
    """The rows of rank ``rank``'s fork DataLoader worker ``w`` (started at 5, last read at 20);
    its process info goes to ``procs``."""
    role = f"rank {rank} worker {w}"
    procs.append(
        proc_info(
            pid,
            role,
            "dataloader",
            ppid=rank_pid,
            start_t=5.0,
            last_t=20.0,
            worker=w,
            rank=rank,
            forked=True,
            start_method="fork",
            generation=0,
        )
    )
    return proc_rows(pid, role, w, points, rank=rank, kind="dataloader")


def levelled_fork_job() -> tuple[dict, pd.DataFrame]:
    """fork_job whose workers copy 120 MB of the 300 MB main held by 10 s, then nothing more to 20 s."""
    meta, samples = fork_job(worker_growth=120.0)
    early = samples["pid"].isin([11, 12]) & (samples["t"] == 10.0)
    samples.loc[early, ["uss_mb", "private_dirty_mb", "pss_mb"]] = [120.0, 120.0, 125.0]
    samples.loc[early, "minflt"] = 120.0 / MB_PER_FAULT
    return meta, samples


def lightning_job() -> tuple[dict, pd.DataFrame]:
    """Lightning's DDP as an older meta (schema version 2) saw it: the root (called "launcher") re-ran the script
    for rank 1 and trained as rank 0 with DataLoader workers of its own, then tore its data
    down (anonymous RSS 402 -> 200 MB) after its workers ended at 20 s, while rank 1 lived on."""
    meta, samples = rank_job()
    samples = samples[samples["pid"] != 1].copy()
    meta["processes"] = [p for p in meta["processes"] if p["pid"] != 1]
    meta["root_pid"] = 10
    old = {10: ("launcher", "launcher", None), 11: ("rank 1", "rank", 10)}
    for p in meta["processes"]:
        if p["pid"] in old:
            p["role"], p["kind"], p["ppid"] = old[p["pid"]]
            p["last_t"] = 25.0
        elif p["ppid"] == 10:
            p["role"], p["rank"] = f"worker {p['worker']}", -1
    samples.loc[samples["pid"] == 10, "role"] = "launcher"
    samples.loc[samples["pid"] == 10, "kind"] = "launcher"
    root_workers = samples["pid"].isin([100, 101])
    samples.loc[root_workers, "role"] = "worker " + samples.loc[root_workers, "worker"].astype(str)
    samples.loc[root_workers, "rank"] = -1
    tail = proc_rows(10, "launcher", -1, [(24.0, "pss", 20, 220, 200)], kind="launcher", anon_is_faults=True)
    tail += proc_rows(
        11, "rank 1", -1, [(24.0, "pss", 33, 421, 402)], rank=1, kind="rank", anon_is_faults=True
    )
    return meta, pd.concat([samples, pd.DataFrame(tail)], ignore_index=True)


def loaded(meta: dict, samples: pd.DataFrame, version: int) -> dict:
    """``meta`` as a loaded folder of schema ``version`` gives it to the analysis: an older
    version's process list completed from its samples (memprobe.results.upgrade)."""
    return complete_processes(meta, samples, version)


def write_results(
    root: Path,
    run_meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame | None = None,
    environment: dict | None = None,
    system: pd.DataFrame | None = None,
    version: int = SCHEMA_VERSION,
) -> Path:
    """A results folder as `memprobe record` leaves it, from these tables (summary and report not
    written); ``version``: the schema version its manifest says (an older meta's folder)."""
    run_dir = root / "runs" / run_meta["run_id"]
    writer = RunWriter(run_dir)
    writer.append("samples", json.loads(samples.to_json(orient="records")))
    if progress is not None:
        writer.append("progress", json.loads(progress.to_json(orient="records")))
    if system is not None:
        writer.append("system", json.loads(system.to_json(orient="records")))
    writer.write_meta(run_meta)
    writer.close()
    write_json_atomic(
        root / "manifest.json",
        {
            "schema_version": version,
            "scenario": f"record-{run_meta['run_id']}",
            "kind": run_meta["kind"],
            "scenario_path": None,
            "description": "memprobe record: python train.py",
            "status": "complete",
            "started": 1_795_000_000.0,
            "finished": 1_795_000_021.0,
            "runs": [run_meta["run_id"]],
            "environment": environment or {"memprobe": "0.0", "python": "3.11", "mem_total_mb": 2048.0},
        },
    )
    consolidate(root)
    return root


# -- two generations of workers, and a main process that builds between them -------------------------


def generations_job(
    built_between: float = 100.0, grows_during: float = 0.0, worker_growth: float = 200.0
) -> tuple[dict, pd.DataFrame]:
    """fork_job's main (300 MB built by t=4) forks two workers at 5 that copy ``worker_growth`` MB
    and end after 10.0; with none alive it allocates ``built_between`` MB (10.2 to 11.8), then
    forks two more at 12 that copy as much and end after 20.0. While each generation runs, main
    allocates ``grows_during`` MB of its own. Its anonymous RSS is its faults."""
    d, b, g = grows_during, built_between, worker_growth
    main = proc_rows(
        1,
        "main",
        -1,
        [
            *MAIN_BUILDS,
            (8.0, "cheap", None, 316 + d / 2, 301 + d / 2, 10 + g / 2 + d / 2),
            (10.0, "pss", 10 + g + d, 316 + d, 301 + d),
            (10.2, "cheap", None, 316 + d, 301 + d, 316 + d),  # its workers are gone: all its own again
            (11.0, "cheap", None, 316 + d + b / 2, 301 + d + b / 2, 316 + d + b / 2),
            (11.8, "cheap", None, 316 + d + b, 301 + d + b, 316 + d + b),
            (12.2, "pss", 10, 316 + d + b, 301 + d + b),
            (16.0, "cheap", None, 316 + 1.5 * d + b, 301 + 1.5 * d + b, 10 + g / 2 + d / 2),
            (20.0, "pss", 10 + g + d, 316 + 2 * d + b, 301 + 2 * d + b),
        ],
        kind="main",
        anon_is_faults=True,
    )
    rows, procs = main, [proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=20.0)]
    for gen, (start, end) in enumerate(((5.0, 10.0), (12.0, 20.0))):
        for w in (0, 1):
            pid = 11 + 10 * gen + w
            mid = (start + end) / 2
            rows += proc_rows(
                pid,
                f"worker {w}",
                w,
                [(start + 0.2, "pss", 1, 300, 1), (mid, "cheap", None, 300, g / 2), (end, "pss", g, 320, g)],
                kind="fork",
            )
            rows.append(gone_row(pid, f"worker {w}", w, end + 0.2))
            procs.append(
                proc_info(
                    pid,
                    f"worker {w}",
                    "fork",
                    ppid=1,
                    start_t=start,
                    last_t=end,
                    worker=w,
                    forked=True,
                    generation=gen,
                    end_t=end + 0.2,
                )
            )
    return job_meta(procs, milestones={}, workers=2), pd.DataFrame(rows)


# -- many epochs: a DataLoader's workers recreated every epoch ----------------------------------------


def epochs_job(
    n: int,
    workers: int = 4,
    epoch_s: float = 10.0,
    main_rise: float = 5.0,
    copy_rise: float = 3.0,
    others_mb: float = 4.0,
) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """``n`` epochs of ``epoch_s``: ``workers`` forked DataLoader workers each, forked 0.5 s into
    the epoch and gone 0.5 s before its end, each copying 100 MB plus ``copy_rise`` more every
    epoch (read exactly 1 s after its fork, mid-epoch and 1 s before it ends); main's own memory
    (its USS and anonymous RSS) 300 MB plus ``main_rise`` every epoch. The job's total PSS peaks
    at 725 + 17 e MB by default. And the system table: the cgroup's charge 150 MB above total
    PSS each second, no file cache, MemAvailable 20,000 MB; the cgroup's other processes
    ``others_mb`` of RSS (4 MB: a shell, the job alone)."""
    rows, procs = [], [proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=n * epoch_s)]
    main_points = []
    for e in range(n):
        t0 = e * epoch_s
        own = 300.0 + main_rise * e
        main_points += [
            (t0 + 0.2, "pss", own, own + 20, own),
            (t0 + 1.0, "cheap", None, own + 20, own, own),  # read at every tick, as the sampler does
            (t0 + epoch_s / 2, "pss", own, own + 20, own),
            (t0 + epoch_s - 1.5, "cheap", None, own + 20, own, own),
        ]
        g = 100.0 + copy_rise * e
        for w in range(workers):
            pid = 1000 + workers * e + w
            start, end = t0 + 0.5, t0 + epoch_s - 0.5
            points = [(start + 0.5, "pss", 1.0, 300, 1.0), (t0 + epoch_s / 2, "pss", g / 2, 300, g / 2)]
            points.append((end - 1.0, "pss", g, 300, g))
            rows += proc_rows(pid, f"worker {w}", w, points, kind="dataloader")
            rows.append(gone_row(pid, f"worker {w}", w, end))
            procs.append(
                proc_info(
                    pid,
                    f"worker {w}",
                    "dataloader",
                    ppid=1,
                    start_t=start,
                    last_t=end - 1.0,
                    worker=w,
                    forked=True,
                    start_method="fork",
                    generation=e,
                    end_t=end,
                )
            )
    rows += proc_rows(1, "main", -1, main_points, kind="main", anon_is_faults=True)
    samples = pd.DataFrame(rows)
    seconds = np.arange(0.0, n * epoch_s, 1.0)
    e = seconds // epoch_s
    within = seconds - e * epoch_s
    copied = np.where(
        (within > 0.5) & (within < epoch_s - 0.5),
        (100.0 + copy_rise * e) * np.clip((within - 1.0) / (epoch_s - 2.5), 0.0, 1.0) + 5.0,
        0.0,
    )
    system = pd.DataFrame(
        {
            "t": seconds,
            "cgroup_mb": 150.0 + 305.0 + main_rise * e + workers * copied,
            "cgroup_oom_kills": 0,
            "cgroup_file_cache_mb": 0.0,
            "mem_available_mb": 20_000.0,
        }
    )
    meta = job_meta(procs, milestones={}, workers=workers)
    meta["elapsed_s"] = n * epoch_s
    meta["cgroup"] = cgroup_meta("/job", 4096.0, 200.0, 100.0, others_mb, "bash")
    return meta, samples, system


def cgroup_meta(
    path: str, limit_mb: float, usage_mb: float, usage_at_start_mb: float, others_mb: float, other: str
) -> dict:
    """A recorded job's meta ``cgroup`` (cgroup v2, no OOM kill, entered at the start) whose one
    other process, ``other`` (pid 77), held ``others_mb`` of RSS at its largest reading."""
    return {
        "version": 2,
        "path": path,
        "limit_mb": limit_mb,
        "usage_mb": usage_mb,
        "usage_at_start_mb": usage_at_start_mb,
        "oom_kills": 0,
        "oom_kills_at_start": 0,
        "since_t": 0.0,
        "others": {
            "processes": 1,
            "rss_mb": others_mb,
            "largest": [{"name": other, "pid": 77, "rss_mb": others_mb}],
        },
    }
