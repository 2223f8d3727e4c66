"""Each generation of workers on the record page (a DataLoader recreates its workers every epoch):
the chart of each generation's peak across epochs with the trend the forecast drew through them
and where it meets the limit, the generations in words (first, last, the peaks' trend), and the
"who grows" table with the generations between the first and the last folded into one row
(forty epochs of four workers made a table of 160 rows). The figures are the analysis's
(:mod:`memprobe.analysis.forecast`: the summary's ``memory_limit.forecast``); here they are drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from memprobe.core import forecast_words
from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import WORKER_KINDS
from memprobe.report import format as fmt
from memprobe.report.chart import Milestones, Series, build_chart, limit_line
from memprobe.report.record_tables import ProcessRow

X_TITLE = "worker generation (a DataLoader's workers are new every epoch)"
SHOWN_GENERATIONS = 3  # a parent with more: its first and last generation's rows, the rest folded
BEYOND_SHOWN = (
    3.0  # the trend is drawn to the limit where that is within this many times the generations seen
)


def the_forecast(s: RunSummary) -> dict | None:
    f = (s.memory_limit or {}).get("forecast")
    return f if isinstance(f, dict) else None


def peaks(f: dict) -> list[dict]:
    """The generations with a peak, in order."""
    return [g for g in f.get("generations") or [] if fmt.is_num(g.get("peak_mb"))]


def generations_chart(s: RunSummary) -> dict | None:
    """Each generation's peak (of total PSS, or of the charge where the cgroup held the job alone;
    filled: it ended; grey: missed between exact readings, left out of the line; hollow: still
    running as the record ended), its workers' mean own growth
    (right axis), the forecast's line through the peaks it fitted drawn on to the limit, and the
    limit in the peaks' terms (the last peak plus the room the charge left); None with fewer than
    two generations."""
    f = the_forecast(s)
    gens = peaks(f) if f else []
    if f is None or len(gens) < 2:
        return None
    x = np.array([g["generation"] + 1 for g in gens], float)
    charge = f.get("peaks_of") == "charge"  # the cgroup held the job alone (record.forecast.job_memory)
    peak = "peak charge less file cache" if charge else "peak total PSS"
    series = [_peak_series(gens, x, set(f.get("missed") or []), peak)]
    grown = [g for g in gens if fmt.is_num(g.get("growth_mb"))]
    if grown:
        series.append(_growth_series(grown))
    trend = _trend_series(f, x)
    if trend is not None:
        series.append(trend)
    # Drawn where the peaks reach a share of it (further down it would flatten them into the axis).
    limit = limit_line(
        f.get("limit_in_peaks_mb"),
        series[:1] + series[2:],
        name="the limit" if charge else "the limit, as total PSS",
        of="" if charge else "less the rest of the charge as at the last peak",
    )
    if limit is not None:
        series.append(limit)
    chart = build_chart(
        "epochs",
        "epochs",
        "Each generation of workers: the job's peak while it lived",
        series,
        None,
        f"{peak} (MB)",
        Milestones({}),
        max_points=4000,
        axes=("time",),
    )
    if chart is not None:
        _generations_layout(chart["layouts"]["time"], right_axis=bool(grown))
    return chart


def _peak_series(gens: list[dict], x: np.ndarray, missed: set[int], peak: str) -> Series:
    """Each generation's peak: filled where it ended, grey where missed (left out of the line),
    hollow where it still ran as the record ended."""
    ended = [bool(g["ended"]) for g in gens]
    colors = [
        "#adb5bd" if g["generation"] in missed else "#1f5fa8" if e else "#ffffff"
        for g, e in zip(gens, ended, strict=True)
    ]
    return Series(
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": peak,
            "line": {"color": "#1f5fa8", "width": 1.5},
            "marker": {"size": 7, "color": colors, "line": {"color": "#1f5fa8", "width": 1.5}},
            "hovertemplate": "generation %{x}: peak %{y:,.0f} MB<extra></extra>",
        },
        x,
        np.array([g["peak_mb"] for g in gens], float),
    )


def _growth_series(grown: list[dict]) -> Series:
    """Each generation's workers' mean own growth, on the right axis."""
    return Series(
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "each worker's own growth (mean)",
            "yaxis": "y2",
            "line": {"color": "#e8590c", "width": 1.5, "dash": "dot"},
            "marker": {"size": 5, "color": "#e8590c"},
            "hovertemplate": "generation %{x}: %{y:,.0f} MB each<extra></extra>",
        },
        np.array([g["generation"] + 1 for g in grown], float),
        np.array([g["growth_mb"] for g in grown], float),
    )


def _trend_series(f: dict, x: np.ndarray) -> Series | None:
    """The forecast's line through the peaks it fitted, drawn on to the generation it reaches
    the limit at (while that is within BEYOND_SHOWN of the generations shown); None without one."""
    slope, at_zero = f.get("per_generation_mb"), f.get("line_at_zero_mb")
    if not (fmt.is_num(slope) and fmt.is_num(at_zero) and f.get("fitted_from") is not None):
        return None
    first, last = int(f["fitted_from"]), x.max() - 1
    reach = f.get("generation_at_limit")
    if f.get("basis") and fmt.is_num(reach) and reach - 1 <= BEYOND_SHOWN * (last + 1):
        last = reach - 1
    xs = np.array([first, last], float)
    return Series(
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"trend {fmt.signed_mb(slope)} per generation",
            "line": {"color": "#495057", "width": 1.5, "dash": "dash"},
            "hovertemplate": "trend: %{y:,.0f} MB<extra></extra>",
        },
        xs + 1,
        at_zero + slope * xs,
    )


def _generations_layout(layout: dict, *, right_axis: bool) -> None:
    """The chart's axes and legend: generations on x, the workers' growth on a right axis."""
    layout["xaxis"]["title"]["text"] = X_TITLE
    layout["hovermode"] = "closest"
    layout["legend"].update(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom")
    layout["margin"].update(t=60, r=70)
    if right_axis:
        layout["yaxis2"] = {
            "title": {"text": "each worker's own growth (MB)"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
        }


def generations_text(s: RunSummary) -> str | None:
    """The generations in words: how many, each worker's growth in the first and the last that
    ended, the peaks of the first and the last that ended."""
    f = the_forecast(s)
    gens = peaks(f) if f else []
    if f is None or len(gens) < 2:
        return None
    first = gens[0]
    ended = [g for g in gens[1:] if g.get("ended")]
    last = ended[-1] if ended else gens[-1]  # the one the record (or a kill) cut short has no full peak
    which = "the last" if last is gens[-1] else "the last that ended"
    sizes = sorted({int(g["workers"]) for g in gens})
    each = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    growth = (
        f"; each worker grew {fmt.signed_mb(first['growth_mb'])} in the first, "
        f"{fmt.signed_mb(last['growth_mb'])} in {which}"
        if fmt.is_num(first.get("growth_mb")) and fmt.is_num(last.get("growth_mb"))
        else ""
    )
    running = "" if gens[-1].get("ended") else " (the last still running as the record ended)"
    return (
        f"{len(gens)} generations of {each} workers{running}{growth}; the job's "
        + ("charge" if f.get("peaks_of") == "charge" else "total PSS")
        + " peaked at "
        f"{fmt.mb(first['peak_mb'])} in the first and {fmt.mb(last['peak_mb'])} in {which}."
    )


def forecast_text(s: RunSummary) -> str | None:
    """The forecast in words (:func:`memprobe.core.forecast_words.words`)."""
    f = the_forecast(s)
    if f is None:
        return None
    return forecast_words.words(f, (s.memory_limit or {}).get("limit_mb"))


# -- the who-grows table, its generations folded ---------------------------------------------------


@dataclass(frozen=True)
class Folded:
    rows: list[ProcessRow]  # the table as shown
    folded: int  # processes folded into rows of generations (0: none; the full table is not repeated)


def fold_generations(rows: list[ProcessRow], processes: list[dict]) -> Folded:
    """``rows`` (one per process, in the order of ``processes``) with the workers of each parent's
    generations between its first and its last folded into one row, where the parent had more
    than :data:`SHOWN_GENERATIONS`."""
    by_parent: dict[object, set[int]] = {}
    for r in processes:
        if r["kind"] in WORKER_KINDS and r.get("generation") is not None:
            by_parent.setdefault(r.get("parent_pid"), set()).add(int(r["generation"]))
    many = {p: (min(g), max(g)) for p, g in by_parent.items() if len(g) > SHOWN_GENERATIONS}
    if not many:
        return Folded(rows, 0)
    out: list[ProcessRow] = []
    middle: dict[object, list[tuple[ProcessRow, dict]]] = {}
    for row, r in zip(rows, processes, strict=True):
        span = many.get(r.get("parent_pid")) if r["kind"] in WORKER_KINDS else None
        if span is None or r.get("generation") is None or r["generation"] in span:
            out.append(row)
            continue
        group = middle.setdefault(r.get("parent_pid"), [])
        if not group:
            out.append(row)  # its place: replaced below by the folded row
        group.append((row, r))
    folded = {id(g[0][0]): _folded_row(g) for g in middle.values()}
    return Folded([folded.get(id(row), row) for row in out], sum(len(g) for g in middle.values()))


def _folded_row(group: list[tuple[ProcessRow, dict]]) -> ProcessRow:
    """One row for the workers of a parent's middle generations: their count, the range of their
    own growth and rate, and the mean."""
    gens = sorted({int(r["generation"]) for _, r in group})
    growth = [float(r["growth_mb"]) for _, r in group if r.get("judged") and fmt.is_num(r.get("growth_mb"))]
    rates = [
        float(r["growth_mb_per_min"])
        for _, r in group
        if r.get("judged") and fmt.is_num(r.get("growth_mb_per_min"))
    ]
    tones = {row.tone for row, _ in group}
    first = group[0][0]
    role = first.role.split(" · gen ")[0].rsplit(" ", 1)[0]  # "worker 0 · gen 2" -> "worker"
    return replace(
        first,
        role=f"{role}s · gen {gens[0] + 1}-{gens[-1] + 1}",
        alive=fmt.span(
            min(float(r.get("start_t") or r.get("first_t") or 0.0) for _, r in group),
            max(float(r.get("end_t") or r.get("last_t") or 0.0) for _, r in group),
        ),
        readings=sum(row.readings for row, _ in group),
        uss=fmt.DASH,
        growth=_range(growth, fmt.signed_mb),
        per_min=_range(rates, fmt.signed),
        per_1k=fmt.DASH,
        notes=[
            f"{len(group)} workers of {len(gens)} generations, folded"
            + (f": own growth {fmt.signed_mb(float(np.mean(growth)))} each on average" if growth else "")
            + " (the chart of each generation's peak, and summary.json, have them all)"
        ],
        tone="growing" if "growing" in tones else "flat" if "flat" in tones else "unjudged",
        count=len(group),
    )


def _range(values: list[float], show: Callable[[float | None], str]) -> str:
    if not values:
        return fmt.DASH
    low, high = show(min(values)), show(max(values))
    return low if low == high else f"{low} to {high}"
