"""Recorded jobs (record / watch): each process's own growth over the window that fits it, the
verdict and the culprit in words, the estimate's error and the projection; on hand-made tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from treejobs import (
    MB_PER_FAULT,
    fork_job,
    generations_job,
    gone_row,
    job_meta,
    levelled_fork_job,
    lightning_job,
    loaded,
    proc_info,
    proc_rows,
    rank_job,
)

from memprobe.analysis.growth import Growth, interval_own, split_growth
from memprobe.analysis.process import as_analysed
from memprobe.analysis.processes import processes
from memprobe.analysis.projection import Basis, Rounds, projection, projection_basis
from memprobe.analysis.runs import summarize
from memprobe.analysis.table import estimate_error, table
from memprobe.core import series
from memprobe.core.series import carried_pss
from memprobe.core.tree_rules import with_loader_generations
from memprobe.results.folder import SCHEMA_VERSION


def _summary(meta: dict, samples: pd.DataFrame, progress: pd.DataFrame | None = None):
    return summarize(meta, samples, progress if progress is not None else pd.DataFrame(), pd.DataFrame())


def _uss_projection(meta: dict, samples: pd.DataFrame) -> list[dict]:
    """The projection from USS figures alone (what each parent held before its fork, its own
    growth, each worker's): a job without a total PSS gets it, and the page's words and the
    "full copy" figures rest on its parts. (These made-up tables' PSS is USS + 5 MB, with no
    shared page in it: their total PSS is not what the parts add up to.)"""
    procs = processes(meta)
    return projection(projection_basis(table(meta, samples, pd.DataFrame(), procs), procs))


def test_forked_workers_grow_from_zero_at_their_start_and_the_main_process_is_not_blamed() -> None:
    meta, samples = fork_job()
    s = _summary(meta, samples)
    rows = {p["pid"]: p for p in s.processes}
    assert rows[11]["uss_start_mb"] == 0 and rows[11]["baseline_t"] == 5.0
    assert rows[11]["growth_mb"] == pytest.approx(200, abs=0.5) and rows[11]["judged"]
    assert rows[11]["growth_mb_per_min"] == pytest.approx(200 / 15 * 60, rel=0.01)
    main = rows[1]
    # From its first tick once its workers started (read there): what it built is before.
    assert main["built_mb"] == pytest.approx(295) and main["baseline_t"] == 5.2
    assert abs(main["growth_mb"]) < 5  # the fork's sharing and the workers' copies are not its own
    assert main["released_mb"] == pytest.approx(198, abs=1)  # 2 MB of faults are its own
    assert s.verdict == "growing" and s.worker_uss_growth_mb == pytest.approx(200, abs=0.5)
    assert s.main_uss_growth_mb == pytest.approx(main["growth_mb"])
    assert s.culprit.startswith(
        "growing: The main process's 2 DataLoader workers (fork) each grew about 200 MB in 15 s"
    )
    assert "copy-on-access of what the main process built (+295 MB before its workers started)" in s.culprit
    assert (
        "The main process is not growing" in s.culprit and "+198 MB of its pages became private" in s.culprit
    )
    assert s.explanation.startswith(s.culprit)


def test_a_program_the_main_process_ran_before_it_built_its_dataset_opens_no_window() -> None:
    """A Lightning fit logged to Weights & Biases: WandbLogger starts wandb-core (an exec'd
    program, alive the whole fit) before the fit builds its dataset. Its start is not the main
    process's first worker: the 295 MB built after it are not the main process's growth, and the
    workers' mean growth is the DataLoader workers', not halved by the program's flat 30 MB. An
    older folder listed it as "worker 2" (kind exec) of the workers' generation: read as today's
    tree names it, a program (memprobe.results.upgrade.with_programs)."""
    meta, samples = fork_job()
    program = proc_rows(
        20,
        "worker 2",
        2,
        [(0.6, "pss", 30, 40, 30), (10.0, "pss", 30, 40, 30), (20.0, "pss", 30, 40, 30)],
        kind="exec",
    )
    meta["processes"].append(
        proc_info(20, "worker 2", "exec", ppid=1, start_t=0.5, last_t=20.0, worker=2, generation=0)
    )
    samples = pd.concat([samples, pd.DataFrame(program)], ignore_index=True)
    meta = loaded(meta, samples, SCHEMA_VERSION)
    listed = {p["pid"]: p for p in meta["processes"]}
    assert [listed[20][k] for k in ("role", "kind", "worker", "generation")] == [
        "program 0",
        "program",
        -1,
        None,
    ]
    rows = as_analysed(samples, processes(meta))  # its rows said "worker 2", kind exec: read as listed
    assert set(map(tuple, rows[rows["pid"] == 20][["role", "kind"]].values)) == {("program 0", "program")}
    s = _summary(meta, samples)
    main = next(p for p in s.processes if p["pid"] == 1)
    assert main["built_mb"] == pytest.approx(295) and abs(main["growth_mb"]) < 5
    assert s.worker_uss_growth_mb == pytest.approx(200, abs=0.5) and s.worker_uss_start_mb == pytest.approx(
        0, abs=1
    )
    assert "The main process is not growing" in s.culprit


def test_a_numpy_like_job_is_flat_and_says_what_each_side_did() -> None:
    meta, samples = fork_job(worker_growth=6.0)
    s = _summary(meta, samples)
    assert s.verdict == "flat"
    assert s.culprit.startswith(
        "flat: no process grew more than 50 MB of its own: 2 workers grew at most +6.0 MB"
    )
    assert "built +295 MB before" in s.culprit


def test_growth_per_1000_items_uses_the_items_each_worker_served() -> None:
    meta, samples = fork_job()
    meta["items"] = 30_000
    progress = pd.DataFrame({"t": [5.0, 10.0, 20.0], "items": [0, 10_000, 30_000]})
    s = _summary(meta, samples, progress)
    worker = next(p for p in s.processes if p["pid"] == 11)
    assert worker["growth_per_1k_items_mb"] == pytest.approx(200 / 15, rel=0.01)  # 15,000 items each
    assert s.growth_per_1k_items_per_worker_mb == pytest.approx(200 / 15, rel=0.01)
    assert "each grew about 200 MB in 15 s (800 MB/min, 13.33 MB per 1,000 items)" in s.culprit


def test_summary_json_holds_the_table_the_culprit_and_the_projection() -> None:
    meta, samples = fork_job()
    d = _summary(meta, samples).to_dict()
    text = json.dumps(d, allow_nan=False)
    assert '"processes"' in text and '"culprit"' in text
    assert {
        "pid",
        "role",
        "kind",
        "rank",
        "worker",
        "generation",
        "first_t",
        "last_t",
        "pss_samples",
        "uss_start_mb",
        "uss_end_mb",
        "growth_mb",
        "built_mb",
        "startup_mb",
        "released_mb",
        "growth_mb_per_min",
        "growth_per_1k_items_mb",
        "judged",
    } <= set(d["processes"][0])
    assert d["processes"][1]["growth_mb"] == round(d["processes"][1]["growth_mb"], 3)


# -- the interval rule ----------------------------------------------------------------------------


def test_a_rise_counts_as_far_as_faults_explain_it_and_a_fall_as_far_as_rss_fell() -> None:
    assert interval_own(100.0, 0.0, 100.0) == 100.0  # copied: a fault per page
    assert interval_own(100.0, 0.0, 2.0) == 2.0  # a sharer exited: its pages are ours alone now
    assert interval_own(-290.0, 1.0, 1.0) == 0.0  # forked: pages became shared, nothing freed
    assert interval_own(-50.0, -40.0, 0.0) == -40.0  # freed 40 MB, 10 MB became shared
    assert interval_own(30.0, 5.0, None) == 30.0  # no fault counter: the change as it is


def test_split_growth_from_a_forked_childs_origin() -> None:
    readings = pd.DataFrame(
        [
            {"t": 1.0, "uss_mb": 4.0, "rss_mb": 100.0, "minflt": 4 / MB_PER_FAULT},
            {"t": 2.0, "uss_mb": 30.0, "rss_mb": 100.0, "minflt": 10 / MB_PER_FAULT},
        ]
    )
    split = split_growth(readings, {"t": 0.5, "uss_mb": 0.0, "minflt": 0.0, "rss_mb": None})
    assert split.own_mb == pytest.approx(10.0) and split.released_mb == pytest.approx(20.0)


# -- ranks ---------------------------------------------------------------------------------------------


def test_a_rank_s_workers_are_named_and_the_other_rank_is_not() -> None:
    meta, samples = rank_job()
    s = _summary(meta, samples)
    assert s.verdict == "growing"
    assert s.culprit.startswith(
        "growing: Rank 0's 2 DataLoader workers (fork) each grew about 150 MB in 15 s"
    )
    assert "what rank 0 built (+380 MB before its workers started)" in s.culprit
    assert "rank 1's" not in s.culprit.lower()
    order = [p["role"] for p in s.processes]
    assert order == [
        "main",
        "rank 0",
        "rank 0 worker 0",
        "rank 0 worker 1",
        "rank 1",
        "rank 1 worker 0",
        "rank 1 worker 1",
    ]


def test_every_rank_s_growing_workers_make_one_sentence() -> None:
    meta, samples = rank_job(growth=(150.0, 120.0))
    s = _summary(meta, samples)
    assert s.culprit.startswith(
        "growing: The 4 DataLoader workers (fork) of rank 0 and rank 1 (2 each) each grew about 135 MB in 15 s"
    )
    assert "copy-on-access of what each rank built (+380 MB before its workers started)" in s.culprit


def test_projection_per_worker_count_and_rank_count_with_the_measured_cell_flagged() -> None:
    meta, samples = rank_job()
    proj = _summary(meta, samples).projection
    assert {(r["ranks"], r["workers_per_rank"]) for r in proj} == {
        (r, w) for r in (1, 2, 4, 8) for w in (2, 4, 8, 16)
    }
    measured = [r for r in proj if r["as_measured"]]
    assert [(r["ranks"], r["workers_per_rank"]) for r in measured] == [(2, 2)]
    assert measured[0]["measured_mb"] == _summary(meta, samples).total_pss_peak_mb
    assert all(r["full_copy_mb"] >= r["measured_mb"] for r in proj)
    by = {(r["ranks"], r["workers_per_rank"]): r for r in _uss_projection(meta, samples)}
    # Each rank: its own memory once, plus per worker the mean growth of the workers of both ranks.
    per_worker = (150 + 3) / 2
    assert by[(1, 4)]["measured_mb"] - by[(1, 2)]["measured_mb"] == pytest.approx(2 * per_worker, rel=0.01)
    assert by[(4, 4)]["measured_mb"] - by[(2, 4)]["measured_mb"] == pytest.approx(
        2 * (by[(2, 4)]["measured_mb"] - by[(1, 4)]["measured_mb"])
    )


def _basis(**kw) -> Basis:
    fields: dict = {
        "ranks": 1,
        "has_ranks": False,
        "workers": 2,
        "workers_measured": 2,
        "duration_s": 10.0,
        "parent_mb": 300.0,
        "full_copy_mb": 300.0,
        "worker_start_mb": 0.0,
        "worker_growth_mb": 200.0,
        "others_mb": 0.0,
        "forked": True,
        "full_copy_worker_mb": 300.0,
    }
    return Basis(**(fields | kw))


def _rounds(total: list[float], workers_uss: list[float], once: list[float] | None = None) -> Rounds:
    n = len(total)
    alive = [2 if u else 0 for u in workers_uss]
    return Rounds(
        *(np.asarray(x, float) for x in (range(n), total, once or [0.0] * n, workers_uss)), np.array(alive)
    )


def test_the_projection_scales_the_recording_so_the_configuration_that_ran_is_its_peak() -> None:
    """Issue 40: "4 workers (measured) 2,069 MB" stood beside a peak total PSS of 2,266 MB. Each
    round's workers' USS is counted N/2 times for N workers, and the highest over the recording is
    the figure: 2 workers (as run) is the peak itself; a peak with no worker alive holds at fewer."""
    # 900 MB at the round where the 2 workers held 400 MB of their own; 1,000 MB before any worker.
    proj = {r["workers_per_rank"]: r for r in projection(_basis(), _rounds([500, 900, 700], [0, 400, 200]))}
    assert proj[2]["measured_mb"] == 900 and proj[2]["as_measured"]
    assert proj[4]["measured_mb"] == 900 + 400 and proj[16]["measured_mb"] == 900 + 7 * 400
    # A full copy: each worker plus what it had left to copy (300 - 200 MB).
    assert proj[4]["full_copy_mb"] == 1300 + 4 * 100
    early = {r["workers_per_rank"]: r for r in projection(_basis(workers=4), _rounds([1000, 900], [0, 400]))}
    assert early[4]["measured_mb"] == 1000 and early[2]["measured_mb"] == 1000  # not 900 - 200
    assert early[8]["measured_mb"] == 900 + 400
    # Ranks: the processes counted once (a launcher, 10 MB) once; the rest per rank.
    ranks = projection(_basis(ranks=2, has_ranks=True), _rounds([810, 1210], [0, 400], once=[10, 10]))
    by = {(r["ranks"], r["workers_per_rank"]): r["measured_mb"] for r in ranks}
    assert by[(2, 2)] == 1210 and by[(4, 2)] == 10 + 2 * 1200 and by[(1, 4)] == 10 + (1200 + 400) / 2


def test_a_recorded_job_s_projection_states_its_peak_total_pss_as_the_configuration_that_ran() -> None:
    meta, samples = fork_job()
    s = _summary(meta, samples)
    ran = next(r for r in s.projection if r["as_measured"])
    assert ran["measured_mb"] == s.total_pss_peak_mb == pytest.approx(625)
    # Its parts: the 2 workers' own 400 MB at 20 s, and the rest once.
    assert s.projection_peak == {
        "t": 20.0,
        "total_mb": s.total_pss_peak_mb,
        "workers_uss_mb": pytest.approx(400),
        "workers": 2,
        "once_mb": 0.0,
    }
    assert next(r for r in s.projection if r["workers_per_rank"] == 4)["measured_mb"] == pytest.approx(
        625 + 400
    )
    meta, samples = rank_job()
    s = _summary(meta, samples)
    assert next(r for r in s.projection if r["as_measured"])["measured_mb"] == s.total_pss_peak_mb


def test_the_projection_counts_what_the_parent_held_before_its_fork_once() -> None:
    # main held 300 MB when it forked (its USS then fell to 10 MB: every page shared); each of
    # the 2 workers copied 200 MB of it. The job as run: 300 MB once plus 2 x 200 MB copied; with
    # full copies: 300 MB plus 2 x 300 MB. A projection from the parent's USS after its fork
    # would leave the 300 MB every process shares out of every cell.
    meta, samples = fork_job()
    ran = next(r for r in _uss_projection(meta, samples) if r["as_measured"])
    assert ran["workers_per_rank"] == 2
    assert ran["measured_mb"] == pytest.approx(300 + 2 * 200, rel=0.03)
    assert ran["full_copy_mb"] == pytest.approx(300 + 2 * 300, rel=0.03)
    # Scaling the recording, a full copy adds what each worker had left to copy of those 300 MB.
    ran = next(r for r in _summary(meta, samples).projection if r["as_measured"])
    assert ran["full_copy_mb"] - ran["measured_mb"] == pytest.approx(2 * (300 - 200), rel=0.03)


# -- a spawn child, and a parent whose pages become private ------------------------------------------


def _spawn_job(child_points: list[tuple], last_t: float) -> tuple[dict, list[dict], list[dict]]:
    """main, and a spawned worker 0 whose RSS rises 60 MB a second from its start at 1.0 to 150 MB
    (its start-up: unpickling its copy) and then follows ``child_points``; (meta, main, child)."""
    main = proc_rows(1, "main", -1, [(0.1, "pss", 50, 60, 50), (12.0, "pss", 51, 61, 51)], kind="main")
    cheap = [
        (t, "cheap", None, min(150.0, 30 + 60 * (t - 1.0)), 0)
        for t in (1.2, 1.6, 2.0, 2.4, 2.8, 3.2, 3.4, 3.6)
    ]
    child = proc_rows(2, "worker 0", 0, [(1.1, "pss", 20, 30, 20), *cheap, *child_points], kind="spawn")
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=12.0),
        proc_info(2, "worker 0", "spawn", ppid=1, start_t=1.0, last_t=last_t, worker=0, start_method="spawn"),
    ]
    return job_meta(procs, workers=1, mode="spawn"), main, child


def test_a_spawn_child_counts_from_the_end_of_its_start_up() -> None:
    # Its RSS holds still from 3.2 on while it runs (1 CPU second a second here): settled at 3.8.
    meta, main, child = _spawn_job([(3.8, "pss", 150, 150, 150), (12.0, "pss", 156, 156, 156)], 12.0)
    s = _summary(meta, pd.DataFrame(main + child))
    row = next(p for p in s.processes if p["pid"] == 2)
    assert row["startup_mb"] == 150 and row["baseline_t"] == 3.8 and row["growth_mb"] == pytest.approx(6)
    assert s.verdict == "flat" and s.worker_uss_start_mb == 150
    assert s.culprit.endswith(
        "But each spawned worker started with ~150 MB of its own (its start-up copy: paid up "
        "front, not counted as growth)."
    )


def test_a_spawn_child_read_while_it_frees_its_copy_at_exit_keeps_what_it_grew_to() -> None:
    """A spawned worker exits through the interpreter's teardown, which frees its copy of the
    dataset: read then (its RSS fell 60 MB in its last second), it had "start-up 97 MB" of its
    150 and a growth of -50 MB."""
    steady = [(t, "cheap", None, 150.0, 0, 150.0) for t in (4.5, 6.0, 8.0, 10.0, 11.0)]
    end = [(11.5, "cheap", None, 120.0, 0, 120.0), (11.8, "pss", 97, 100, 97)]  # tearing down
    meta, main, child = _spawn_job([(3.8, "pss", 150, 150, 150), *steady, *end], 11.8)
    s = _summary(meta, pd.DataFrame(main + child))
    row = next(p for p in s.processes if p["pid"] == 2)
    assert row["startup_mb"] == 150 and row["growth_mb"] == pytest.approx(0.0, abs=1.0)
    # Freed earlier and held to its end, it is what it is: a fall 3 s or more before its end.
    early = [r if r["t"] < 5.0 else {**r, "rss_mb": 100.0} for r in child if r["t"] < 11.5]
    early.append({**child[-1], "t": 11.8})
    s = _summary(meta, pd.DataFrame(main + early))
    row = next(p for p in s.processes if p["pid"] == 2)
    assert row["growth_mb"] < -40  # what it freed long before its end counts (its RSS fell 50 MB)


def test_a_spawn_child_whose_rss_never_holds_still_is_judged_from_half_its_life() -> None:
    # Its RSS creeps up 20 MB a second all its life (an allocator that never settles, a loaded
    # machine): its start-up is taken to end half-way through its 10 s life, so it is judged.
    main = proc_rows(1, "main", -1, [(0.1, "pss", 50, 60, 50), (11.0, "pss", 51, 61, 51)], kind="main")
    ticks = [1.0 + 0.2 * k for k in range(1, 50)]
    points = [
        (t, "pss" if k % 10 == 9 else "cheap", 100 + 20 * t, 100 + 20 * t, 100 + 20 * t)
        for k, t in enumerate(ticks)
    ]
    child = proc_rows(2, "worker 0", 0, points, kind="spawn")
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=11.0),
        proc_info(2, "worker 0", "spawn", ppid=1, start_t=1.0, last_t=10.8, worker=0, start_method="spawn"),
    ]
    s = _summary(job_meta(procs, workers=1, mode="spawn"), pd.DataFrame(main + child))
    row = next(p for p in s.processes if p["pid"] == 2)
    assert row["judged"] and row["baseline_t"] == pytest.approx(7.0)  # the first reading after 5.9 s
    assert row["growth_mb"] == pytest.approx(20 * (row["last_t"] - row["baseline_t"]), abs=0.5)


def test_a_renamed_spawn_dataloader_worker_counts_from_its_rename() -> None:
    rows = proc_rows(
        2, "spawn (starting)", -1, [(1.0, "pss", 20, 30, 20), (2.0, "pss", 140, 150, 140)], kind="spawn"
    )
    rows += proc_rows(
        2, "worker 0", 0, [(2.5, "pss", 150, 160, 150), (9.0, "pss", 152, 162, 152)], kind="dataloader"
    )
    rows += proc_rows(1, "main", -1, [(0.1, "pss", 50, 60, 50), (9.0, "pss", 50, 60, 50)], kind="main")
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=9.0),
        proc_info(
            2, "worker 0", "dataloader", ppid=1, start_t=0.9, last_t=9.0, worker=0, start_method="spawn"
        ),
    ]
    row = next(
        g
        for g in table(job_meta(procs, mode="spawn", workers=1), pd.DataFrame(rows), pd.DataFrame())
        if g.pid == 2
    )
    assert row.baseline_t == 2.5 and row.startup_mb == 150 and row.growth_mb == pytest.approx(2)


def test_pages_made_private_by_a_copying_or_exiting_child_are_released_not_growth() -> None:
    # main forks at 1.5 (USS 200 -> 20), the child copies 100 MB by 4.0 (main's USS rises with
    # one fault of its own), the child exits at 5.5 and main's pages are all its own again by 9.0.
    main = proc_rows(
        1,
        "main",
        -1,
        [
            (0.1, "pss", 200, 220, 200),
            (2.0, "pss", 20, 220, 200),
            (4.0, "pss", 120, 220, 201),
            (9.0, "pss", 205, 221, 202),
        ],
        kind="main",
    )
    child = proc_rows(2, "worker 0", 0, [(2.0, "pss", 1, 210, 1), (5.0, "pss", 100, 210, 100)], kind="fork")
    child.append(gone_row(2, "worker 0", 0, 5.5))
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=9.0),
        proc_info(2, "worker 0", "fork", ppid=1, start_t=1.5, last_t=5.0, worker=0, forked=True, end_t=5.5),
    ]
    s = _summary(job_meta(procs, workers=1), pd.DataFrame(main + child))
    main_row = s.processes[0]
    assert main_row["growth_mb"] == pytest.approx(1, abs=0.1) and main_row["released_mb"] == pytest.approx(
        99, abs=1
    )
    # Its window ends with its last worker: what it does after (pages private again, tear-down) is not judged.
    assert main_row["uss_end_mb"] == 120 and main_row["baseline_t"] == 2.0  # after the fork's sharing
    assert s.verdict == "growing" and s.main_uss_growth_mb < 50
    assert s.culprit.startswith("growing: The main process's forked child grew +100 MB in 4 s")
    assert (
        "The main process is not growing (+1.0 MB of its own): +99 MB of its pages became private"
        in s.culprit
    )


# -- totals, estimates, older results ------------------------------------------------------------------


def test_total_pss_carries_each_process_s_last_reading_while_it_is_alive() -> None:
    rows = proc_rows(
        1, "main", -1, [(1.0, "pss", 100, 110, 0), (2.0, "cheap", None, 110, 0), (3.0, "cheap", None, 110, 0)]
    )
    rows += proc_rows(2, "worker 0", 0, [(1.0, "pss", 1, 100, 0), (2.0, "pss", 50, 100, 0)])
    rows.append(gone_row(2, "worker 0", 0, 3.0))
    rows += proc_rows(2, "worker 0", 0, [])  # nothing more
    rows += proc_rows(1, "main", -1, [(3.5, "pss", 120, 110, 0)])
    pss = carried_pss(pd.DataFrame(rows))
    # Totals at the exact readings, and at a cheap tick a second after the last of them (3.0).
    assert list(pss.index) == [1.0, 2.0, 3.0, 3.5]
    assert pss.loc[2.0, 1] == 105 and pss.loc[2.0, 2] == 55  # main not read at 2.0: its last reading
    assert pss.loc[3.0, 1] == 105 and pd.isna(pss.loc[3.0, 2])  # read by no one at 3.0; worker 0 gone
    assert pd.isna(pss.loc[3.5, 2])  # gone


def test_a_worker_carried_at_its_last_reading_adds_what_its_estimate_gained_since() -> None:
    """Each page a worker copied or allocated since its reading is a new page: its estimate
    counts them. A parent's USS also rises by pages its workers' copies leave it alone with: no
    new page, so it is carried as it was read."""
    rows = proc_rows(1, "main", -1, [(1.0, "pss", 100, 300, 0), (2.0, "cheap", None, 300, 0, 160)])
    rows += proc_rows(2, "worker 0", 0, [(1.0, "pss", 10, 300, 10), (2.0, "cheap", None, 300, 70, 70)])
    rows += proc_rows(3, "worker 1", 1, [(1.0, "pss", 10, 300, 10), (2.0, "pss", 75, 300, 75)])
    pss = carried_pss(pd.DataFrame(rows))
    assert pss.loc[2.0, 2] == 15 + 60  # its reading's PSS, and 60 MB of copies since
    assert pss.loc[2.0, 1] == 105  # main: as read
    assert pss.loc[2.0, 3] == 80  # read then: its reading
    # Its USS likewise (what the projection scales: the workers' own memory at each round).
    held = series.held_readings(pd.DataFrame(rows))
    uss = series.by_pid(held, "uss_mb", pd.Index([1.0, 2.0]))
    assert uss.loc[2.0, 2] == 10 + 60 and uss.loc[2.0, 3] == 75 and uss.loc[2.0, 1] == 100


def test_a_recorded_job_s_total_at_a_tick_with_an_unreadable_process_is_a_gap_not_a_smaller_sum() -> None:
    meta, samples = fork_job()
    # Worker 1's PSS read fails at the last round (t=20): its row stays cheap, with the reason.
    failed = (samples["pid"] == 12) & (samples["t"] == 20.0)
    samples.loc[failed, ["tier", "reason"]] = ["cheap", "smaps_rollup unreadable (process exiting?)"]
    for col in ("pss_mb", "uss_mb", "private_dirty_mb", "anon_huge_mb"):
        samples.loc[failed, col] = None
    s = _summary(meta, samples)
    chart = series.total_pss(samples)  # what the record page's memory chart draws
    assert pd.isna(chart.loc[20.0])
    # Without worker 1, t=20 would sum to 420 MB (main 215 + worker 0 205): a total no chart shows.
    assert s.total_pss_peak_mb == pytest.approx(chart.max()) == pytest.approx(325)  # at t=10
    assert s.total_pss_end_mb == pytest.approx(325)  # the last known total


def test_the_estimate_is_checked_against_the_next_exact_reading() -> None:
    rows = proc_rows(
        1,
        "main",
        -1,
        [
            (1.0, "pss", 100, 110, 0),
            (1.2, "cheap", None, 110, 0, 104.0),
            (1.4, "cheap", None, 110, 0, 108.0),
            (1.6, "pss", 120, 130, 0),
            (1.8, "cheap", None, 130, 0, 121.0),
            (2.0, "pss", 120, 130, 0),
            (2.2, "cheap", None, 130, 0, 2.0),
            (2.4, "pss", 5, 130, 0),
        ],
    )
    err = estimate_error(pd.DataFrame(rows))
    assert err["n"] == 2  # the reading of 5 MB is below the 10 MB floor
    assert err["max_pct"] == pytest.approx(10.0) and err["median_pct"] == pytest.approx((10 + 100 / 120) / 2)
    assert estimate_error(pd.DataFrame(proc_rows(1, "main", -1, [(1.0, "pss", 1, 1, 0)]))) is None


def test_an_older_record_without_kinds_or_start_times_still_summarizes() -> None:
    meta, samples = fork_job()
    for p in meta["processes"]:
        for key in ("kind", "ppid", "forked", "start_method", "start_t", "generation", "end_t"):
            p.pop(key)
    samples = samples.drop(columns=["kind", "uss_est_mb", "anon_huge_mb"])
    meta["processes"][1]["first_t"] = meta["processes"][2]["first_t"] = 5.2
    meta = loaded(meta, samples, version=1)
    procs = {p.pid: p for p in processes(meta)}
    assert (
        procs[11].kind == "dataloader"
        and procs[11].forked
        and procs[11].ppid == 1
        and procs[11].generation == 0
    )
    s = _summary(meta, samples)
    assert s.verdict == "growing" and s.worker_uss_growth_mb == pytest.approx(200, abs=0.5)
    assert s.estimate_error is None


def test_a_job_without_workers_is_judged_from_its_first_mark() -> None:
    rows = proc_rows(
        1,
        "main",
        -1,
        [(0.1, "pss", 5, 10, 5), (3.0, "pss", 300, 310, 300), (9.0, "pss", 310, 320, 310)],
        kind="main",
    )
    meta = job_meta(
        [proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=9.0)],
        workers=0,
        mode="record",
        milestones={"first_mark": 3.5, "done": 9.0},
    )
    s = _summary(meta, pd.DataFrame(rows))
    assert s.main_uss_growth_mb == pytest.approx(10) and s.processes[0]["built_mb"] == pytest.approx(295)
    assert s.verdict == "flat" and s.projection == []


def test_a_job_with_thread_workers_is_judged_from_the_first_one_seen() -> None:
    """DataLoader thread workers (torch's ``pt_thread_data_worker``, memprobe's ThreadDataLoader)
    are threads of the main process: what it built before them is built, not growth, and its
    window closes with the last one seen (a job building a 69 MB list for two thread workers to
    read was said to grow +69 MB, at 5,187 MB/min)."""
    rows = proc_rows(
        1,
        "main",
        -1,
        [
            (0.1, "pss", 5, 10, 5),
            (1.0, "pss", 280, 290, 280),  # still building when its first thread worker starts (1.2)
            (1.4, "pss", 300, 310, 300),  # its first tick with them: what it built up to here is built
            (3.0, "pss", 304, 314, 304),
            (9.0, "pss", 150, 160, 150),
        ],
        kind="main",
    )
    info = proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=9.0)
    meta = job_meta([info | {"threads_first_t": 1.2, "threads_last_t": 3.0}], workers=0, mode="record")
    s = _summary(meta, pd.DataFrame(rows))
    main = s.processes[0]
    assert main["built_mb"] == pytest.approx(295) and main["growth_mb"] == pytest.approx(4)
    assert main["last_t"] == 3.0  # its teardown after its thread workers ended is not growth
    assert s.verdict == "flat"
    assert "+4.0 MB after its first thread worker started (built +295 MB before them)" in s.culprit


def test_a_forked_worker_never_read_exactly_is_judged_on_its_estimate_and_says_so() -> None:
    meta, samples = fork_job()
    est = samples["pid"].eq(12) & samples["tier"].eq("cheap")
    samples.loc[est, "uss_est_mb"] = 190.0
    samples = samples[~(samples["pid"].eq(12) & samples["tier"].eq("pss"))]  # worker 1: never read exactly
    s = _summary(meta, samples)
    row = next(p for p in s.processes if p["pid"] == 12)
    assert row["estimated"] and row["judged"] and row["growth_mb"] == 190 and row["pss_samples"] == 0
    assert "; 1 of them estimated from page faults: the exact readings missed their growth)" in s.culprit


def test_a_worker_with_nothing_to_judge_is_named() -> None:
    meta, samples = fork_job(worker_growth=6.0)
    samples = samples[~(samples["pid"].eq(12) & samples["tier"].eq("pss"))]
    s = _summary(meta, samples)
    assert s.verdict == "flat" and s.culprit.endswith("1 worker had no exact reading to judge (worker 1).")


def test_a_renamed_spawn_worker_without_a_reading_after_its_rename_is_judged_on_its_estimate() -> None:
    rows = proc_rows(2, "worker 0", 0, [(1.0, "pss", 20, 30, 20), (2.0, "pss", 140, 150, 140)], kind="spawn")
    rows += proc_rows(
        2,
        "worker 0",
        0,
        [(2.5, "cheap", None, 160, 150, 150.0), (9.0, "cheap", None, 162, 152, 153.0)],
        kind="dataloader",
    )
    rows += proc_rows(1, "main", -1, [(0.1, "pss", 50, 60, 50), (9.0, "pss", 50, 60, 50)], kind="main")
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=9.0),
        proc_info(
            2, "worker 0", "dataloader", ppid=1, start_t=0.9, last_t=9.0, worker=0, start_method="spawn"
        ),
    ]
    row = next(
        g
        for g in table(job_meta(procs, mode="spawn", workers=1), pd.DataFrame(rows), pd.DataFrame())
        if g.pid == 2
    )
    assert (
        row.estimated
        and row.baseline_t == 2.5
        and row.startup_mb == 150
        # Its estimate rose 3 MB, its RSS 2 MB: a spawned worker's own growth is new memory.
        and row.growth_mb == pytest.approx(2)
    )


def test_a_parent_read_only_before_it_built_starts_from_its_anonymous_memory_at_the_fork() -> None:
    # main is read at 0.1 (5 MB) and next at 6.0, after it built 300 MB and forked at 5.0: its
    # state just before the fork (the reading plus its anonymous RSS's rise) is its start, so its
    # building is not growth.
    s = _fork_job_whose_main_is(
        [(4.8, "cheap", None, 315, 300, 300.0), (6.0, "pss", 12, 316, 301), (20.0, "pss", 30, 317, 303)]
    )
    row = s.processes[0]
    assert row["baseline_t"] == 6.0 and row["uss_start_mb"] == 12 and row["built_mb"] == pytest.approx(295)
    assert row["growth_mb"] == pytest.approx(2, abs=0.5) and s.main_uss_growth_mb < 50
    assert "The main process grew" not in s.culprit


def test_what_a_parent_built_between_its_last_tick_before_its_fork_and_its_first_after_is_built() -> None:
    """On a wide tree ticks are up to 2 s apart: main, read at 0.1 (5 MB) and seen at 2.0 with
    150 MB, filled 150 MB more before its fork at 5.0, and its first tick after (6.0) showed them
    (a fork leaves its RSS as it was). It was said to have built +145 MB of its 295."""
    row = _fork_job_whose_main_is([(6.0, "pss", 12, 316, 300), (20.0, "pss", 30, 317, 302)]).processes[0]
    assert row["built_mb"] == pytest.approx(295) and row["baseline_t"] == 6.0


def test_a_parent_reading_taken_after_its_fork_in_a_tick_dated_before_it_is_left_out() -> None:
    """Under load a tick dated 0.7 s before the fork at 5.0 read main at 5.1, after it (``read_t``):
    its pages shared already, 10 MB of its own instead of 300. On 3.13t at load 10 the 250 MB a
    main process built were said to be +4.5 MB."""
    later = [(4.3, "pss", 10, 315, 300), (6.0, "pss", 12, 316, 301), (20.0, "pss", 30, 317, 303)]
    row = _fork_job_whose_main_is(later, taken={4.3: 5.1}).processes[0]
    assert row["built_mb"] == pytest.approx(295) and row["baseline_t"] == 6.0
    assert row["growth_mb"] == pytest.approx(2, abs=0.5)
    # Taken at 4.31, before the fork: what it shows is its own (the same figures, known now).
    row = _fork_job_whose_main_is([(4.3, "pss", 300, 315, 300), *later[1:]], taken={4.3: 4.31}).processes[0]
    assert row["built_mb"] == pytest.approx(295)


def _fork_job_whose_main_is(later: list[tuple], taken: dict[float, float] | None = None):
    """fork_job's summary with its main read at 0.1 (5 MB), seen at 2.0 with 150 MB (anonymous
    RSS: its faults), then at the ticks ``later``; ``taken``: when each exact reading was taken
    (``read_t``: 10 ms into its tick where not given), else a folder that does not say."""
    points = [(0.1, "pss", 5, 20, 5), (2.0, "cheap", None, 165, 150, 150.0), *later]
    main = proc_rows(1, "main", -1, points, kind="main", anon_is_faults=True)
    for row in main if taken is not None else []:
        row["read_t"] = taken.get(row["t"], row["t"] + 0.01) if row["tier"] == "pss" else None
    meta, samples = fork_job()
    samples = pd.concat([samples[samples["pid"] != 1], pd.DataFrame(main)], ignore_index=True)
    return _summary(meta, samples)


def test_an_older_record_s_other_children_with_their_parent_s_command_are_forked_children() -> None:
    meta, samples = fork_job()
    for p in meta["processes"]:
        for k in ("kind", "ppid", "forked", "start_method", "start_t", "generation", "end_t"):
            p.pop(k)
        p.update(role="other" if p["pid"] != 1 else "main", worker=-1, command="python train.py")
    meta["start_methods"] = {}
    samples = samples.drop(columns=["kind", "uss_est_mb", "anon_huge_mb"]).assign(
        role=lambda d: d["role"].where(d["pid"] == 1, "other"), worker=-1
    )
    meta = loaded(meta, samples, version=1)
    procs = {p.pid: p for p in processes(meta)}
    assert procs[11].kind == "fork" and procs[11].forked and procs[11].ppid == 1
    s = _summary(meta, samples)
    assert s.verdict == "growing" and s.culprit.startswith("growing: The main process's 2 forked children")


def test_a_launcher_counts_from_its_first_rank_not_from_its_own_start_up() -> None:
    meta, samples = rank_job()
    launcher = proc_rows(
        1,
        "main",
        -1,
        [
            (0.1, "pss", 8, 30, 8),
            (0.4, "pss", 150, 170, 150),
            (0.6, "cheap", None, 170, 150, 150.0),
            (20.0, "pss", 151, 171, 151),
        ],
        kind="launcher",
    )
    samples = pd.concat([samples[samples["pid"] != 1], pd.DataFrame(launcher)], ignore_index=True)
    row = _summary(meta, samples).processes[0]
    assert row["kind"] == "launcher" and row["baseline_t"] == 0.6  # its first tick once rank 0 started
    assert row["growth_mb"] == pytest.approx(1) and row["built_mb"] == pytest.approx(142)


def test_a_worker_that_grew_after_its_last_exact_reading_counts_to_its_end_by_the_estimate() -> None:
    meta, samples = fork_job()
    late = samples["pid"].eq(11) & samples["t"].gt(6.0) & samples["tier"].eq("pss")
    samples = samples[~late].copy()  # worker 0: read once, at 5.2, before it copied anything
    cheap = samples["pid"].eq(11) & samples["tier"].eq("cheap")
    samples.loc[cheap, "uss_est_mb"] = 199.0
    samples.loc[cheap, "minflt"] = 199.0 / MB_PER_FAULT  # its faults explain it
    s = _summary(meta, samples)
    row = next(p for p in s.processes if p["pid"] == 11)
    assert row["estimated"] and row["pss_samples"] == 1 and row["growth_mb"] == pytest.approx(199, abs=0.5)
    assert "; 1 of them estimated from page faults: the exact readings missed their growth)" in s.culprit
    flat = next(p for p in _summary(*fork_job()).processes if p["pid"] == 11)
    assert not flat["estimated"]  # read at its end: exact


def test_a_parent_whose_building_no_reading_nor_estimate_saw_is_shown_it_by_its_anonymous_memory() -> None:
    # main is read at 0.1 and 0.3 (5 MB), builds 300 MB unseen by readings and estimates, forks at
    # 5.0 and is read again only after its workers ended: its anonymous RSS rose 300 MB meanwhile.
    main = proc_rows(
        1,
        "main",
        -1,
        [
            (0.1, "pss", 5, 20, 5),
            (0.3, "pss", 4, 21, 5),
            (2.0, "cheap", None, 165, 150),
            (4.8, "cheap", None, 315, 300),
            (5.2, "cheap", None, 315, 300),
            (19.8, "cheap", None, 317, 303, 4.0),  # its estimate did not see the building either
            (30.0, "pss", 305, 317, 303),
        ],
        kind="main",
    )
    for row, anon in zip(main, (6, 6, 150, 306, 306, 306, 306), strict=True):
        row["rss_anon_mb"] = anon
    meta, samples = fork_job()
    samples = pd.concat([samples[samples["pid"] != 1], pd.DataFrame(main)], ignore_index=True)
    s = _summary(meta, samples)
    row = s.processes[0]
    assert row["built_mb"] == pytest.approx(299)  # 4 MB read at 0.3 + 300 MB of anonymous memory, from 5 MB
    assert row["growth_mb"] == pytest.approx(0, abs=0.5) and s.main_uss_growth_mb < 50
    assert "The main process grew" not in s.culprit


def _main_while_workers_run(anon: list[float], faults: list[float]) -> list[dict]:
    """fork_job's main, read often while its workers run, with its anonymous RSS and faults."""
    points = [(0.1, "pss", 5, 20, 5), (2.0, "pss", 150, 165, 150), (4.0, "pss", 300, 315, 300)]
    times = [5.2 + 0.5 * k for k in range(len(anon))]
    points += [
        (t, "pss", 10 + 190 * k / (len(anon) - 1), 316, f)
        for k, (t, f) in enumerate(zip(times, faults, strict=True))
    ]
    rows = proc_rows(1, "main", -1, points, kind="main")
    for row, a in zip(rows, [5, 150, 300, *anon], strict=True):
        row["rss_anon_mb"] = a
    return rows


def test_a_parent_s_own_growth_is_new_memory_however_often_it_was_read() -> None:
    # Read every 0.5 s while its workers copy: its USS rises 190 MB, its faults 60 MB (its own
    # writes to pages the workers share: its GC, reference counts), its anonymous RSS not at all.
    meta, samples = fork_job()
    n = 30
    main = _main_while_workers_run([301.0] * n, [301 + 60 * k / (n - 1) for k in range(n)])
    s = _summary(meta, pd.concat([samples[samples["pid"] != 1], pd.DataFrame(main)], ignore_index=True))
    row = s.processes[0]
    assert row["growth_mb"] == pytest.approx(0, abs=0.1) and row["written_mb"] == pytest.approx(60, abs=1)
    assert row["released_mb"] == pytest.approx(130, abs=1)
    assert "The main process grew" not in s.culprit
    assert "+60 MB by its own writes to pages its workers share" in s.culprit
    # The same job read twice as often: the same growth (the rise of new memory is what it is).
    m = 2 * n - 1
    often = _main_while_workers_run([301.0] * m, [301 + 60 * k / (m - 1) for k in range(m)])
    s2 = _summary(meta, pd.concat([samples[samples["pid"] != 1], pd.DataFrame(often)], ignore_index=True))
    assert s2.processes[0]["growth_mb"] == pytest.approx(row["growth_mb"], abs=0.1)


def test_a_parent_that_allocates_while_its_workers_run_is_blamed() -> None:
    # main appends 120 MB of new objects while its workers run: its anonymous RSS rises by that.
    meta, samples = fork_job(worker_growth=6.0)
    n = 20
    main = _main_while_workers_run(
        [301 + 120 * k / (n - 1) for k in range(n)], [301 + 121 * k / (n - 1) for k in range(n)]
    )
    s = _summary(meta, pd.concat([samples[samples["pid"] != 1], pd.DataFrame(main)], ignore_index=True))
    assert s.processes[0]["growth_mb"] == pytest.approx(120, abs=1)
    assert (
        s.verdict == "growing"
        and "The main process grew +120 MB of its own after its first worker started" in s.culprit
    )


def test_a_parent_s_growth_runs_to_its_last_tick_with_workers_not_its_last_reading() -> None:
    # main pickles its data for spawn children (anonymous RSS +70 MB at 5.5), is read exactly
    # while the buffer is held (6.0) and frees it at 9.0, before its workers end (20.0): it has
    # not grown, although its last exact reading fell while the buffer was there.
    meta, samples = fork_job(worker_growth=6.0)
    main = proc_rows(
        1,
        "main",
        -1,
        [
            (0.1, "pss", 5, 20, 5),
            (4.0, "pss", 300, 315, 300),
            (5.2, "cheap", None, 315, 300, 300.0),
            (6.0, "pss", 370, 385, 370),
            (9.0, "cheap", None, 315, 371, 301.0),
            (19.8, "cheap", None, 315, 371, 301.0),
        ],
        kind="main",
    )
    for row, anon in zip(main, (5, 300, 300, 370, 300, 300), strict=True):
        row["rss_anon_mb"] = anon
    s = _summary(meta, pd.concat([samples[samples["pid"] != 1], pd.DataFrame(main)], ignore_index=True))
    row = s.processes[0]
    assert row["growth_mb"] == pytest.approx(0, abs=0.5) and row["last_t"] == 19.8
    assert s.verdict == "flat"


def test_a_worker_s_estimate_past_its_last_reading_counts_as_far_as_its_own_faults() -> None:
    # The estimate's sharers' term puts worker 0 at 199 MB after its last reading, but it faulted
    # only 50 MB in all: its own growth is no more than its faults explain.
    meta, samples = fork_job()
    late = samples["pid"].eq(11) & samples["t"].gt(6.0) & samples["tier"].eq("pss")
    samples = samples[~late].copy()
    samples.loc[samples["pid"].eq(11) & samples["tier"].eq("cheap"), "uss_est_mb"] = 199.0
    row = next(p for p in _summary(meta, samples).processes if p["pid"] == 11)
    assert row["estimated"] and row["growth_mb"] == pytest.approx(50, abs=0.5)


def test_a_copy_whose_faults_show_one_reading_late_is_the_worker_s_own() -> None:
    # A row's counters are read before its USS in the same tick: a fast copy shows its USS rise
    # at one reading and its faults at the next. Read often, the worker's growth is all of it.
    meta, samples = fork_job()
    worker = proc_rows(
        11,
        "worker 0",
        0,
        [(5.2 + k, "pss", 20.0 * (k + 1), 300, 20.0 * k) for k in range(10)] + [(15.2, "pss", 200, 300, 200)],
        kind="dataloader",
    )
    samples = pd.concat([samples[samples["pid"] != 11], pd.DataFrame(worker)], ignore_index=True)
    row = next(p for p in _summary(meta, samples).processes if p["pid"] == 11)
    assert row["growth_mb"] == pytest.approx(200, abs=0.5) and row["released_mb"] == pytest.approx(0, abs=0.5)


@pytest.mark.parametrize(
    "share, words, absent",
    [
        (
            0.0,
            "copy-on-access of what the main process built (+295 MB before its workers started).",
            "new memory",
        ),
        (
            0.3,
            (
                "copy-on-access of what the main process built (+295 MB before its workers started); "
                "at least +60 MB of that each is new memory they allocated."
            ),
            "mostly",
        ),
        (
            0.8,
            (
                ": mostly new memory of their own (at least +159 MB each allocated; at most +41 MB copied "
                "from their parent)."
            ),
            "copy-on-access",
        ),
    ],
)
def test_forked_workers_growth_says_what_they_allocated_apart_from_what_they_copied(
    share: float, words: str, absent: str
) -> None:
    """A copy-on-access fault leaves a worker's anonymous RSS as it was; memory it allocates adds
    to it. The culprit says which of the two a forked worker's growth is (HF datasets.map's pool
    workers do both)."""
    s = _summary(*fork_job(allocated_share=share))
    rows = {p["pid"]: p for p in s.processes}
    assert rows[11]["allocated_mb"] == pytest.approx(share * (200 - 1), abs=0.5)
    assert rows[11]["growth_mb"] == pytest.approx(200, abs=0.5)  # the growth itself is unchanged
    assert words in s.culprit and absent not in s.culprit.split("The main process is")[0], s.culprit
    assert s.verdict == "growing"


# -- between worker generations ---------------------------------------------------------------------


def test_what_a_parent_builds_while_none_of_its_workers_lives_is_built_not_growth() -> None:
    """A Hugging Face job: ``ds.map(num_proc=4)``'s pool, then ``to_list()`` in main with no
    worker alive, then a DataLoader. main's window runs from its first worker to its last one's
    end, and what it built between the two generations was once its "growth" (+100 MB here)."""
    s = _summary(*generations_job(built_between=100.0))
    main = s.processes[0]
    assert main["built_between_mb"] == pytest.approx(100) and main["built_mb"] == pytest.approx(295)
    assert main["growth_mb"] == pytest.approx(0, abs=0.5) and s.main_uss_growth_mb < 50
    assert s.verdict == "growing" and "The main process grew" not in s.culprit
    assert s.culprit.startswith(
        "growing: The main process's 4 forked children (2 generations) each grew about 200 MB"
    )
    assert (
        "The main process built +100 MB between worker generations, while none of its workers lived: "
        "not counted as growth." in s.culprit
    )
    # What it holds is still counted where memory is projected (300 MB at its first fork, as before).
    meta, samples = generations_job(built_between=100.0)
    assert _uss_projection(meta, samples)[0]["measured_mb"] == pytest.approx(300 + 100 + 2 * 200)


def test_a_parent_s_growth_while_its_generations_of_workers_live_still_counts() -> None:
    # 60 MB of its own while each generation runs, 100 MB built between them.
    s = _summary(*generations_job(built_between=100.0, grows_during=60.0))
    main = s.processes[0]
    assert main["growth_mb"] == pytest.approx(120) and main["built_between_mb"] == pytest.approx(100)
    # Per minute of the time its workers lived (5.2 to 20.0 less the 2.2 s between 10.0 and 12.2).
    assert main["growth_mb_per_min"] == pytest.approx(120 / (14.8 - 2.2) * 60)
    assert (
        "The main process grew +120 MB of its own after its first worker started (571 MB/min); besides, it "
        "built +100 MB between worker generations, while none of its workers lived (not counted as growth)."
        in s.culprit
    )


def test_a_flat_job_says_what_its_parent_built_between_worker_generations() -> None:
    s = _summary(*generations_job(built_between=100.0, worker_growth=6.0))
    assert s.verdict == "flat", s.culprit
    assert (
        "the main process +0.0 MB after its first worker started (built +295 MB before, +100 MB between "
        "worker generations)." in s.culprit
    )


def test_without_a_gap_between_generations_nothing_is_said_of_one() -> None:
    s = _summary(*generations_job(built_between=0.0))
    assert s.processes[0]["built_between_mb"] == pytest.approx(0)
    assert "between worker generations" not in s.culprit
    one = _summary(*fork_job()).processes[0]  # one generation: no gap at all
    assert one["built_between_mb"] is None


def test_a_generation_started_before_the_last_one_was_seen_gone_is_not_counted_at_once() -> None:
    """A DataLoader without persistent workers starts the next epoch's workers within the tick the
    last epoch's were first seen gone (a torchrun job: gone at 22.09 s, the next started at
    21.84 s, last seen alive at 21.64 s). The projection's measured row is 2 workers, not 4."""
    meta, samples = generations_job(built_between=0.0)
    for p in meta["processes"]:
        if p.get("generation") == 1:
            p["start_t"] = 10.1  # after generation 0's last tick alive (10.0), before its end_t (10.2)
    s = _summary(meta, samples)
    measured = [r for r in s.projection if r["as_measured"]]
    assert [r["workers_per_rank"] for r in measured] == [2]


def _spawn_worker_churning(exact_until: float) -> tuple[dict, pd.DataFrame]:
    """A spawn (or forkserver) DataLoader worker, settled at 310 MB after its start-up, then flat
    for 25 s: its RSS holds still at 430 MB, but it faults 1 MB a second (batches freed and
    allocated again), and the sampler's estimate drifts up with its faults (+1 MB/s). Read
    exactly until ``exact_until``."""
    main = proc_rows(1, "main", -1, [(0.1, "pss", 50, 60, 50), (30.0, "pss", 51, 61, 51)], kind="main")
    points = [(1.1, "pss", 20, 30, 20), (3.0, "pss", 310, 430, 310)]
    for k in range(1, 26):
        t = 3.0 + k
        if t <= exact_until:
            points.append((t, "pss", 310.0, 430.0, 310.0 + k))
        else:
            points.append((t, "cheap", None, 430.0, 310.0 + k, 310.0 + (t - exact_until)))
    child = proc_rows(2, "worker 0", 0, points, kind="dataloader")
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=30.0),
        proc_info(
            2, "worker 0", "dataloader", ppid=1, start_t=1.0, last_t=28.0, worker=0, start_method="spawn"
        ),
    ]
    return job_meta(procs, workers=1, mode="spawn"), pd.DataFrame(main + child)


def test_a_spawned_worker_s_estimate_past_its_last_reading_grows_no_more_than_its_rss() -> None:
    """A forkserver DataLoader worker's USS held at 310.9 MB for 24 s (psutil), while the estimate
    after its last exact reading drifted with its faults to 331 MB at flat RSS and it was said to
    grow +17.6 MB: a spawned process has no parent's pages to copy, so its own growth needs RSS."""
    s = _summary(*_spawn_worker_churning(exact_until=6.0))
    row = next(p for p in s.processes if p["pid"] == 2)
    assert row["growth_mb"] == pytest.approx(0, abs=0.5), row
    assert row["uss_end_mb"] == pytest.approx(310, abs=0.5)


def test_a_spawned_worker_judged_on_its_estimate_alone_grows_no_more_than_its_rss() -> None:
    s = _summary(*_spawn_worker_churning(exact_until=2.0))  # no exact reading after its start-up
    row = next(p for p in s.processes if p["pid"] == 2)
    assert row["estimated"] and row["growth_mb"] == pytest.approx(0, abs=0.5), row


def test_a_worker_never_read_exactly_counts_in_total_pss_by_its_estimated_uss_and_share() -> None:
    """A torchrun job's 8 DataLoader workers were read exactly once in all: left out of the total,
    it said 1,004 MB of PSS where psutil summed 1,854 MB, and "Summing RSS over-counts by 2,592 MB";
    counted by their estimated USS alone, 1,465 MB (-21 %): without their share of the pages they
    share with their rank, which the rank's reading after their fork no longer holds."""
    meta, samples = fork_job()
    unread = samples["pid"].eq(12) & samples["tier"].isin(["pss", "cheap"])
    samples = samples.copy()
    samples.loc[unread, "uss_est_mb"] = samples.loc[unread, "uss_mb"].fillna(50.0)
    for col in ("pss_mb", "uss_mb", "private_dirty_mb", "anon_huge_mb"):
        samples.loc[unread, col] = None
    samples.loc[unread, "tier"] = "cheap"  # worker 1: never read exactly, estimated at every tick
    s = _summary(meta, samples)
    procs = processes(meta)
    total = series.total_pss(as_analysed(samples, procs))
    # At t=20: main 215 + worker 0 205 (exact: 5 of its 120 MB shared pages are its share) + worker
    # 1 its estimated USS 200 and the same share of its own 120 MB: 205, as its twin.
    assert total.loc[20.0] == pytest.approx(215 + 205 + 205)
    assert s.total_pss_peak_mb == pytest.approx(625)
    assert (
        "the real total (PSS) was about 625 MB (1 process never read exactly counts with an estimate)"
        in s.explanation
    )
    # Without who its parent is, only its USS (the samples alone cannot say its parent's reading
    # no longer holds what they share).
    assert series.total_pss(samples).loc[20.0] == pytest.approx(215 + 205 + 200)


def test_a_parent_held_at_a_reading_from_before_its_fork_keeps_what_its_unread_children_share() -> None:
    """A Lightning rank read before it forked its workers, and not after, holds every page they
    share at that reading: the workers, never read, add their USS only (with their share too, the
    total stood 13 % over psutil's). What it freed since (its RSS fell 135 MB) leaves the total."""
    meta, samples = fork_job()
    samples = samples[~samples["pid"].eq(1) | samples["t"].le(4.0)].copy()  # main: read before the fork only
    later = samples[samples["pid"].eq(11) & samples["t"].ge(5.0)][["t"]].assign(
        pid=1, role="main", tier="cheap", rss_mb=216.0, uss_est_mb=50.0, missing=False
    )
    samples = pd.concat([samples, later], ignore_index=True)
    for pid in (11, 12):  # the workers: never read
        rows = samples["pid"].eq(pid) & samples["tier"].isin(["pss", "cheap"])
        samples.loc[rows, "uss_est_mb"] = samples.loc[rows, "uss_mb"].fillna(50.0)
        samples.loc[rows, ["pss_mb", "uss_mb"]] = None
        samples.loc[rows, "tier"] = "cheap"
    samples.loc[samples["pid"].eq(11) & samples["t"].eq(20.0), "tier"] = "pss"  # one reading, worker 0
    samples.loc[samples["pid"].eq(11) & samples["t"].eq(20.0), ["pss_mb", "uss_mb"]] = [205.0, 200.0]
    procs = processes(meta)
    total = series.total_pss(as_analysed(samples, procs))
    # main held at its reading at 4.0 (305 MB) less the 100 MB its RSS fell since (316 -> 216);
    # worker 1 by its USS alone; worker 0 exact.
    assert total.loc[20.0] == pytest.approx(305 - 99 + 200 + 205)


def test_what_a_parent_freed_just_before_its_fork_is_not_what_it_built() -> None:
    """The numpy-serialized copy-on-access demo deletes its list of dicts and collects just before
    starting its workers: its last tick before the fork showed 843 MB of RSS, its first after 479 MB
    (a fork leaves the parent's RSS as it was), and "built +818 MB before its workers started"
    (psutil: ~460 MB of USS then) was what it had freed too, also each full copy of the projection."""
    meta, samples = fork_job()
    samples = samples.copy()
    before = samples[samples["pid"].eq(1) & samples["t"].eq(4.0)].copy()
    before[["t", "tier", "pss_mb", "uss_mb", "private_dirty_mb", "anon_huge_mb"]] = [
        4.8,
        "cheap",
        None,
        None,
        None,
        None,
    ]
    samples = pd.concat([samples, before], ignore_index=True)
    after = samples["pid"].eq(1) & samples["t"].ge(5.0)
    samples.loc[after, "rss_anon_mb"] -= 200  # freed 200 MB between its tick at 4.8 and the fork at 5.0
    s = _summary(meta, samples)
    main = s.processes[0]
    assert main["built_mb"] == pytest.approx(96) and main["held_mb"] == pytest.approx(101)
    assert "copy-on-access of what the main process built (+96 MB before its workers started)" in s.culprit


def test_the_workers_pace_is_that_of_the_growth_and_duration_the_sentence_gives() -> None:
    """Three os.fork children copied 116 MB each and were read at 1.9, 4.7 and 6.2 s: the
    sentence said "each grew about 116 MB in 4 s (3,036 MB/min)", the mean of their three rates."""
    meta, samples = fork_job()
    samples = samples[~(samples["pid"].eq(12) & samples["t"].eq(20.0))]  # worker 1 last read at 10.0
    s = _summary(meta, samples)
    rows = {p["pid"]: p for p in s.processes}
    assert rows[11]["last_t"] == 20.0 and rows[12]["last_t"] == 10.0
    mean = (rows[11]["growth_mb"] + rows[12]["growth_mb"]) / 2
    span = (15.0 + 5.0) / 2
    assert f"each grew about {mean:,.0f} MB in {span:.0f} s ({mean / span * 60:,.0f} MB/min)" in s.culprit


def test_a_watched_parent_that_built_before_memprobe_began_is_said_to_hold_not_to_build() -> None:
    """`memprobe watch` attached to a torchrun job 6 s in, while its ranks built ~450 MB: "copy-on-
    access of what each rank built (+33 MB to +49 MB before its workers started)"."""
    meta, samples = fork_job()
    meta["kind"] = "watch"
    meta["processes"][0]["start_t"] = -5.0  # main ran 5 s before memprobe began watching
    s = _summary(meta, samples)
    assert (
        "copy-on-access of what the main process held when its workers started (300 MB; already running "
        "when memprobe began watching)" in s.culprit
    )
    assert "built (+295 MB" not in s.culprit
    recorded = _summary(*fork_job())
    assert (
        "copy-on-access of what the main process built (+295 MB before its workers started)"
        in recorded.culprit
    )


def test_the_projection_varies_the_dataloader_workers_not_a_pool_the_parent_ran_before() -> None:
    """A Hugging Face job: ``ds.map(num_proc=4)`` (a pool of 4 and its manager), then a DataLoader
    of 2: its projection said "5 workers (measured)", the mean of both kinds' growth."""
    from memprobe.analysis.processes import processes as procs_of
    from memprobe.analysis.projection import projection_basis

    meta, samples = generations_job(built_between=0.0)
    samples = samples.copy()
    loader = samples["pid"].isin([21, 22])
    samples.loc[loader, "kind"] = "dataloader"
    samples.loc[samples["pid"].eq(21) & samples["tier"].eq("pss"), "uss_mb"] = [1.0, 20.0]  # +20 MB
    samples.loc[samples["pid"].eq(22) & samples["tier"].eq("pss"), "uss_mb"] = [1.0, 20.0]
    for p in meta["processes"]:
        if p["pid"] in (21, 22):
            p.update(kind="dataloader", start_method="fork")
    s = _summary(meta, samples)
    rows = [Growth(**r) for r in s.processes]
    basis = projection_basis(rows, procs_of(meta))
    assert basis is not None and basis.workers == 2 and basis.workers_measured == 2
    assert basis.worker_growth_mb == pytest.approx(20, abs=1)


def test_a_spawned_child_of_main_that_runs_dataloader_workers_is_a_rank() -> None:
    """The DDP tutorials start ranks with ``torch.multiprocessing.spawn(train, nprocs=2)``: no
    launcher, no RANK in their environment. Judged as spawned workers, each rank's building after
    its start-up was its "growth": a job whose DataLoader workers were flat was called growing."""
    main = proc_rows(1, "main", -1, [(0.1, "pss", 50, 60, 50), (30.0, "pss", 50, 60, 50)], kind="main")
    builds = [(1.1, "pss", 20, 30, 20), (2.0, "pss", 100, 110, 100)]
    builds += [(2.0 + 0.5 * k, "cheap", None, 110.0, 100.0) for k in range(1, 3)]  # start-up ends at 3.0
    builds += [(4.0 + k, "pss", 100 + 60 * k, 110 + 60 * k, 100 + 60 * k) for k in range(6)]  # builds 300 MB
    builds += [(12.0, "pss", 400, 410, 400), (29.0, "pss", 401, 411, 401)]
    rank = proc_rows(2, "worker 0", 0, builds, kind="spawn", anon_is_faults=True)
    workers = []
    for pid, w in ((11, 0), (12, 1)):
        workers += proc_rows(
            pid,
            f"worker 0.{w}",
            w,
            [(10.0, "pss", 20, 30, 20), (12.0, "pss", 300, 310, 300), (29.0, "pss", 302, 312, 302)],
            kind="dataloader",
        )
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=30.0),
        proc_info(2, "worker 0", "spawn", ppid=1, start_t=1.0, last_t=29.0, worker=0, start_method="spawn"),
        *[
            proc_info(
                pid,
                f"worker 0.{w}",
                "dataloader",
                ppid=2,
                start_t=9.5,
                last_t=29.0,
                worker=w,
                start_method="spawn",
            )
            for pid, w in ((11, 0), (12, 1))
        ],
    ]
    samples = pd.DataFrame(main + rank + workers)
    s = _summary(loaded(job_meta(procs, mode="spawn", workers=2), samples, version=2), samples)
    row = next(p for p in s.processes if p["pid"] == 2)
    assert row["kind"] == "rank" and row["built_mb"] == pytest.approx(380, abs=1), row
    assert row["growth_mb"] == pytest.approx(1, abs=1)
    assert s.verdict == "flat", s.culprit


def test_a_generation_that_starts_before_the_last_one_is_seen_gone_still_leaves_a_gap() -> None:
    """Generation 0 was last seen alive at 10.0 and first seen gone at a tick after generation 1
    started (12.0): the 100 MB main built in between was its "growth" and it was blamed."""
    meta, samples = generations_job(built_between=100.0)
    for p in meta["processes"]:
        if p.get("generation") == 0:
            p["end_t"] = 12.1
    s = _summary(meta, samples)
    main = s.processes[0]
    assert main["built_between_mb"] == pytest.approx(100) and main["growth_mb"] == pytest.approx(0, abs=0.5)
    assert "The main process grew" not in s.culprit


def test_an_older_lightning_root_that_trained_with_workers_of_its_own_is_rank_0() -> None:
    meta, samples = lightning_job()
    meta = loaded(meta, samples, version=2)
    by_pid = {p.pid: p for p in processes(meta)}
    assert (by_pid[10].kind, by_pid[10].role, by_pid[10].rank) == ("rank", "rank 0", 0)
    assert [(by_pid[p].role, by_pid[p].rank) for p in (100, 101)] == [
        ("rank 0 worker 0", 0),
        ("rank 0 worker 1", 0),
    ]
    assert by_pid[11].role == "rank 1"
    s = _summary(meta, samples)
    root = next(p for p in s.processes if p["pid"] == 10)
    # Its window runs from its own first worker to its last: not from rank 1's start, through its teardown.
    assert root["growth_mb"] == pytest.approx(1, abs=2), root
    assert "launcher" not in s.culprit and "Rank 0's 2 DataLoader workers" in s.culprit, s.culprit
    assert {(r["ranks"], r["workers_per_rank"]) for r in s.projection if r["as_measured"]} == {(2, 2)}


def test_spawned_ranks_and_their_workers_are_named_as_ranks_in_an_older_meta() -> None:
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=30.0),
        *[
            proc_info(
                p, f"worker {k}", "spawn", ppid=1, start_t=1.0, last_t=29.0, worker=k, start_method="spawn"
            )
            for k, p in ((0, 2), (1, 3))
        ],
        *[
            proc_info(
                p,
                f"worker {k}.{w}",
                "dataloader",
                ppid=2 + k,
                start_t=9.5,
                last_t=29.0,
                worker=w,
                forked=True,
            )
            for k, w, p in ((0, 0, 20), (0, 1, 21), (1, 0, 30), (1, 1, 31))
        ],
    ]
    meta = loaded(job_meta(procs), pd.DataFrame(), version=2)
    roles = {p.pid: (p.role, p.kind, p.rank) for p in processes(meta)}
    assert roles == {
        1: ("launcher", "launcher", -1),
        2: ("rank 0", "rank", 0),
        3: ("rank 1", "rank", 1),
        20: ("rank 0 worker 0", "dataloader", 0),
        21: ("rank 0 worker 1", "dataloader", 0),
        30: ("rank 1 worker 0", "dataloader", 1),
        31: ("rank 1 worker 1", "dataloader", 1),
    }


def test_generations_that_overlap_are_not_counted_at_once() -> None:
    """Lightning starts the next epoch's iterator before the last one's workers exit: generation 1
    started at 9.5, generation 0 was last seen alive at 10.0. Still 2 workers per rank."""
    meta, samples = generations_job(built_between=0.0)
    for p in meta["processes"]:
        if p.get("generation") == 1:
            p["start_t"] = 9.5
    s = _summary(meta, samples)
    assert [r["workers_per_rank"] for r in s.projection if r["as_measured"]] == [2]


def test_workers_that_levelled_off_are_projected_as_measured_not_as_full_copies() -> None:
    """Each worker copied 120 MB of the 300 MB its parent held by 10 s, then nothing more to
    20 s: it is no full copy in the making, and "full copy" counts it as measured."""
    s = _summary(*levelled_fork_job())
    assert [p["levelled"] for p in s.processes if p["kind"] == "dataloader"] == [True, True]
    ran = next(r for r in s.projection if r["as_measured"])
    assert ran["full_copy_mb"] == pytest.approx(ran["measured_mb"])
    ran = next(r for r in _uss_projection(*levelled_fork_job()) if r["as_measured"])
    assert ran["measured_mb"] == pytest.approx(300 + 2 * 120, rel=0.03)
    assert ran["full_copy_mb"] == pytest.approx(ran["measured_mb"])
    # Still copying at the end: a full copy is where they are going.
    going = _summary(*fork_job(worker_growth=120.0))
    assert [p["levelled"] for p in going.processes if p["kind"] == "dataloader"] == [False, False]
    ran = next(r for r in going.projection if r["as_measured"])
    assert ran["full_copy_mb"] - ran["measured_mb"] == pytest.approx(2 * (300 - 120), rel=0.03)
    assert next(r for r in _uss_projection(*fork_job(worker_growth=120.0)) if r["as_measured"])[
        "full_copy_mb"
    ] == pytest.approx(300 + 2 * 300, rel=0.03)


def test_spawned_dataloader_workers_of_two_epochs_recorded_as_one_generation_are_two() -> None:
    """Lightning's ddp_spawn started epoch 2's spawned workers (one after the other) while epoch
    1's still lived: recorded as workers 0-3 of one generation. Those that end together belong
    together; a generation whose workers end apart but started together stays one."""

    def worker(pid: int, k: int, start: float, last: float) -> dict:
        info = proc_info(
            pid, f"rank 0 worker {k}", "dataloader", ppid=2, start_t=start, last_t=last, worker=k, rank=0
        )
        return {**info, "start_method": "spawn", "generation": 0}

    procs = [
        proc_info(1, "launcher", "launcher", ppid=None, start_t=0.0, last_t=70.0),
        proc_info(2, "rank 0", "rank", ppid=1, start_t=1.0, last_t=69.0, rank=0),
        worker(11, 0, 20.0, 40.0),
        worker(12, 1, 31.0, 40.4),
        worker(13, 2, 35.0, 60.0),
        worker(14, 3, 45.0, 60.2),
    ]

    def recorded(procs: list[dict]) -> dict[int, tuple]:
        """As the tree sampler lists them (process_list), and as an older folder loads them."""
        listed = {
            p["pid"]: (p["role"], p["generation"]) for p in with_loader_generations(procs) if p["pid"] > 10
        }
        meta = loaded(job_meta([dict(p) for p in procs]), pd.DataFrame(), version=3)
        assert {p.pid: (p.role, p.generation) for p in processes(meta) if p.pid > 10} == listed
        return listed

    got = recorded(procs)
    assert got == {
        11: ("rank 0 worker 0", 0),
        12: ("rank 0 worker 1", 0),
        13: ("rank 0 worker 0", 1),
        14: ("rank 0 worker 1", 1),
    }
    procs[4]["start_t"] = 21.0  # started with the first two: one generation whose ends came apart
    kept = recorded(procs)
    assert kept == {pid: (f"rank 0 worker {pid - 11}", 0) for pid in (11, 12, 13, 14)}


def test_a_rank_never_read_before_its_workers_started_is_shown_what_it_built() -> None:
    """accelerate's debug_launcher: both ranks built their lists of dicts before the sampler
    first read them exactly (after their workers' fork): what each built is the rise of its
    anonymous RSS, read every tick, and the culprit names it."""
    meta, samples = rank_job()
    early = samples["pid"].isin([10, 11]) & (samples["t"] < 5.0)
    samples.loc[early, "tier"] = "cheap"
    samples.loc[early, ["uss_mb", "pss_mb", "private_dirty_mb"]] = None
    s = _summary(meta, samples)
    ranks = [p for p in s.processes if p["kind"] == "rank"]
    assert [p["built_mb"] for p in ranks] == [pytest.approx(380), pytest.approx(380)]
    assert all(p["held_mb"] is None for p in ranks)  # its first reading holds its pages shared already
    assert "copy-on-access of what rank 0 built (+380 MB before its workers started)" in s.culprit, s.culprit
    # The projection counts what each rank held at least (380 MB), not its USS once its pages were shared.
    ran = next(r for r in _uss_projection(meta, samples) if r["as_measured"])
    assert ran["measured_mb"] == pytest.approx(9 + 2 * (380 + 2 * (150 + 3) / 2), rel=0.03)


def test_a_main_process_with_no_worker_grows_as_far_as_its_estimate_and_rss_went_after_its_last_reading() -> (
    None
):
    """A loop keeping 400 kB a step (120 MB in 3.7 s): the sampler trusted its estimate and read it
    exactly at 0-1.3 s alone; judged on those readings it grew +32 to +42 MB, "flat", in two
    `memprobe record --fail-on growing` runs of three (tests/integration/test_fail_on.py failed
    so on a loaded machine). Its estimate to its last tick, bounded by its RSS rise, is its own."""
    readings = [(0.0, "pss", 2, 7, 0), (0.6, "pss", 22, 28, 20), (1.3, "pss", 40, 45, 38)]
    cheap = [
        (t, "cheap", None, 45 + 36 * (t - 1.3), 38 + 36 * (t - 1.3), 40 + 36 * (t - 1.3))
        for t in (2.0, 2.7, 3.4)
    ]
    main = proc_rows(1, "main", -1, [*readings, *cheap], kind="main")
    meta = job_meta(
        [proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=3.4)], workers=0, mode="fork"
    )
    s = _summary(meta, pd.DataFrame(main))
    row = next(p for p in s.processes if p["pid"] == 1)
    assert row["estimated"] is True
    assert row["growth_mb"] == pytest.approx(40 + 36 * 2.1 - 2, abs=0.5)  # to its last tick: 113.6 MB
    assert s.verdict == "growing"


def test_a_main_process_with_no_worker_is_judged_on_what_it_held_before_it_freed_it_exiting() -> None:
    """The same loop recorded in CI: read exactly at 0-1.0 s, its estimate rising to 112.8 MB at
    3.0 s, and its last tick (3.2 s) caught the interpreter freeing what it kept as it exited (RSS
    118.6 -> 36.3 MB, estimate 30.6): the estimate to that tick fell below its last reading and
    it was judged +37 MB, "flat". Its teardown is left out, as a worker's is."""
    readings = [(0.0, "pss", 1.9, 6.9, 0), (0.6, "pss", 24.6, 30.5, 23), (1.0, "pss", 39.1, 45.1, 37)]
    cheap = [
        (t, "cheap", None, 45.1 + 36.7 * (t - 1.0), 37 + 36.7 * (t - 1.0), 39.1 + 36.7 * (t - 1.0))
        for t in (1.4, 1.8, 2.2, 2.6, 3.0)
    ]
    exiting = (3.2, "cheap", None, 36.3, 37 + 36.7 * 2.0, 30.6)
    main = proc_rows(1, "main", -1, [*readings, *cheap, exiting], kind="main")
    meta = job_meta(
        [proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=3.2)], workers=0, mode="fork"
    )
    s = _summary(meta, pd.DataFrame(main))
    row = next(p for p in s.processes if p["pid"] == 1)
    assert row["estimated"] is True
    assert row["growth_mb"] == pytest.approx(39.1 + 36.7 * 2.0 - 1.9, abs=0.5)  # to 3.0 s: 110.6 MB
    assert s.verdict == "growing"
