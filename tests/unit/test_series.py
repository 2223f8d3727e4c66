"""The numbers of a run's summary and the lines of its charts come from the same series: where a
process could not be read, the chart beside a figure shows the figure."""

from __future__ import annotations

import pandas as pd
import pytest
from treejobs import proc_rows

from memprobe.analysis.scenario import summarize
from memprobe.core import series
from memprobe.core.summary import window_bounds
from memprobe.report import figures

MAIN, W0 = 1, 2
UNREADABLE = "smaps_rollup unreadable (process exiting?)"


def _row(t, pid, tier, rss, pss=None, uss=None, missing=False, reason=None, cpu=0.0):
    role, worker = ("main", -1) if pid == MAIN else ("worker 0", 0)
    return {
        "t": t,
        "pid": pid,
        "role": role,
        "worker": worker,
        "tier": tier,
        "missing": missing,
        "reason": reason,
        "rss_mb": rss,
        "pss_mb": pss,
        "uss_mb": uss,
        "cpu_s": None if missing else cpu,
    }


def _samples(*, warm_read_fails: bool = False) -> pd.DataFrame:
    """PSS rounds at 1.0 (warm), 2.0 and 3.0 (done), cheap ticks at 1.5 and 2.5. At 2.0 the worker's
    PSS could not be read while the main process's PSS peaked; at 2.5 the worker could not be read
    at all while the main process's RSS peaked: counting the worker as zero would make both ticks
    the peak."""
    warm_worker = (
        _row(1.0, W0, "cheap", 120.0, reason=UNREADABLE, cpu=1.0)
        if warm_read_fails
        else _row(1.0, W0, "pss", 120.0, pss=50.0, uss=30.0, cpu=1.0)
    )
    rows = [
        _row(1.0, MAIN, "pss", 150.0, pss=100.0, uss=80.0, cpu=1.0),
        warm_worker,
        _row(1.5, MAIN, "cheap", 160.0, cpu=1.5),
        _row(1.5, W0, "cheap", 125.0, cpu=1.5),
        _row(2.0, MAIN, "pss", 350.0, pss=300.0, uss=280.0, cpu=2.0),
        _row(2.0, W0, "cheap", 130.0, reason=UNREADABLE, cpu=2.0),
        _row(2.5, MAIN, "cheap", 900.0, cpu=2.5),
        _row(2.5, W0, "gone", None, missing=True, reason="permission denied"),
        _row(3.0, MAIN, "pss", 170.0, pss=120.0, uss=100.0, cpu=3.0),
        _row(3.0, W0, "pss", 140.0, pss=60.0, uss=40.0, cpu=3.0),
    ]
    return pd.DataFrame(rows)


PROGRESS = pd.DataFrame(
    {"t": [0.9, 2.0, 2.9], "items": [100, 500, 1000], "batches": [1, 5, 10], "epoch": [0, 0, 0]}
)
MILESTONES = {"iter_start": 0.8, "first_batch": 0.9, "warm": 0.95, "done": 2.95}


def _meta() -> dict:
    spec = {
        "backend": "list",
        "mode": "fork",
        "workers": 1,
        "verdict": {"growth_threshold_mb": 50.0},
        "expect": None,
    }
    return {
        "run_id": "list-fork-w1",
        "status": "ok",
        "items": 1000,
        "milestones": MILESTONES,
        "elapsed_s": 4.0,
        "spec": spec,
    }


def _plotted(samples: pd.DataFrame) -> dict[str, dict[float, float | None]]:
    """The lines of the report's 'Sum of RSS next to total PSS' chart: name -> {seconds: value}."""
    window = window_bounds(samples, MILESTONES)
    chart = figures.chart_rss_vs_pss(
        "c",
        samples,
        series.pss_by_role(samples),
        series.Clock.from_progress(PROGRESS),
        figures.Milestones(MILESTONES, window),
        max_points=100,
    )
    assert chart is not None
    return {
        trace["name"]: dict(zip(xs, trace["y"], strict=True))
        for trace, xs in zip(chart["data"], chart["x"]["time"], strict=True)
    }


def _peak(line: dict[float, float | None]) -> float:
    return max(v for v in line.values() if v is not None)


def test_peaks_beside_the_chart_are_the_peaks_it_draws() -> None:
    samples = _samples()
    s = summarize(_meta(), samples, PROGRESS, pd.DataFrame())
    lines = _plotted(samples)
    assert s.total_pss_peak_mb == pytest.approx(
        _peak(lines["total PSS"])
    )  # 180 at 3.0, not main alone at 2.0
    assert s.sum_rss_peak_mb == pytest.approx(_peak(lines["sum of RSS"]))  # 480 at 2.0, not main alone at 2.5
    assert lines["total PSS"][2.0] is None and lines["sum of RSS"][2.5] is None
    assert s.rss_overcount_mb == pytest.approx(480.0 - 180.0)


def test_window_totals_are_the_chart_at_the_window_ticks() -> None:
    samples = _samples()
    s = summarize(_meta(), samples, PROGRESS, pd.DataFrame())
    start, end = window_bounds(samples, MILESTONES)
    total = _plotted(samples)["total PSS"]
    assert (start, end) == (1.0, 3.0)
    assert (s.total_pss_start_mb, s.total_pss_end_mb) == (total[start], total[end]) == (150.0, 180.0)


def test_a_total_that_could_not_be_taken_is_unknown_beside_the_chart_too() -> None:
    samples = _samples(warm_read_fails=True)
    s = summarize(_meta(), samples, PROGRESS, pd.DataFrame())
    start, _ = window_bounds(samples, MILESTONES)
    assert _plotted(samples)["total PSS"][start] is None
    assert s.total_pss_start_mb is None  # not the main process's 100 MB alone


def test_cores_used_is_the_mean_of_the_cpu_charts_total() -> None:
    samples = _samples().assign(cpu_s=lambda d: d["cpu_s"] * 0.5)
    s = summarize(_meta(), samples, PROGRESS, pd.DataFrame())
    mids, bands = series.cpu_bands(series.process_counters(samples), min_dt=0.5)
    total = sum(bands.values())
    inside = (mids > 1.0) & (mids < 3.0)
    assert s.cpu_cores_used == pytest.approx(float(total[inside].mean())) == pytest.approx(1.0)


def test_cores_used_is_unknown_where_the_chart_is() -> None:
    """The worker could not be read from 2.5 until it ended at 3.5: what it used in the window's
    last half second is unknown, so is the tree's total (not the main process's alone)."""
    rows = _samples().to_dict("records")
    rows = [r for r in rows if not (r["pid"] == W0 and r["t"] == 3.0)]
    rows += [_row(3.0, W0, "gone", None, missing=True, reason="permission denied")]
    rows += [_row(3.5, W0, "gone", None, missing=True, reason="exited")]
    samples = pd.DataFrame(rows)
    mids, bands = series.cpu_bands(series.process_counters(samples), min_dt=0.5)
    assert pd.isna(bands["worker 0"][mids > 2.5]).all()
    assert summarize(_meta(), samples, PROGRESS, pd.DataFrame()).cpu_cores_used is None


def test_a_process_memprobe_may_not_read_is_left_out_of_total_pss_not_a_gap() -> None:
    """A process whose memory map the kernel refuses (another user's) stays unreadable: as a gap at
    each round it was tried, it made total PSS unknown for the whole run. It is left out, at
    every round alike; a read that failed for another reason is still a gap."""
    denied = "smaps_rollup: permission denied: another user's process (uid 1234); memprobe runs as uid 1000"
    rows = [r for r in _samples().to_dict("records") if r["pid"] == MAIN or r["t"] in (1.5, 2.5)]
    rows = [r for r in rows if not (r["pid"] == W0 and r["t"] == 2.5)]
    for t in (1.0, 2.0, 3.0):
        rows.append(_row(t, W0, "cheap", 120.0, reason=denied, cpu=t))
    samples = pd.DataFrame(rows)
    main = samples[(samples["pid"] == MAIN) & (samples["tier"] == "pss")].set_index("t")["pss_mb"]
    assert series.total_pss(samples).to_dict() == main.to_dict() == {1.0: 100.0, 2.0: 300.0, 3.0: 120.0}
    assert summarize(_meta(), samples, PROGRESS, pd.DataFrame()).total_pss_peak_mb == 300.0
    gap = samples.assign(reason=samples["reason"].replace(denied, UNREADABLE))
    assert series.total_pss(gap).isna().all()


def test_a_recorded_job_s_total_counts_every_process_between_its_exact_readings() -> None:
    """A main process read as it started (2 MB), which then filled 100 MB and forked children
    none of which was read exactly (a 200-child tree at the 1 % budget): the total, taken at
    exact readings only, said 7 MB for the whole run. Between readings it is taken at cheap ticks,
    main held at its reading plus the anonymous memory it allocated since, each child by its
    estimated USS (their parent's reading is from before their fork: it holds what they share)."""
    main = proc_rows(
        1,
        "main",
        -1,
        [(0.0, "pss", 2, 7, 2), (1.0, "cheap", None, 107, 102, 102), (2.0, "cheap", None, 107, 102, 2)],
        kind="main",
        anon_is_faults=True,
    )
    kids = []
    for pid in (11, 12, 13):
        kids += proc_rows(
            pid, f"worker {pid - 11}", pid - 11, [(2.0, "cheap", None, 105, 0.6, 0.5)], kind="fork"
        )
    samples = pd.DataFrame(main + kids).assign(
        ppid=lambda d: d["pid"].map({1: None, 11: 1, 12: 1, 13: 1}),
        start_t=lambda d: d["pid"].map({1: 0.0, 11: 1.5, 12: 1.5, 13: 1.5}),
    )
    total = series.total_pss(samples)
    assert list(total.index) == [0.0, 1.0, 2.0]
    assert total.loc[0.0] == pytest.approx(7)  # its reading (PSS = USS + 5 here)
    assert total.loc[1.0] == pytest.approx(7 + 100)  # + the 100 MB of anonymous memory it filled
    assert total.loc[2.0] == pytest.approx(7 + 100 + 3 * 0.5)
    # Nothing before the first exact reading, and no tick of ended processes only.
    gone = pd.DataFrame([{**main[0], "t": 3.0, "tier": "cheap", "missing": True, "reason": "exited"}])
    assert list(series.total_pss(pd.concat([samples, gone], ignore_index=True)).index) == [0.0, 1.0, 2.0]
