"""How each (mode, backend) scales with its worker count (memprobe.core.scaling): the figures
summary.json's ``scaling`` holds, the report's scaling chart, and the rule of the report's sentence
on reference-count contention under a free-threaded build, on both sides."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from memprobe.core.scaling import POOR, contention_note, scaling, scaling_dicts
from memprobe.core.summary import RunSummary
from memprobe.probe.procfs import process_identity
from memprobe.report.across import chart_scaling
from memprobe.results import folder as results


def run(backend: str, mode: str, workers: int, rate: float, cpu: float | None = None, **kw) -> RunSummary:
    """An ok run's summary with what scaling reads; the memory figures do not matter here."""
    fields = dict.fromkeys(f.name for f in dataclasses.fields(RunSummary) if f.default is dataclasses.MISSING)
    fields.update(
        run_id=f"{backend}-{mode}-w{workers}",
        backend=backend,
        mode=mode,
        workers=workers,
        status="ok",
        items=1000,
        items_per_s=rate,
        duration_s=1.0,
        growth_threshold_mb=50.0,
        explanation="",
        cpu_ms_per_item=cpu,
    )
    fields.update(kw)
    return RunSummary(**fields)


def test_efficiency_is_the_rate_at_n_over_n_times_the_rate_at_1() -> None:
    (g,) = scaling([run("list", "thread", 1, 1000.0, 0.010), run("list", "thread", 2, 1500.0, 0.013)])
    assert (g.mode, g.backend) == ("thread", "list")
    assert [p.workers for p in g.points] == [1, 2]
    assert g.efficiency == pytest.approx(0.75)  # 1500 / (2 x 1000)
    assert g.points[0].efficiency == pytest.approx(1.0)
    assert g.cpu_ratio() == pytest.approx(1.3)


def test_groups_per_mode_and_backend_and_skips_what_cannot_scale() -> None:
    runs = [
        run("list", "fork", 1, 800.0),
        run("list", "fork", 4, 2400.0),
        run("arrow", "fork", 2, 900.0),  # one worker count only: no scaling to state
        run("numpy", "thread", 1, 500.0),
        run("numpy", "thread", 2, 0.0, status="failed"),  # a failed run is not a point
        run("list", "single", 0, 700.0),
    ]
    (g,) = scaling(runs)
    assert (g.mode, g.backend, g.efficiency) == ("fork", "list", pytest.approx(0.75))


def test_smallest_count_other_than_one_is_the_base() -> None:
    (g,) = scaling([run("list", "fork", 2, 1000.0), run("list", "fork", 4, 1600.0)])
    assert g.efficiency == pytest.approx((1600 / 4) / (1000 / 2))


def test_summary_json_has_the_scaling_per_mode_and_backend(tmp_path: Path) -> None:
    folder = results.ResultsFolder.create(
        tmp_path / "s",
        kind="scenario",
        name="n",
        description="d",
        environment={"cpu_count": 2},
        runs=["a", "b"],
        writer=process_identity(os.getpid()),
    )
    runs = [
        run("list", "thread", 1, 1000.0, 0.010, gil_enabled=False),
        run("list", "thread", 2, 1200.0, 0.016, gil_enabled=False),
    ]
    folder.write_summary(runs)
    (g,) = json.loads((tmp_path / "s" / "summary.json").read_text())["scaling"]
    assert g["mode"] == "thread" and g["backend"] == "list" and g["gil_enabled"] is False
    assert g["efficiency"] == pytest.approx(0.6) and g["base_workers"] == 1 and g["max_workers"] == 2
    assert [(p["workers"], p["items_per_s"], p["cpu_ms_per_item"]) for p in g["points"]] == [
        (1, 1000.0, 0.010),
        (2, 1200.0, 0.016),
    ]
    assert g["points"][1]["run_ids"] == ["list-thread-w2"]
    assert scaling_dicts(runs) == [g]


def test_chart_has_a_line_per_mode_and_backend_in_distinct_colours() -> None:
    runs = [
        run(b, m, n, 1000.0 * n**0.5, 0.01)
        for b in ("list", "numpy", "arrow", "pillow")
        for m in ("thread", "fork", "spawn")
        for n in (1, 2)
    ]
    chart = chart_scaling("c-scaling", scaling(runs))
    assert chart is not None and chart["kind"] == "scaling"
    rate = [t for t in chart["data"] if t.get("yaxis") != "y2"]
    eff = [t for t in chart["data"] if t.get("yaxis") == "y2"]
    assert [t["name"] for t in rate[:4]] == ["thread · list", "fork · list", "spawn · list", "thread · numpy"]
    assert len({t["line"]["color"] for t in rate}) == 12  # the two panels' lines of one run share it
    assert [t["line"]["color"] for t in eff] == [t["line"]["color"] for t in rate]
    assert [t["y"] for t in eff] == [[1.0, pytest.approx(0.707, abs=1e-3)]] * 12
    assert chart["x"]["time"] == [[1, 2]] * 24
    assert chart["layouts"]["time"]["yaxis"].get("type") != "log"
    assert chart_scaling("c-scaling", []) is None


def test_chart_rates_on_a_log_axis_when_they_span_more_than_20x() -> None:
    """Pillow's tens of images/s next to a list's 100,000 items/s: a linear axis flattens one."""
    runs = [run("list", "thread", n, 50_000.0 * n) for n in (1, 2)] + [
        run("pillow", "thread", n, 30.0 * n) for n in (1, 2)
    ]
    chart = chart_scaling("c-scaling", scaling(runs))
    assert chart is not None and chart["layouts"]["time"]["yaxis"]["type"] == "log"


def free(backend: str, e: float, cpu_rise: float = 1.0, mode: str = "thread", gil: bool | None = False):
    """Two runs of ``backend``: 1 and 2 workers, efficiency ``e``, CPU per item x ``cpu_rise``."""
    return [
        run(backend, mode, 1, 1000.0, 0.010, gil_enabled=gil),
        run(backend, mode, 2, 2000.0 * e, 0.010 * cpu_rise, gil_enabled=gil),
    ]


def test_contention_note_when_objects_scale_poorly_and_buffers_do_not() -> None:
    note = contention_note(scaling(free("list", 0.55, 1.6) + free("arrow", 0.9, 1.05)))
    assert note is not None
    assert "thread workers scale poorly on the list dataset" in note
    assert "GIL disabled" in note and "efficiency 0.55" in note and "efficiency 0.90" in note
    assert "(1.60x)" in note  # its CPU per item rising
    assert "reference count" in note and "forked workers copy" in note
    assert "numpy arrays, an Arrow table" in note and "memprobe.SharedList" in note


@pytest.mark.parametrize(
    "runs",
    [
        pytest.param(free("list", 0.55, gil=True) + free("arrow", 0.9, gil=True), id="gil-enabled"),
        pytest.param(free("list", 0.55, gil=None) + free("arrow", 0.9, gil=None), id="gil-unknown"),
        pytest.param(free("list", POOR) + free("arrow", 0.9), id="list-scales"),
        pytest.param(free("list", 0.55) + free("arrow", 0.6), id="buffers-scale-poorly-too"),
        pytest.param(free("list", 0.55), id="no-buffer-backend"),
        pytest.param(free("list", 0.55, mode="fork") + free("arrow", 0.9, mode="fork"), id="processes"),
        pytest.param(free("list", 0.55) + free("arrow", 0.9, mode="torchdata-thread"), id="other-mode"),
        # Measured on the free-threaded build, 10 epochs (docs/perf/threads.md): the two sides of
        # POOR by noise, the CPU per item rising alike: not contention.
        pytest.param(free("list", 0.74, 1.11) + free("arrow", 0.77, 1.10), id="a-hair-apart"),
        pytest.param(free("list", 0.55, 1.3) + free("arrow", 0.9, 1.25), id="cpu-rose-alike"),
    ],
)
def test_no_contention_note(runs: list[RunSummary]) -> None:
    assert contention_note(scaling(runs)) is None
