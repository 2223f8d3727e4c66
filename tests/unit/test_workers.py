"""How many workers (memprobe/analysis/workers.py): groups of repeated runs as medians with their
spread, the worker-count curves, and the answer in words on made-up runs whose answer is known;
the page's chart and table (memprobe/report/workers.py) and the terminal's only format them."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from memprobe.analysis.workers import sweep, sweep_of
from memprobe.cli.console import workers_table
from memprobe.core.summary import RunSummary
from memprobe.report.workers import chart_workers, group_rows
from memprobe.results.folder import ResultsFolder

BASE = RunSummary(
    run_id="",
    backend="ds",
    mode="fork",
    workers=1,
    status="ok",
    error=None,
    items=6400,
    items_per_s=None,
    time_to_first_batch_s=0.1,
    duration_s=5.0,
    total_pss_start_mb=None,
    total_pss_peak_mb=None,
    total_pss_end_mb=None,
    sum_rss_peak_mb=None,
    rss_overcount_mb=None,
    worker_uss_start_mb=None,
    worker_uss_growth_mb=None,
    worker_uss_growth_max_mb=None,
    main_uss_growth_mb=None,
    growth_per_1k_items_per_worker_mb=None,
    growth_threshold_mb=50.0,
    verdict="flat",
    expectation=None,
    expectation_met=None,
    explanation="",
    sampler_cpu_share=None,
    batch_size=64,
)


def runs(rates: dict[int, list[float]], pss: dict[int, float], mode: str = "fork", backend: str = "ds"):
    """One run per listed rate (a repeat each), interleaved as a session runs them."""
    out = []
    for r in range(max(len(v) for v in rates.values())):
        for n, rs in rates.items():
            if r < len(rs):
                out.append(
                    replace(
                        BASE,
                        run_id=f"{backend}-{mode}-w{n}-r{r + 1}",
                        backend=backend,
                        mode="single" if n == 0 else mode,
                        workers=n,
                        items_per_s=rs[r],
                        time_per_100_batches_s=6400 / rs[r],
                        cpu_ms_per_item=1.0 + n * 0.1,
                        total_pss_peak_mb=pss[n] + r,
                    )
                )
    return out


PSS = {0: 300.0, 1: 600.0, 2: 900.0, 3: 1200.0, 4: 1500.0, 8: 2700.0}


def test_a_plateau_answers_the_fewest_workers_near_the_best_and_what_more_buy() -> None:
    """3 workers reach 97 % of the best (8): the answer is 3, and 8 buy 3 % more for +1,500 MB."""
    rates = {0: [100.0] * 3, 1: [110.0] * 3, 2: [200.0] * 3, 3: [291.0] * 3, 4: [295.0] * 3, 8: [300.0] * 3}
    (curve,) = sweep(runs(rates, PSS)).curves
    f = curve.frontier
    assert f is not None and f.chosen.workers == 3 and f.best.workers == 8
    assert f.sentence.startswith(
        "ds, fork: the fewest workers within 5 % of the best items/s: 3 (fork), 1,201 MB total PSS, 291 items/s; "
        "8 workers buy 3 % more for +1,500 MB total PSS"
    )


def test_a_monotone_rise_answers_the_largest_count() -> None:
    """Each count clearly faster than the one before: the answer is the largest, nothing beyond it."""
    rates = {0: [100.0], 1: [100.0], 2: [190.0], 4: [370.0], 8: [700.0]}
    (curve,) = sweep(runs(rates, PSS)).curves
    f = curve.frontier
    assert f is not None and f.chosen.workers == f.best.workers == 8 and f.beyond is None
    assert "the fewest workers within 5 % of the best items/s: 8 (fork)" in f.sentence
    assert "buy" not in f.sentence and "give" not in f.sentence


def test_a_limit_that_cuts_answers_among_the_counts_that_fit_and_marks_the_others() -> None:
    """With 2,000 MB, 8 workers (2,700 MB) would be best but do not fit: the answer is among 0-4."""
    rates = {0: [100.0], 1: [110.0], 2: [200.0], 4: [290.0], 8: [400.0]}
    s = sweep(runs(rates, PSS), 2000.0, "memprobe's memory cgroup's limit")
    (curve,) = s.curves
    f = curve.frontier
    assert f is not None and f.chosen.workers == 4 and f.best.workers == 4
    assert [p.fits for p in curve.points] == [True, True, True, True, False]
    assert f.sentence.endswith(
        "; 8 workers (2,700 MB) would not fit in memprobe's memory cgroup's limit (2,000 MB)"
    )
    chart = chart_workers("c", s)
    marked = [t for t in chart["data"] if t["name"] == "does not fit in the limit"]
    assert len(marked) == 1 and marked[0]["y"] == [2700.0] and marked[0]["text"] == ["does not fit"]
    assert chart["x"]["time"][chart["data"].index(marked[0])] == [8.0]
    assert any(t["name"].startswith("memory limit") and t["y"] == [2000.0, 2000.0] for t in chart["data"])
    assert [r["fits"] for r in group_rows(s)] == ["yes", "yes", "yes", "yes", "no"]


def test_a_plateau_from_one_worker_says_what_more_workers_give_and_the_ceiling_on_the_cores() -> None:
    """On 2 cores, 2 and 4 workers give no more than 1 (a loader bound by its main process)."""
    rates = {0: [100.0], 1: [200.0], 2: [195.0], 4: [190.0]}
    (curve,) = sweep(runs(rates, PSS), cores=2).curves
    f = curve.frontier
    assert f is not None and f.chosen.workers == 1
    assert "; 4 workers give 5 % less for +900 MB total PSS" in f.sentence
    assert f.sentence.endswith("; the ceiling on 2 cores is 2 x one worker's 200 = 400 items/s")


def test_threads_and_another_dataset_move_the_answer() -> None:
    fork = runs({0: [100.0], 1: [110.0], 2: [200.0], 4: [290.0]}, PSS)
    thread = runs({1: [105.0], 2: [150.0], 4: [160.0]}, {1: 320.0, 2: 340.0, 4: 380.0}, mode="thread")
    heavy = runs({0: [20.0], 1: [21.0], 2: [40.0], 4: [41.0]}, PSS, backend="heavy")
    s = sweep(fork + thread + heavy)
    assert s.moves == (
        "thread against fork (ds): the answer stays at 4 workers, -1,120 MB total PSS, 0.55x the items/s",
        "heavy against ds (fork): the answer moves from 4 to 2 workers, -600 MB total PSS, 0.14x the items/s",
    )


def test_the_medians_and_spreads_are_those_of_the_runs(tmp_path: Path) -> None:
    """summary.json's ``repeats``: each group's median, std and range are its runs' own."""
    rates = {0: [100.0, 90.0, 120.0], 2: [200.0, 230.0, 180.0]}
    summaries = runs(rates, PSS)
    folder = ResultsFolder.create(
        tmp_path / "out",
        kind="scenario",
        name="s",
        description="",
        environment={"mem_total_mb": 24000},
        writer={},
        runs=[s.run_id for s in summaries],
    )
    folder.write_summary(summaries, sweep_of({"environment": {"mem_total_mb": 24000}}, summaries).to_dict())
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    by_id = {r["run_id"]: r for r in doc["runs"]}
    for group in doc["repeats"]:
        mine = [by_id[i] for i in group["run_ids"]]
        assert len(mine) == group["runs"] == 3
        for figure in ("items_per_s", "time_per_100_batches_s", "total_pss_peak_mb"):
            values = [r[figure] for r in mine]
            got = group[figure]
            assert got["median"] == pytest.approx(statistics.median(values), abs=1e-3)
            assert got["std"] == pytest.approx(statistics.stdev(values), abs=1e-3)
            assert (got["min"], got["max"]) == pytest.approx(
                (min(values), max(values)), abs=1e-3
            )  # runs: 3 decimals
    (curve,) = doc["workers"]["curves"]
    assert curve["workers"] == [0, 2] and doc["workers"]["limit_mb"] == 24000.0


def test_the_chart_carries_both_error_bars_and_the_terminal_the_same_figures() -> None:
    rates = {0: [100.0, 90.0, 120.0], 2: [200.0, 230.0, 180.0]}
    s = sweep(runs(rates, PSS))
    chart = chart_workers("c", s)
    rate = [t for t in chart["data"] if t.get("yaxis") == "y2"]
    main, pale = rate
    assert main["y"] == [100.0, 200.0] and main["error_y"]["array"] == pytest.approx(
        [statistics.stdev([100, 90, 120]), statistics.stdev([200, 230, 180])], rel=1e-3
    )
    assert pale["error_y"]["arrayminus"] == [10.0, 20.0] and pale["error_y"]["array"] == [20.0, 30.0]
    text = workers_table(s)
    assert "200 ± 25 (180-230)" in text and "how many workers:" in text
    assert workers_table(sweep(runs({2: [200.0]}, PSS))) == ""  # one run, one count: nothing to add


def test_a_repeated_configurations_matrix_cell_says_it_shows_one_run_of_several() -> None:
    from memprobe.report.content import matrices

    summaries = runs({0: [100.0, 90.0, 120.0], 2: [200.0, 230.0, 180.0]}, PSS)
    cells = [
        c
        for m in matrices(summaries, {s.run_id: s.run_id for s in summaries})
        for _, row in m.rows
        for c in row
    ]
    assert [(c.summary.run_id, c.runs) for c in cells] == [
        ("ds-fork-w0-r1", 3),
        ("ds-fork-w2-r1", 3),
    ]  # (the made-up ids name fork)


def test_the_bars_of_repeated_runs_stand_at_their_medians() -> None:
    """A bar per configuration, at the median of its runs (before: the last run's, silently)."""
    from memprobe.report.render import bar_charts

    summaries = runs({0: [100.0, 90.0, 120.0], 2: [200.0, 230.0, 180.0]}, PSS)
    rate = bar_charts(summaries, sweep(summaries))[0]
    assert sorted(y for trace in rate["data"] for y in trace["y"]) == [100.0, 200.0]
    assert {c for trace in rate["data"] for c in trace["customdata"]} == {"median of 3 runs"}


def test_a_configuration_whose_first_run_failed_keeps_its_place() -> None:
    summaries = runs({0: [100.0, 90.0], 2: [200.0, 230.0]}, PSS)
    summaries[0] = replace(summaries[0], status="timeout")  # ds-w0's round 1
    assert [(g.workers, len(g.run_ids)) for g in sweep(summaries).groups] == [(0, 1), (2, 2)]
