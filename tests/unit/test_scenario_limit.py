"""The scenario report against the memory its runs had to fit in: memprobe's memory cgroup's
limit where below the machine's memory, else the machine's; drawn on the total memory charts
and each configuration of the matrix marked as fitting or not."""

from __future__ import annotations

import pandas as pd

from memprobe.core import series
from memprobe.core.system import run_limit
from memprobe.report import across, content, figures

ROWS = [
    {
        "t": t,
        "pid": 1,
        "role": "main",
        "worker": -1,
        "tier": "pss",
        "missing": False,
        "reason": None,
        "rss_mb": r,
        "pss_mb": p,
        "uss_mb": p,
        "cpu_s": t,
    }
    for t, r, p in ((1.0, 400.0, 300.0), (2.0, 700.0, 600.0), (3.0, 750.0, 650.0))
]
PROGRESS = pd.DataFrame({"t": [0.5, 3.0], "items": [0, 1000], "batches": [0, 10], "epoch": [0, 0]})


def test_the_limit_is_memprobes_cgroup_where_below_the_machines_memory() -> None:
    env = {"mem_total_mb": 24_000, "cgroup_limit_mb": 900}
    assert run_limit({"environment": env}) == (900.0, "memprobe's memory cgroup's limit")
    assert run_limit({"environment": {**env, "cgroup_limit_mb": None}}) == (24_000.0, "this machine's memory")
    assert run_limit({"environment": {**env, "cgroup_limit_mb": 30_000}})[1] == "this machine's memory"
    assert run_limit({}) == (None, "")  # an older folder knows neither


def test_each_configuration_is_marked_fitting_the_limit_or_not() -> None:
    limit = (900.0, "memprobe's memory cgroup's limit")
    assert content.fit_words(650.0, limit) == (
        True,
        "fits: 72% of the 900 MB limit (memprobe's memory cgroup's limit)",
    )
    assert content.fit_words(1_000.0, limit) == (
        False,
        "over the 900 MB limit (memprobe's memory cgroup's limit) by 100 MB",
    )
    assert content.fit_words(None, limit) is None and content.fit_words(650.0, (None, "")) is None


def _limit_line(chart: dict) -> list | None:
    return next((t["y"] for t in chart["data"] if t["name"] == "memory limit"), None)


def test_the_limit_is_drawn_on_the_total_memory_charts_where_the_runs_reach_a_quarter_of_it() -> None:
    samples = pd.DataFrame(ROWS)
    line = across.RunLine("list fork 2 workers", samples, PROGRESS, "#123456")
    drawn = across.chart_runs_pss(
        "c-all", "t", [line], limit_mb=900.0, limit_of="memprobe's memory cgroup's limit"
    )
    assert drawn is not None and _limit_line(drawn) == [900.0, 900.0]
    far = across.chart_runs_pss("c-all", "t", [line], limit_mb=24_000.0, limit_of="this machine's memory")
    assert far is not None and _limit_line(far) is None  # 650 MB against 24 GB: the runs' lines kept readable

    clock, milestones = series.Clock.from_progress(PROGRESS), figures.Milestones({}, None)
    chart = figures.chart_rss_vs_pss(
        "c0-rss", samples, series.pss_by_role(samples), clock, milestones, max_points=100, limit_mb=900.0
    )
    assert chart is not None and "memory limit" in [t["name"] for t in chart["data"]]
