"""Figures and verdicts from saved samples: pure functions, checked on hand-made tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from memprobe.analysis.scenario import per_process_growth, summarize
from memprobe.core.series import sum_rss
from memprobe.core.summary import per_item_costs, pss_rounds

MAIN, W0, W1, TRACKER = 100, 201, 202, 300


def _row(t, pid, role, worker, tier, rss=None, pss=None, uss=None, missing=False, cpu=0.0):
    return {
        "t": t,
        "pid": pid,
        "role": role,
        "worker": worker,
        "state": None if missing else "S",
        "tier": "gone" if missing else tier,
        "missing": missing,
        "reason": "exited" if missing else None,
        "rss_mb": rss,
        "pss_mb": pss,
        "uss_mb": uss,
        "cpu_s": None if missing else cpu,
    }


def _samples() -> pd.DataFrame:
    """Main + two workers + a helper. PSS rounds at 0.5 (before warm), 1.0 (the warm round),
    2.0, 3.0 (the done round) and 3.5; cheap ticks in between; worker 1 gone at 3.6."""
    rows = []
    uss = {  # t -> (main, w0, w1)
        0.5: (200, 5, 6),
        1.0: (210, 10, 12),
        2.0: (260, 60, 40),
        3.0: (300, 110, 72),
        3.5: (300, 111, 73),
    }
    for t, (m, a, b) in uss.items():
        rows += [
            _row(t, MAIN, "main", -1, "pss", rss=400, pss=m + 20, uss=m, cpu=t),
            _row(t, W0, "worker 0", 0, "pss", rss=300, pss=a + 30, uss=a, cpu=t),
            _row(t, W1, "worker 1", 1, "pss", rss=300, pss=b + 30, uss=b, cpu=t),
            _row(t, TRACKER, "resource tracker", -1, "pss", rss=10, pss=5, uss=4, cpu=0),
        ]
    for t in (1.5, 2.5):
        rows += [
            _row(t, MAIN, "main", -1, "cheap", rss=500, cpu=t),
            _row(t, W0, "worker 0", 0, "cheap", rss=350, cpu=t),
            _row(t, W1, "worker 1", 1, "cheap", rss=350, cpu=t),
            _row(t, TRACKER, "resource tracker", -1, "cheap", rss=10),
        ]
    rows.append(_row(3.6, W1, "worker 1", 1, "gone", missing=True))
    return pd.DataFrame(rows)


def _progress() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "t": [0.8, 0.9, 2.0, 2.9],
            "items": [256, 512, 5000, 10000],
            "batches": [1, 2, 20, 40],
            "epoch": [0, 0, 0, 0],
        }
    )


def _meta(mode="fork", workers=2, expect=None, status="ok", error=None, milestones=None, threshold=50.0):
    spec = {
        "run_id": f"list-{mode}-w{workers}",
        "backend": "list",
        "mode": mode,
        "workers": workers,
        "dataset": {"records": 10000, "floats": 4, "seed": 0},
        "loader": {"batch_size": 256, "epochs": 1},
        "sampling": {"interval_s": 0.1},
        "verdict": {"growth_threshold_mb": threshold},
        "timeout_s": 60,
        "expect": expect,
        "fault": None,
    }
    return {
        "run_id": spec["run_id"],
        "index": 0,
        "status": status,
        "error": error,
        "items": 10000,
        "batches": 40,
        "milestones": {"iter_start": 0.7, "first_batch": 0.8, "warm": 0.9, "done": 2.9}
        if milestones is None
        else milestones,
        "elapsed_s": 4.0,
        "sampler": {"cpu_s": 0.08},
        "spec": spec,
    }


def _summarize(**kw):
    return summarize(_meta(**kw), _samples(), _progress(), pd.DataFrame())


def test_pss_rounds_sum_over_the_tree() -> None:
    rounds = pss_rounds(_samples())
    assert list(rounds["t"]) == [0.5, 1.0, 2.0, 3.0, 3.5]
    r = rounds.set_index("t")
    assert r.loc[1.0, "total_pss_mb"] == pytest.approx(230 + 40 + 42 + 5)
    assert r.loc[1.0, "sum_rss_mb"] == pytest.approx(400 + 300 + 300 + 10)
    assert r.loc[1.0, "processes"] == 4


def test_rss_totals_count_both_tiers_and_skip_missing_rows() -> None:
    totals = sum_rss(_samples())
    assert totals.loc[1.5] == pytest.approx(500 + 350 + 350 + 10)
    assert 3.6 not in totals.index or totals.loc[3.6] == 0  # a missing row adds nothing


def test_per_process_growth_uses_first_and_last_pss_sample_in_the_window() -> None:
    g = per_process_growth(_samples(), 1.0, 3.0).set_index("pid")
    assert g.loc[W0, "uss_start_mb"] == 10 and g.loc[W0, "uss_end_mb"] == 110
    assert g.loc[W0, "growth_mb"] == 100 and g.loc[W1, "growth_mb"] == 60
    assert g.loc[MAIN, "growth_mb"] == 90 and g.loc[W1, "worker"] == 1


def test_fork_summary_figures_and_growing_verdict() -> None:
    s = _summarize(expect="growing")
    # Window: the first PSS round at or after warm (1.0) to the first at or after done (3.0).
    assert s.total_pss_start_mb == pytest.approx(230 + 40 + 42 + 5)
    assert s.total_pss_end_mb == pytest.approx(320 + 140 + 102 + 5)
    assert s.total_pss_peak_mb == pytest.approx(320 + 141 + 103 + 5)  # peak over every round
    assert s.sum_rss_peak_mb == pytest.approx(1210)  # the cheap tick at 1.5 or 2.5
    assert s.rss_overcount_mb == pytest.approx(1210 - (320 + 141 + 103 + 5))
    assert s.worker_uss_start_mb == pytest.approx(11)
    assert s.worker_uss_growth_mb == pytest.approx(80)  # mean of 100 and 60
    assert s.worker_uss_growth_max_mb == pytest.approx(100)
    assert s.main_uss_growth_mb == pytest.approx(90)
    assert s.growth_per_1k_items_per_worker_mb == pytest.approx(80 / 5)  # 5,000 items per worker
    assert s.verdict == "growing" and s.expectation == "growing" and s.expectation_met is True
    assert s.items == 10000 and s.items_per_s == pytest.approx((10000 - 512) / (2.9 - 0.9))
    assert s.time_to_first_batch_s == pytest.approx(0.1)
    assert s.sampler_cpu_share == pytest.approx(0.08 / 4.0)
    assert "growing" in s.explanation and "80" in s.explanation


def test_verdict_follows_the_threshold() -> None:
    s = _summarize(threshold=90.0, expect="growing")
    assert s.verdict == "flat" and s.expectation_met is False
    assert _summarize(threshold=79.0).verdict == "growing"
    assert _summarize().expectation_met is None  # no expectation set


def test_thread_runs_judge_the_main_process() -> None:
    s = _summarize(mode="thread", threshold=95.0)
    assert s.verdict == "flat"  # main grew 90 MB, under 95, whatever the 'worker' rows say
    assert _summarize(mode="thread", threshold=85.0).verdict == "growing"


def test_no_window_no_verdict() -> None:
    s = _summarize(
        status="failed",
        error={"type": "ValueError", "message": "injected fault at index 7"},
        milestones={"iter_start": 0.7, "first_batch": 0.8},
        expect="flat",
    )
    assert s.verdict is None and s.expectation_met is None
    assert s.worker_uss_growth_mb is None and s.total_pss_start_mb is None
    assert s.error == "ValueError: injected fault at index 7"
    assert "no verdict" in s.explanation and "injected fault" in s.explanation
    assert s.total_pss_peak_mb is not None  # the samples up to the failure still count


def test_to_dict_rounds_and_turns_nan_into_none() -> None:
    from dataclasses import replace

    d = replace(_summarize(), items_per_s=float("nan"), worker_uss_growth_mb=1.23456).to_dict()
    assert d["items_per_s"] is None and d["worker_uss_growth_mb"] == 1.235
    assert not any(isinstance(v, float) and math.isnan(v) for v in d.values())


def test_private_clean_pages_freed_by_other_processes_are_not_growth() -> None:
    """Numbers from a real list x thread run on a shared machine."""
    rows = []
    for t, clean, dirty, rss in (
        (2.213, 3.75, 273.78, 375.93),
        (3.625, 62.91, 274.15, 376.30),
        (3.937, 62.91, 270.24, 372.39),
    ):
        r = _row(t, MAIN, "main", -1, "pss", rss=rss, pss=dirty + 20, uss=clean + dirty, cpu=t)
        r.update(private_clean_mb=clean, private_dirty_mb=dirty)
        rows.append(r)
    samples = pd.DataFrame(rows)
    meta = _meta(
        mode="thread",
        expect="flat",
        milestones={"iter_start": 2.17, "first_batch": 2.2, "warm": 2.2125, "done": 3.9363},
    )
    s = summarize(meta, samples, _progress(), pd.DataFrame())
    assert s.verdict == "flat", s.explanation


def test_the_explanation_says_what_was_measured_in_the_run_s_own_words() -> None:
    s = _summarize()
    assert s.explanation.startswith(
        "growing: each of 2 workers' private memory (USS) grew +80.0 MB (mean) "
        "over 10,000 items, against a threshold of 50 MB"
    )
    assert "16.000 MB per 1,000 items per worker" in s.explanation
    decode = summarize(
        {**_meta(), "spec": {**_meta()["spec"], "workload": "decode"}},
        _samples(),
        _progress(),
        pd.DataFrame(),
    )
    assert "over 10,000 images" in decode.explanation and "per 1,000 images per worker" in decode.explanation
    thread = _summarize(mode="thread")
    assert "the main process's private dirty memory grew +90.0 MB over" in thread.explanation
    uncounted = summarize({**_meta(), "items": 0}, _samples(), _progress(), pd.DataFrame())
    assert "over the run (items not counted)" in uncounted.explanation


def test_growth_per_1k_items_counts_every_worker_process_that_served_them() -> None:
    """Workers recreated every epoch (or each generation of a recorded job): the items were
    shared by all of them, not only by the workers alive at one time."""
    samples = _samples()
    # A second generation: two more worker processes in the window, each growing by 80 MB.
    later = samples[samples["worker"] >= 0].copy()
    later["pid"] += 1000
    samples = pd.concat([samples, later], ignore_index=True)
    s = summarize(_meta(), samples, _progress(), pd.DataFrame())
    assert s.growth_per_1k_items_per_worker_mb == pytest.approx(80 / (10000 / 4 / 1000))


def _counters(t: float, pid: int, cpu: float, sys_cpu: float | None, minflt: int) -> dict:
    row = _row(
        t, pid, "main" if pid == MAIN else "worker 0", -1 if pid == MAIN else 0, "cheap", rss=100, cpu=cpu
    )
    row["minflt"] = minflt
    if sys_cpu is not None:
        row["sys_cpu_s"] = sys_cpu
    return row


def test_per_item_costs_sum_the_tree_over_the_window() -> None:
    rows = [
        _counters(0.5, MAIN, 0.0, 0.0, 0),  # before the window: not counted
        _counters(1.0, MAIN, 1.0, 0.2, 100),
        _counters(3.0, MAIN, 3.0, 0.6, 300),
        _counters(1.0, W0, 1.0, 0.1, 0),
        _counters(2.0, W0, 2.0, 0.1, 1000),
        _counters(3.5, W0, 9.0, 5.0, 9000),
    ]  # after it: not counted
    costs = per_item_costs(pd.DataFrame(rows), 1.0, 3.0, items=100)
    assert costs["cpu_ms_per_item"] == pytest.approx((2.0 + 1.0) / 100 * 1e3)
    assert costs["faults_per_item"] == pytest.approx((200 + 1000) / 100)
    assert costs["kernel_cpu_share"] == pytest.approx(0.4 / 3.0)


def test_per_item_costs_of_results_without_kernel_time_have_no_kernel_share() -> None:
    rows = [_counters(1.0, MAIN, 1.0, None, 0), _counters(3.0, MAIN, 2.0, None, 50)]
    costs = per_item_costs(pd.DataFrame(rows), 1.0, 3.0, items=10)
    assert costs == {
        "cpu_ms_per_item": pytest.approx(100.0),
        "faults_per_item": 5.0,
        "kernel_cpu_share": None,
    }
    assert per_item_costs(pd.DataFrame(rows), 1.0, 3.0, items=0)["cpu_ms_per_item"] is None


def test_summary_has_cpu_per_item_over_the_iteration_window() -> None:
    s = _summarize()
    assert s.cpu_ms_per_item is not None and s.cpu_ms_per_item > 0
    assert s.faults_per_item is None and s.kernel_cpu_share is None  # these samples record neither


def test_a_later_generation_of_spawn_workers_grows_from_its_own_warm_not_its_start_up() -> None:
    """Workers recreated every epoch under spawn: the second generation is a worker (its role)
    while it still unpickles its dataset, read then at 101 MB of the 152 it holds once loaded. Its
    window starts at its generation's warm (every worker has delivered a batch): +0, where from
    its first reading it was +51 MB, over a 50 MB threshold, in a job that grew nothing."""
    rows = [
        _row(0.5, 10, "main", -1, "pss", rss=300, pss=200, uss=150),
        _row(20.0, 10, "main", -1, "pss", rss=300, pss=200, uss=150),
    ]
    for pid, worker in ((11, 0), (12, 1)):  # first generation: loaded by the window's start
        rows += [
            _row(t, pid, f"worker {worker}", worker, "pss", rss=160, pss=155, uss=152) for t in (2.0, 9.0)
        ]
    for pid, worker in ((13, 0), (14, 1)):  # second generation, started at 10 s, warm at 12.5 s
        rows.append(_row(11.0, pid, f"worker {worker}", worker, "pss", rss=110, pss=105, uss=101))
        rows += [
            _row(t, pid, f"worker {worker}", worker, "pss", rss=160, pss=155, uss=152) for t in (12.5, 19.0)
        ]
    samples = pd.DataFrame(rows)
    before = per_process_growth(samples, 2.0, 20.0)
    assert before.set_index("pid").loc[[13, 14], "growth_mb"].tolist() == [51.0, 51.0]  # the bug
    growth = per_process_growth(samples, 2.0, 20.0, [12.5]).set_index("pid")
    assert growth.loc[[11, 12, 13, 14], "growth_mb"].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert growth.loc[13, "uss_start_mb"] == 152.0
    meta = _meta(mode="spawn", milestones={"warm": 2.0, "done": 20.0})
    summary = summarize(meta | {"epoch_warms": [12.5]}, samples, _progress(), pd.DataFrame())
    assert summary.worker_uss_growth_max_mb == 0.0 and summary.verdict == "flat"
    # An older meta knows only the first later generation's warm, in its milestones.
    older = _meta(mode="spawn", milestones={"warm": 2.0, "epoch_warm": 12.5, "done": 20.0})
    assert summarize(older, samples, _progress(), pd.DataFrame()).worker_uss_growth_max_mb == 0.0


@pytest.mark.parametrize(
    "anon_rise, causes",
    [
        (0.5, ["copy-on-access"]),  # anonymous RSS flat: pages copied, nothing allocated
        (80.0, ["workers-allocate"]),  # it rose as much as USS did: memory of their own
        (25.0, ["copy-on-access", "workers-allocate"]),  # a fair part of each
    ],
)
def test_a_fork_run_s_growth_is_told_copied_or_allocated_by_the_workers_anonymous_rss(
    anon_rise: float, causes: list[str]
) -> None:
    """A scenario run's workers' anonymous RSS at the window's ends tells what they allocated
    from what they copied, so a guard's message names only the cause the run shows (before: both,
    "copied or allocated, not told apart", and a pure copy got "lru_cache" advice)."""
    from memprobe.core import cures

    samples = _samples()
    workers = samples["worker"] >= 0
    samples.loc[workers, "rss_anon_mb"] = 250.0
    late = workers & (samples["t"] >= 3.0)
    samples.loc[late, "rss_anon_mb"] = 250.0 + anon_rise
    s = summarize(_meta(threshold=50.0), samples, _progress(), pd.DataFrame())
    assert s.verdict == "growing" and s.worker_allocated_mb == pytest.approx(anon_rise)
    assert cures.scenario_causes(s) == causes and not cures.is_unsplit(s)
    assert cures.grown_causes(s) == causes
    # Results without anonymous RSS (an older folder): both, said to be untold apart.
    old = summarize(_meta(threshold=50.0), _samples(), _progress(), pd.DataFrame())
    assert old.worker_allocated_mb is None and cures.is_unsplit(old)
    assert cures.scenario_causes(old) == ["copy-on-access", "workers-allocate"]
