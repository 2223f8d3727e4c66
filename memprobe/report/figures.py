"""The charts of one run (and of a recorded job's timeline), from its saved tables: which lines
each chart draws, in which colours, with which notes. Pure functions, tables in, chart specs
(:mod:`memprobe.report.chart`) out. Every number they draw comes from :mod:`memprobe.core.series`,
as the summary's numbers do; a sample the sampler could not read is a gap (``None``), never a
zero.

Here: the memory totals (PSS by role, summed RSS against total PSS), the items rate, a recorded
job's timeline, and :func:`run_charts`, every chart of a run in page order. One line per process
(the USS chart, the timeline's lines) is :mod:`memprobe.report.lifelines`; CPU, page faults and
/dev/shm are :mod:`memprobe.report.usage`; the machinery the charts share is
:mod:`memprobe.report.chart`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from memprobe.core.series import (
    Clock,
    item_rate,
    pss_by_role,
    sum_rss,
    total_of,
)
from memprobe.report import groups
from memprobe.report.chart import (
    AXES,
    MAX_POINTS,
    Milestones,
    Series,
    build_chart,
    limit_line,
    name_items_axis,
    role_color,
    share_x,
    spare_colors,
)
from memprobe.report.epochs import SHOWN_GENERATIONS
from memprobe.report.groups import Lifeline
from memprobe.report.lifelines import (
    chart_uss,
    generation_bands,
    timeline_series,
    wide_series,
    worker_bands,
)
from memprobe.report.usage import chart_cpu, chart_dev_shm, chart_faults

# -- the per-run charts ---------------------------------------------------------------------


_STEPS = {"shape": "hv"}  # a value holds until the next point


def chart_pss_by_role(
    chart_id: str,
    by_role: pd.DataFrame,
    clock: Clock,
    milestones: Milestones,
    *,
    max_points: int,
    held: bool = False,
    band_of: dict[str, str] | None = None,
) -> dict | None:
    """The run's PSS stacked by role: ``by_role``, its samples'
    :func:`~memprobe.core.series.pss_by_role` (the caller builds it once for both memory charts).
    ``held``: a recorded job's totals, known only at its sparse exact rounds and held between
    them (:func:`memprobe.core.series.held_readings`): drawn as steps, not as slopes between rounds.
    ``band_of``: role -> its band, in the bands' order (a job of many processes: a band per rank
    or kind, not 65 bands); a band is a gap where one of its processes could not be read."""
    table = by_role
    if table.empty:
        return None
    colors = {role: role_color(role) for role in table.columns}
    if band_of:
        bands = list(dict.fromkeys([*band_of.values(), *(r for r in table.columns if r not in band_of)]))
        members = {b: [r for r in table.columns if band_of.get(r, r) == b] for b in bands}
        table = pd.DataFrame(
            {b: table[m].sum(axis=1, skipna=False) for b, m in members.items() if m}, index=table.index
        )
        own = {b: role_color(b) for b in table.columns if b in colors and band_of.get(b, b) == b}
        spare = spare_colors(own.values())
        colors = {b: own.get(b) or next(spare) for b in table.columns}
    t = table.index.to_numpy(float)
    # A process that could not be read at a round is interpolated across (stackgaps), never stacked
    # as zero; the total PSS line of the RSS chart shows that round as a gap.
    series = [
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": role,
                "stackgroup": "pss",
                "stackgaps": "interpolate",
                "line": {"width": 0.5, "color": colors[role], **(_STEPS if held else {})},
                "fillcolor": colors[role],
                "hovertemplate": "%{y:,.1f} MB",
            },
            t,
            table[role].to_numpy(float),
        )
        for role in table.columns
    ]
    return build_chart(
        chart_id,
        "pss_by_role",
        "Total PSS, stacked by process group" if band_of else "Total PSS, stacked by process role",
        series,
        clock,
        "PSS (MB)",
        milestones,
        max_points=max_points,
        shared_x=True,
    )


def chart_timeline(
    chart_id: str,
    title: str,
    samples: pd.DataFrame,
    lines: Sequence[Lifeline],
    clock: Clock,
    *,
    max_points: int,
    axes: Sequence[str] = ("time",),
) -> dict | None:
    """USS per process of one rank (or of a job without ranks) over time, worker generations banded;
    more than ``groups.MAX_LINES`` processes by group, with their top growers by name."""
    wide = len(lines) > groups.MAX_LINES
    if wide:
        parts = samples[samples["pid"].isin([ln.pid for ln in lines])]
        series, note = wide_series(parts, lines, min(groups.GROUP_POINTS, max_points))
    else:
        series = [s for ln in lines for s in timeline_series(samples, ln)]
    chart = build_chart(
        chart_id,
        "timeline",
        title,
        series,
        clock,
        "USS (MB)",
        Milestones({}),
        max_points=max_points,
        axes=axes,
    )
    if chart is None:
        return None
    shapes, notes = generation_bands(lines)
    for axis, layout in chart["layouts"].items():
        layout["shapes"] += [
            {**sh, "x0": _at(clock, axis, sh["x0"]), "x1": _at(clock, axis, sh["x1"])} for sh in shapes
        ]
        layout["annotations"] += [{**n, "x": _at(clock, axis, n["x"])} for n in notes]
        layout["hovermode"] = "closest"
        layout["margin"]["r"] = 250 if wide else 170
    if wide:
        chart["note"] = (
            f"{note} The table below lists every process (of a parent with more than "
            f"{SHOWN_GENERATIONS} generations of workers, those between its first and last in one row)."
        )
    return chart


def _at(clock: Clock, axis: str, t: float) -> float:
    """A time on ``axis``: seconds as they are, or the items fetched by then."""
    return float(t) if axis == "time" else float(clock.convert(axis, [t])[0])


def chart_rss_vs_pss(
    chart_id: str,
    samples: pd.DataFrame,
    by_role: pd.DataFrame,
    clock: Clock,
    milestones: Milestones,
    *,
    max_points: int,
    held: bool = False,
    charge: pd.Series | None = None,
    limit_mb: float | None = None,
) -> dict | None:
    """Sum of RSS (``samples``) next to total PSS (``by_role``: as :func:`chart_pss_by_role`'s).
    ``held``: as :func:`chart_pss_by_role`'s (a recorded job: total PSS drawn as steps; a
    torchrun job's total once sloped down over 70 s from one round to the next, where it had
    dropped at once when its workers exited). ``charge``: the job's memory cgroup's charge over
    time (MB), drawn beside them; ``limit_mb``: the limit the job must fit in, drawn where the
    lines reach a quarter of it (further down, it would flatten them into the axis)."""
    rss, pss = sum_rss(samples), total_of(by_role)
    if rss.empty and pss.empty:
        return None
    extra = []
    if charge is not None and not charge.dropna().empty:
        charge = charge.dropna()
        extra.append(
            Series(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "cgroup charge",
                    "line": {"color": "#6b6b6b", "width": 2, "dash": "dash"},
                    "hovertemplate": "%{y:,.0f} MB charged to the cgroup",
                },
                charge.index.to_numpy(float),
                charge.to_numpy(float),
            )
        )
    series = [
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "sum of RSS",
                "line": {"color": "#c92a2a", "width": 2},
                "connectgaps": False,
                "hovertemplate": "%{y:,.0f} MB",
            },
            rss.index.to_numpy(float),
            rss.to_numpy(float),
        ),
        Series(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "total PSS",
                "line": {"color": "#1f5fa8", "width": 2, **(_STEPS if held else {})},
                "marker": {"size": 5},
                "connectgaps": False,
                "hovertemplate": "%{y:,.0f} MB",
            },
            pss.index.to_numpy(float),
            pss.to_numpy(float),
        ),
        *extra,
    ]
    limit = limit_line(limit_mb, series)
    if limit is not None:
        series.append(limit)
        extra.append(limit)
    return build_chart(
        chart_id,
        "rss_vs_pss",
        "Sum of RSS next to total PSS" + "".join(f", {s.trace['name']}" for s in extra),
        series,
        clock,
        "MB",
        milestones,
        max_points=max_points,
    )


@dataclass(frozen=True)
class DecodeInfo:
    """What one decoded image is, from a decode run's dataset_info: its mean encoded size and its pixels."""

    bytes_per_item: float | None
    pixels_per_item: float | None

    @classmethod
    def from_meta(cls, meta: dict) -> DecodeInfo | None:
        if (meta.get("spec") or {}).get("workload") != "decode":
            return None
        info = meta.get("dataset_info") or {}
        return cls(_positive(info.get("bytes_per_item")), _positive(info.get("pixels_per_item")))


def _positive(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def chart_items_rate(
    chart_id: str,
    progress: pd.DataFrame,
    clock: Clock,
    milestones: Milestones,
    *,
    max_points: int,
    decode: DecodeInfo | None = None,
) -> dict | None:
    """Items/s over time; for a decode run, images/s with encoded MB/s on a right axis."""
    t, rate = item_rate(progress, milestones.times.get("iter_start"))
    if not len(t):
        return None
    unit = "images/s" if decode else "items/s"
    series = [
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": unit,
                "showlegend": False,
                "line": {"color": "#2b8a3e", "width": 2, "shape": "hv"},
                "hovertemplate": "%{y:,.0f} " + unit,
            },
            t,
            rate,
        )
    ]
    if decode is not None and decode.bytes_per_item:
        # The same line in encoded MB/s: drawn invisibly on the right axis, for that axis and the hover.
        series.append(
            Series(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "encoded MB/s",
                    "showlegend": False,
                    "yaxis": "y2",
                    "line": {"color": "#2b8a3e", "width": 0, "shape": "hv"},
                    "hovertemplate": "%{y:,.1f} MB/s encoded",
                },
                t,
                rate * decode.bytes_per_item / 1e6,
            )
        )
    title = (
        "Images/s and encoded MB/s, time to first batch marked"
        if len(series) == 2
        else f"{unit[0].upper()}{unit[1:]}, time to first batch marked"
    )
    chart = build_chart(
        chart_id,
        "items_rate",
        title,
        series,
        clock,
        unit,
        milestones,
        max_points=max_points,
        extra_notes=_ttfb_notes(milestones, clock),
    )
    if chart is not None and decode is not None and decode.bytes_per_item:
        _right_axis_in_mb(chart, decode.bytes_per_item, decode.pixels_per_item)
    return chart


def _right_axis_in_mb(chart: dict, bytes_per_item: float, pixels_per_item: float | None) -> None:
    """Both axes get fixed ranges in the ratio of one image to its encoded MB, so that the one line
    reads in images/s on the left and in MB/s on the right."""
    top = max((v for v in chart["data"][0]["y"] if v is not None), default=0.0) * 1.08 or 1.0
    factor = bytes_per_item / 1e6
    for layout in chart["layouts"].values():
        layout["yaxis"].update(range=[0, top], autorange=False)
        layout["yaxis2"] = {
            "title": {"text": "encoded MB/s"},
            "overlaying": "y",
            "side": "right",
            "range": [0, top * factor],
            "autorange": False,
            "showgrid": False,
            "zeroline": False,
            "tickmode": "auto",
        }  # its own round numbers, not the left axis's ticks converted
        layout["margin"]["r"] = 70
    per_image = f"{bytes_per_item / 1e3:,.1f} kB"
    pixels = (
        f" Each image has {pixels_per_item / 1e6:.2f} megapixels: megapixels/s = images/s × "
        f"{pixels_per_item / 1e6:.2f}."
        if pixels_per_item
        else ""
    )
    chart["note"] = (
        f"Right axis: encoded JPEG bytes decoded, MB/s = images/s × {per_image} (mean encoded size).{pixels}"
    )


def _ttfb_notes(milestones: Milestones, clock: Clock) -> dict[str, list[dict]]:
    start, first = milestones.times.get("iter_start"), milestones.times.get("first_batch")
    if start is None or first is None:
        return {}
    out = {}
    for axis in AXES:
        x = float(clock.convert(axis, [first])[0])
        out[axis] = [
            {
                "x": x,
                "y": 0.92,
                "xref": "x",
                "yref": "paper",
                "ax": 30,
                "ay": 0,
                "showarrow": True,
                "arrowhead": 2,
                "arrowcolor": "#495057",
                "xanchor": "left",
                "text": f"first batch after {first - start:.2f} s",
                "font": {"size": 11, "color": "#212529"},
                "bgcolor": "rgba(255,255,255,0.85)",
            }
        ]
    return out


def run_charts(
    prefix: str,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    system: pd.DataFrame,
    milestones: Milestones,
    *,
    max_points: int = MAX_POINTS,
    threads: pd.DataFrame | None = None,
    decode: DecodeInfo | None = None,
    cpu_count: int | None = None,
    gil_enabled: bool | None = None,
    limit_mb: float | None = None,
) -> list[dict]:
    """Every chart one run's data supports, in page order (runs without samples get none).
    ``limit_mb``: the memory the run had to fit in, drawn on its total memory chart."""
    clock = Clock.from_progress(progress)
    threads = threads if threads is not None else pd.DataFrame()
    by_role = pss_by_role(samples)  # both memory charts draw from it
    # Two columns on the page: totals, then per process, then throughput next to CPU, then shared memory.
    charts = [
        chart_pss_by_role(
            f"{prefix}-pss", by_role, clock, milestones, max_points=max_points, band_of=worker_bands(samples)
        ),
        chart_rss_vs_pss(
            f"{prefix}-rss", samples, by_role, clock, milestones, max_points=max_points, limit_mb=limit_mb
        ),
        chart_uss(f"{prefix}-uss", samples, clock, milestones, max_points=max_points),
        chart_faults(f"{prefix}-faults", samples, clock, milestones, max_points=max_points),
        chart_items_rate(f"{prefix}-rate", progress, clock, milestones, max_points=max_points, decode=decode),
        chart_cpu(
            f"{prefix}-cpu",
            samples,
            threads,
            clock,
            milestones,
            max_points=max_points,
            cpu_count=cpu_count,
            gil_enabled=gil_enabled,
        ),
        chart_dev_shm(f"{prefix}-shm", samples, system, clock, milestones, max_points=max_points),
    ]
    drawn = share_x([c for c in charts if c is not None])
    return name_items_axis(drawn, "images" if decode is not None else "items")
