"""The HTML report and the compare page from made-up data: figures (pure functions), words and
advice, run matching and deltas. Pages rendered from a real results folder are tested in
tests/integration/test_report_page.py."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memprobe.core import series
from memprobe.core.summary import RunSummary
from memprobe.pages import folder_page
from memprobe.report import advice, content, figures, lifelines, usage
from memprobe.report.chart import keep_indices
from memprobe.report.compare import METRICS, match
from memprobe.report.deltas import Delta, delta
from memprobe.results.folder import SCHEMA_VERSION


def chart_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="memprobe-data">(.*?)</script>', html, re.S)
    assert m, "no chart data in the page"
    return json.loads(m.group(1))


def summary(**changes: object) -> RunSummary:
    base = {
        "backend": "list",
        "mode": "fork",
        "workers": 2,
        "status": "ok",
        "error": None,
        "items": 1000,
        "items_per_s": 1000.0,
        "time_to_first_batch_s": 0.1,
        "duration_s": 5.0,
        "total_pss_start_mb": 300.0,
        "total_pss_peak_mb": 600.0,
        "total_pss_end_mb": 600.0,
        "sum_rss_peak_mb": 900.0,
        "rss_overcount_mb": 300.0,
        "worker_uss_start_mb": 20.0,
        "worker_uss_growth_mb": 120.0,
        "worker_uss_growth_max_mb": 125.0,
        "main_uss_growth_mb": 100.0,
        "growth_per_1k_items_per_worker_mb": 0.2,
        "growth_threshold_mb": 50.0,
        "verdict": "growing",
        "expectation": None,
        "expectation_met": None,
        "explanation": "",
        "sampler_cpu_share": 0.01,
    }
    base.update(changes)
    base.setdefault("run_id", f"{base['backend']}-{base['mode']}-w{base['workers']}")
    return RunSummary(**base)


# -- the page from real results --------------------------------------------------------------


def test_session_interrupted_before_any_run(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "scenario": "nothing",
                "status": "interrupted",
                "runs": ["a"],
                "started": 1.0,
                "finished": 2.0,
                "environment": {},
            }
        )
    )
    html = folder_page(root).read_text(encoding="utf-8")
    assert "This session was interrupted: 0 of 1 runs have results" in html
    assert "No runs in this results folder." in html and chart_data(html) == {"charts": []}


def sample_rows(rows: list[tuple]) -> pd.DataFrame:
    cols = ["t", "pid", "role", "worker", "tier", "missing", "reason", "rss_mb", "pss_mb", "uss_mb"]
    return pd.DataFrame(rows, columns=cols)


def test_unreadable_samples_are_gaps_not_zeros() -> None:
    samples = sample_rows(
        [
            (0.0, 1, "main", -1, "pss", False, None, 100.0, 80.0, 60.0),
            (0.0, 2, "worker 0", 0, "pss", False, None, 90.0, 40.0, 20.0),
            (1.0, 1, "main", -1, "pss", False, None, 100.0, 80.0, 60.0),
            (
                1.0,
                2,
                "worker 0",
                0,
                "cheap",
                False,
                "smaps_rollup unreadable (process exiting?)",
                90.0,
                None,
                None,
            ),
            (1.5, 1, "main", -1, "cheap", False, None, 100.0, None, None),
            (1.5, 2, "worker 0", 0, "gone", True, "permission denied", None, None, None),
            (2.0, 1, "main", -1, "pss", False, None, 100.0, 80.0, 60.0),
            (2.0, 2, "worker 0", 0, "gone", True, "exited", None, None, None),
        ]
    )
    total = series.total_pss(samples)
    assert total[0.0] == 120.0 and np.isnan(total[1.0]) and total[2.0] == 80.0  # exited: really gone
    rss = series.sum_rss(samples)
    assert rss[0.0] == 190.0 and np.isnan(rss[1.5]) and rss[2.0] == 100.0
    chart = lifelines.chart_uss(
        "u", samples, series.Clock.from_progress(pd.DataFrame()), figures.Milestones({}), max_points=100
    )
    worker = next(t for t in chart["data"] if t["name"] == "worker 0")
    assert worker["y"][0] == 20.0 and None in worker["y"] and 0.0 not in worker["y"]
    stacked = figures.chart_pss_by_role(
        "p",
        series.pss_by_role(samples),
        series.Clock.from_progress(pd.DataFrame()),
        figures.Milestones({}),
        max_points=100,
    )
    worker = next(t for t in stacked["data"] if t["name"] == "worker 0")
    assert worker["y"] == [40.0, None, 0.0] and worker["stackgaps"] == "interpolate"  # 0.0: it had exited


def test_keep_indices_keeps_peaks_and_gaps() -> None:
    y = np.ones(10_000)
    y[1234], y[5678] = 50.0, np.nan
    keep = keep_indices(y, 100)
    assert len(keep) <= 110 and 1234 in keep and np.isnan(y[keep]).any()
    assert keep[0] == 0 and keep[-1] == 9999
    assert list(keep_indices(y[:50], 100)) == list(range(50))


def test_clock_maps_seconds_to_items_fetched() -> None:
    clock = series.Clock.from_progress(pd.DataFrame({"t": [1.0, 2.0, 3.0], "items": [256, 512, 1024]}))
    assert list(clock.items_at([0.5, 1.0, 2.5, 9.0])) == [0, 256, 512, 1024]


def test_items_rate_ends_with_the_last_item_without_a_spike_or_a_drop() -> None:
    # 1,000 items/s for 10 s, then the last 10 items 5 ms later (a spike of 2,000 items/s if drawn
    # alone) and the loader's closing report with no new items (a drop to 0 if drawn).
    t = [*np.arange(0.0, 10.01, 0.5), 10.005, 10.006]
    items = [*(np.arange(0.0, 10.01, 0.5) * 1000), 10_010, 10_010]
    x, rate = series.item_rate(pd.DataFrame({"t": t, "items": items}), start=0.0)
    assert x[-1] == 10.005  # ends where the last item arrived
    assert rate.min() > 0 and rate.max() < 1_100, rate
    assert rate[-1] == pytest.approx(
        (10_010 - 9_500) / (10.005 - 9.5)
    )  # the short last step joined the one before


def process_rows(rows: list[tuple]) -> pd.DataFrame:
    cols = ["t", "pid", "role", "worker", "tier", "missing", "reason", "rss_mb", "rss_shmem_mb", "minflt"]
    return pd.DataFrame(rows, columns=cols)


def test_minor_faults_are_drawn_per_worker_with_gaps_and_ends() -> None:
    samples = process_rows(
        [
            (0.0, 1, "main", -1, "cheap", False, None, 100.0, 0.0, 5_000),
            (0.0, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 1_000),
            (0.1, 1, "main", -1, "cheap", False, None, 100.0, 0.0, 5_001),
            (0.1, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 30_000),
            (0.2, 2, "worker 0", 0, "gone", True, "permission denied", None, None, None),
            (0.3, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 60_000),
            (0.4, 2, "worker 0", 0, "gone", True, "exited", None, None, None),
        ]
    )
    clock = series.Clock.from_progress(pd.DataFrame())
    chart = usage.chart_faults("f", samples, clock, figures.Milestones({}), max_points=100)
    assert chart["title"] == "Minor page faults per worker (cumulative)"
    assert [t["name"] for t in chart["data"]] == ["worker 0"]  # main's faults would dwarf the workers'
    assert chart["data"][0]["y"] == [1_000, 30_000, None, 60_000]  # unreadable: a gap; exited: the line ends
    assert "newly allocates" in chart["note"]  # faults are not all copies, and the page says so
    single = usage.chart_faults(
        "f", samples[samples["pid"] == 1], clock, figures.Milestones({}), max_points=100
    )
    assert [t["name"] for t in single["data"]] == ["main"] and "One process" in single["note"]


def test_shared_memory_chart_needs_the_runs_own_shared_memory() -> None:
    quiet = process_rows(
        [(t, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 10) for t in (0.0, 0.1, 0.2)]
    )
    busy = quiet.assign(rss_shmem_mb=[0.0, 8.0, 16.0])
    # /dev/shm is the whole machine's: another program filled 48 MB of it during the run.
    system = pd.DataFrame({"t": [0.0, 0.1, 0.2], "dev_shm_mb": [0.0, 48.0, 0.0]})
    clock, milestones = series.Clock.from_progress(pd.DataFrame()), figures.Milestones({})
    assert usage.chart_dev_shm("s", quiet, system, clock, milestones, max_points=100) is None
    chart = usage.chart_dev_shm("s", busy, system, clock, milestones, max_points=100)
    machine, mapped = chart["data"]  # the run's own line is drawn on top
    assert mapped["y"] == [0.0, 8.0, 16.0] and "run's processes" in mapped["name"]
    assert machine["y"] == [0.0, 48.0, 0.0] and "whole machine" in machine["name"]


# -- content: words and advice ---------------------------------------------------------------


def test_advice_points_to_the_flat_run_that_demonstrates_each_fix() -> None:
    grow = summary()
    numpy = summary(backend="numpy", verdict="flat", worker_uss_growth_mb=1.0, total_pss_peak_mb=320.0)
    spawn = summary(mode="spawn", verdict="flat", worker_uss_growth_mb=0.1, total_pss_peak_mb=880.0)
    thread = summary(mode="thread", verdict="flat", main_uss_growth_mb=-1.0, total_pss_peak_mb=290.0)
    other_workers = summary(backend="arrow", workers=4, verdict="flat", total_pss_peak_mb=100.0)
    runs = [grow, numpy, spawn, thread, other_workers]
    anchors = {s.run_id: f"#{s.run_id}" for s in runs}
    (adv,) = advice.advice(runs, anchors)
    demos = [d.run.run_id for f in adv.fixes for d in f.demos]
    assert demos == ["list-thread-w2", "numpy-fork-w2", "list-spawn-w2"]  # cheapest first, caveats last
    assert adv.fixes[0].text.startswith("Use threads")
    assert "numpy arrays" in adv.fixes[1].text
    assert "higher than this run" in adv.fixes[2].demos[0].caveat
    # Every fix, tried here or not, is in what to do about the run's causes (test_advice.py).
    ((group, links),) = advice.cause_groups(runs, anchors)
    assert [a.cause for a in group.advice] == ["copy-on-access", "workers-allocate"]
    assert [s.run_id for s in group.runs] == ["list-fork-w2"] and links == ["#list-fork-w2"] and group.unsplit


def test_headline_sentences() -> None:
    meta = {"spec": {"loader": {"epochs": 1, "items": None}}}
    grow = content.headline(
        summary(workers=4, items=200_000, worker_uss_growth_mb=312.0, worker_uss_growth_max_mb=315.0), meta
    )
    assert grow.startswith(
        "list × fork (4 workers): each of 4 workers grew 312 MB over 1 epoch (200,000 items)"
    )
    assert "a private copy of the data" in grow
    flat = content.headline(summary(backend="arrow", verdict="flat", worker_uss_growth_mb=3.0), meta)
    assert flat.startswith("arrow × fork (2 workers): stayed flat (+3.0 MB per worker)")
    gc = content.headline(summary(backend="numpy", verdict="flat", worker_uss_growth_mb=36.0), meta)
    assert "one-off copy of the interpreter" in gc
    spawn = summary(mode="spawn", verdict="flat", worker_uss_growth_mb=0.1, worker_uss_start_mb=558.0)
    assert content.headline(spawn, meta).endswith(
        "but each worker held 558 MB of its own when iteration began; peak total PSS 600 MB."
    )
    assert content.upfront_copy(spawn) and not content.upfront_copy(dataclasses.replace(spawn, mode="fork"))
    failed = content.headline(summary(status="failed", verdict=None, error="ValueError: boom"), meta)
    assert "no verdict" in failed and "ValueError: boom" in failed


def test_matrix_axes_come_from_the_data() -> None:
    runs = [
        summary(backend="pillow", mode="thread", verdict="flat"),
        summary(backend="nvimgcodec", mode="fork"),
        summary(backend="pillow", mode="fork", workers=0, verdict="flat"),
    ]
    mats = content.matrices(runs, {s.run_id: s.run_id for s in runs})
    assert [m.workers for m in mats] == [0, 2]
    two = mats[1]
    assert two.modes == ["thread", "fork"] and [b for b, _ in two.rows] == ["pillow", "nvimgcodec"]
    assert two.rows[0][1][1].summary is None  # pillow x fork with 2 workers was not run
    assert "hsl(0" in two.rows[1][1][1].style  # growing: red
    far = content.cell_style(summary(worker_uss_growth_mb=5_000.0))
    assert int(re.search(r"(\d+)%\)", far).group(1)) >= 75  # deepest red still light enough for dark text


# -- compare -----------------------------------------------------------------------------------


def test_match_and_deltas() -> None:
    a = [summary(), summary(backend="numpy", verdict="flat"), summary(mode="spawn")]
    b = [
        summary(verdict="flat", worker_uss_growth_mb=2.0, total_pss_peak_mb=300.0),
        summary(backend="numpy", verdict="flat", total_pss_peak_mb=602.0),
        summary(mode="thread"),
    ]
    pairs, only_a, only_b = match(a, b)
    assert [p.key for p in pairs] == [("list", "fork", 2), ("numpy", "fork", 2)]
    assert [s.mode for s in only_a] == ["spawn"] and [s.mode for s in only_b] == ["thread"]
    assert pairs[0].verdict == "better" and pairs[1].verdict == "same"
    peak = {m.name: d for m, d in pairs[0].deltas}["peak total PSS"]
    assert (peak.tone, peak.diff) == ("better", -300.0)
    assert {m.name: d for m, d in pairs[1].deltas}["peak total PSS"].tone == "same"  # within noise
    growth = next(m for m in METRICS if m.name == "growth")
    shrank = delta(growth, summary(worker_uss_growth_mb=-19.0), summary(worker_uss_growth_mb=-3.6))
    assert shrank.tone == "same"  # less shrinking is not a worse growth
    assert (
        delta(growth, summary(worker_uss_growth_mb=-19.0), summary(worker_uss_growth_mb=60.0)).tone == "worse"
    )
    rate = next(m for m in METRICS if m.name == "items/s")
    assert delta(rate, summary(items_per_s=1000.0), summary(items_per_s=500.0)) == Delta(
        1000.0, 500.0, "worse"
    )


def test_throughput_bars_group_runs_by_backend_with_a_bar_per_mode_and_workers() -> None:
    from memprobe.report.render import bar_charts

    runs = [
        summary(
            run_id="pillow-fork-w2",
            backend="pillow",
            mode="fork",
            workers=2,
            items_per_s=300.0,
            workload="decode",
            decoder_backend="pillow",
            mb_per_s=18.0,
        ),
        summary(
            run_id="pillow-thread-w2",
            backend="pillow",
            mode="thread",
            workers=2,
            items_per_s=280.0,
            workload="decode",
            decoder_backend="pillow",
            mb_per_s=17.0,
        ),
        summary(
            run_id="nv-thread-w2",
            backend="nvimgcodec",
            mode="thread",
            workers=2,
            items_per_s=450.0,
            workload="decode",
            decoder_backend="nvimgcodec-cpu",
            mb_per_s=27.0,
        ),
        summary(
            run_id="nv-fork-w2",
            backend="nvimgcodec",
            mode="fork",
            workers=2,
            status="failed",
            items_per_s=None,
            workload="decode",
        ),
    ]
    rate, pss = bar_charts(runs)
    assert "images/s" in rate["title"]
    names = [t["name"] for t in rate["data"]]
    assert names == ["fork · 2w", "thread · 2w"]
    thread = rate["data"][1]
    assert rate["x"]["time"][1] == ["pillow", "nvimgcodec (CPU backend)"]  # the backend that ran is labelled
    assert thread["y"] == [280.0, 450.0]
    assert rate["x"]["time"][0] == ["pillow"]  # the failed run has no bar
    assert pss["kind"] == "bars"
