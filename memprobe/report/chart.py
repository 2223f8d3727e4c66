"""The chart spec every page draws, and how it is assembled: series in, a JSON-ready dict out.

A chart spec is a plain dict that the page's script hands to ``Plotly.newPlot``::

    {"id", "kind", "title", "downsampled", "data": [traces without x],
     "x": {"time": [x per trace], "items": [x per trace]}, "layouts": {"time": {...}, "items": {...}},
     "default": "time" | "items"}

A per-run chart can be drawn against seconds since the run's process started or against items
fetched by then (the page toggles between the two). Long series are downsampled to about
``max_points`` per line, keeping each interval's minimum and maximum so that peaks survive and
its first gap so that gaps do. Which charts there are is :mod:`memprobe.report.figures` (one
run) and :mod:`memprobe.report.across` (runs side by side).
"""

from __future__ import annotations

import colorsys
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memprobe.core.series import Clock
from memprobe.core.vocabulary import FORKSERVER, MAIN, OTHER, RESOURCE_TRACKER, SPAWN_STARTING, role_parts

MAX_POINTS = 1500
AXES = ("time", "items")
X_TITLES = {"time": "seconds since the run's process started", "items": "items fetched"}
ROLE_COLORS = {
    MAIN: "#1f5fa8",
    FORKSERVER: "#8a8a8a",
    RESOURCE_TRACKER: "#b5b5b5",
    SPAWN_STARTING: "#d0c9b0",
    OTHER: "#cfcfcf",
}
WORKER_COLORS = ("#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599", "#a61e4d", "#5c940d", "#e67700")
# Rank processes: dark tones apart from the workers' colours, so a stack of ranks and their workers stays readable.
RANK_COLORS = ("#343a40", "#1864ab", "#6b4f2a", "#087f5b", "#862e9c", "#364fc7", "#5c3d2e", "#868e96")
SERIES_COLORS = (
    "#1f5fa8",
    "#e8590c",
    "#2b8a3e",
    "#c2255c",
    "#7048e8",
    "#0c8599",
    "#a61e4d",
    "#5c940d",
    "#e67700",
    "#495057",
)
# Colours for lines beyond the role palettes (groups, growers, a colour a chart already drew): the
# workers' and others, ordered so that neighbours differ most.
DISTINCT_COLORS = (
    "#0c8599",
    "#e8590c",
    "#7048e8",
    "#2b8a3e",
    "#c2255c",
    "#795548",
    "#1c7ed6",
    "#fab005",
    "#862e9c",
    "#82c91e",
    "#495057",
    "#f06595",
    "#15aabf",
    "#e67700",
    "#364fc7",
    "#a61e4d",
    "#5c940d",
    "#20c997",
    "#ff8787",
)
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
MILESTONES = ("dataset_built", "first_batch", "done")  # drawn as dotted lines


@dataclass(frozen=True)
class Series:
    """One line of a chart: a plotly trace (without x/y) and its points, NaN for a gap."""

    trace: dict
    t: np.ndarray
    y: np.ndarray


LIMIT_COLOR = "#8b1d1d"
LIMIT_SHOWN_FROM = 0.25  # a limit is drawn once a line reaches this share of it (further down, the
# limit would flatten the lines into the axis)


def limit_line(
    limit_mb: float | None,
    lines: Sequence[Series],
    *,
    name: str = "memory limit",
    of: str = "",
    color: str = LIMIT_COLOR,
) -> Series | None:
    """The memory a job or run must fit in, drawn across ``lines``' x range as a dotted line,
    where one of them reaches :data:`LIMIT_SHOWN_FROM` of it; None otherwise (no limit known, no
    point drawn). ``of``: what the limit is ("this machine's memory"), said on hover."""
    ys = [np.asarray(s.y, float) for s in lines]
    ys = [y[np.isfinite(y)] for y in ys]
    top = max((float(y.max()) for y in ys if len(y)), default=0.0)
    if not limit_mb or top < LIMIT_SHOWN_FROM * limit_mb:
        return None
    xs = np.concatenate([np.asarray(s.t, float) for s in lines])
    xs = xs[np.isfinite(xs)]
    if not len(xs):
        return None
    trace = {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "line": {"color": color, "width": 2, "dash": "dot"},
        "hovertemplate": "limit %{y:,.0f} MB" + (f" ({of})" if of else "") + "<extra></extra>",
    }
    return Series(trace, np.array([xs.min(), xs.max()]), np.array([limit_mb, limit_mb], float))


def num(v: float | None, digits: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def nums(a: np.ndarray, digits: int = 3) -> list[float | None]:
    return [num(v, digits) for v in np.asarray(a, dtype=float)]


def keep_indices(y: np.ndarray, max_points: int) -> np.ndarray:
    """Indices to keep so that a line has about ``max_points`` points: per interval its minimum
    and maximum (peaks survive) and its first gap (gaps survive)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 2)
    size = -(-n // buckets)  # equal intervals (the last one shorter), as whole rows of a table
    table = np.full((buckets, size), np.nan)
    table.flat[:n] = y  # row by row: the series padded to whole rows
    offsets = np.arange(buckets) * size
    inside = (np.arange(buckets * size) < n).reshape(
        buckets, size
    )  # the padding after the last point is no gap
    gaps = np.isnan(table) & inside
    real = ~np.isnan(table)
    keep = [np.array([0, n - 1]), (offsets + gaps.argmax(axis=1))[gaps.any(axis=1)]]
    some = real.any(axis=1)
    keep.append((offsets + np.where(real, table, np.inf).argmin(axis=1))[some])
    keep.append((offsets + np.where(real, table, -np.inf).argmax(axis=1))[some])
    return np.unique(np.concatenate(keep))


def role_color(role: str) -> str:
    parts = role_parts(role)
    if parts is None:
        return ROLE_COLORS.get(role, ROLE_COLORS[OTHER])
    rank, worker = parts
    if worker < 0:
        return RANK_COLORS[rank % len(RANK_COLORS)]
    return WORKER_COLORS[(worker + 3 * rank) % len(WORKER_COLORS)]


def spare_colors(taken: Iterable[str]) -> Iterator[str]:
    """Colours not in ``taken``, in order: ``DISTINCT_COLORS``, then as many more as asked for
    (hues a golden angle apart)."""
    used = {c.lower() for c in taken}
    for c in DISTINCT_COLORS:
        if c.lower() not in used:
            used.add(c.lower())
            yield c
    for i in itertools.count():
        r, g, b = colorsys.hls_to_rgb((i * 0.381966) % 1.0, 0.42 + 0.12 * (i % 2), 0.65)
        c = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
        if c not in used:
            used.add(c)
            yield c


def with_alpha(color: str, alpha: float) -> str:
    """'#rrggbb' as 'rgba(r,g,b,alpha)' (a shaded range in its line's colour)."""
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha:g})"


def line_key(trace: dict) -> str:
    """What one line of a chart is in its legend: the traces of one process (its exact readings
    and its estimate) or of one group (median and range) share a legend group."""
    return str(trace.get("legendgroup") or trace.get("name") or "")


def trace_color(trace: dict) -> str | None:
    for part in ("line", "marker"):
        color = (trace.get(part) or {}).get("color")
        if isinstance(color, str):
            return color
    return None


def _drawn(trace: dict) -> bool:
    """Whether a trace is seen: not an invisible twin drawn for a second axis or for hovering."""
    return (trace.get("line") or {}).get("width") != 0 or bool(trace.get("fill") or trace.get("stackgroup"))


def unique_colors(data: list[dict]) -> list[dict]:
    """No two lines of one chart share a colour: a line whose colour an earlier line has gets a
    spare one (its markers, and its fill at the same opacity, with it). A chart of 65 processes
    drew eight worker colours over and over."""
    owner: dict[str, str] = {}  # colour -> the line that has it
    renamed: dict[str, str] = {}  # line -> its new colour
    for trace in data:
        key, color = line_key(trace), trace_color(trace)
        if color is None or not _drawn(trace) or key in renamed:
            continue
        if owner.setdefault(color.lower(), key) != key:
            renamed[key] = ""
    if not renamed:
        return data
    spare = spare_colors(owner)
    for key in renamed:
        renamed[key] = next(spare)
    for trace in data:
        new = renamed.get(line_key(trace))
        if new:
            _recolor(trace, new)
    return data


def _recolor(trace: dict, new: str) -> None:
    old = trace_color(trace)
    for part in ("line", "marker"):
        if isinstance((trace.get(part) or {}).get("color"), str):
            trace[part] = {**trace[part], "color": new}
    fill = trace.get("fillcolor")
    if isinstance(fill, str) and old is not None:
        if fill.lower() == old.lower():
            trace["fillcolor"] = new
        elif fill.startswith("rgba("):
            trace["fillcolor"] = with_alpha(new, float(fill.rstrip(")").split(",")[-1]))


def styles(keys: Sequence[str], palette: Sequence[str]) -> dict[str, str]:
    """A stable style per distinct key, in order of first appearance."""
    return {k: palette[i % len(palette)] for i, k in enumerate(dict.fromkeys(keys))}


def color_styles(keys: Sequence[str], palette: Sequence[str] = SERIES_COLORS) -> dict[str, str]:
    """A colour per distinct key, in order of first appearance, never one twice: ``palette``
    first, then spare colours."""
    return dict(zip(dict.fromkeys(keys), itertools.chain(palette, spare_colors(palette)), strict=False))


# -- chart assembly -----------------------------------------------------------------------


def _layout(axis: str, ytitle: str, shapes: list[dict], annotations: list[dict]) -> dict:
    layout: dict[str, Any] = {
        "height": 290,
        "margin": {"l": 60, "r": 120, "t": 28, "b": 42},
        "xaxis": {"title": {"text": X_TITLES[axis]}, "zeroline": False, "rangemode": "tozero"},
        "yaxis": {"title": {"text": ytitle}, "rangemode": "tozero", "zeroline": False},
        "legend": {
            "orientation": "v",
            "x": 1.02,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "font": {"size": 11},
            "traceorder": "normal",
        },
        "hovermode": "x unified",
        "shapes": shapes,
        "annotations": annotations,
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
    }
    layout["xaxis"].update(gridcolor="#eceff3")
    layout["yaxis"].update(gridcolor="#eceff3")
    return layout


@dataclass(frozen=True)
class Milestones:
    """A run's milestones (event name -> seconds) and the growth window the verdict used."""

    times: dict
    window: tuple[float, float] | None = None


def milestone_shapes(milestones: Milestones, clock: Clock, axis: str) -> list[dict]:
    """The growth window shaded, and dotted lines at the run's milestones."""
    conv = lambda t: float(clock.convert(axis, [t])[0])  # noqa: E731
    shapes: list[dict] = []
    if milestones.window is not None:
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": conv(milestones.window[0]),
                "x1": conv(milestones.window[1]),
                "y0": 0,
                "y1": 1,
                "fillcolor": "rgba(31,95,168,0.07)",
                "line": {"width": 0},
                "layer": "below",
            }
        )
    for name in MILESTONES:
        t = milestones.times.get(name)
        if t is None or (axis == "items" and name == "dataset_built"):
            continue
        x = conv(t)
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#868e96", "width": 1, "dash": "dot"},
            }
        )
    return shapes


def build_chart(
    chart_id: str,
    kind: str,
    title: str,
    series: list[Series],
    clock: Clock | None,
    ytitle: str,
    milestones: Milestones,
    *,
    max_points: int,
    shared_x: bool = False,
    axes: Sequence[str] = AXES,
    extra_notes: dict[str, list[dict]] | None = None,
) -> dict | None:
    """A chart spec from series; ``shared_x`` keeps one set of points for all (stacked areas).
    Without a ``clock`` the series' ``t`` is already in the units of the (single) axis."""
    series = [s for s in series if len(s.t)]
    if not series:
        return None
    downsampled = False
    if shared_x:
        keep = keep_indices(np.nansum([s.y for s in series], axis=0), max_points)
        downsampled = len(keep) < len(series[0].t)
        series = [Series(s.trace, s.t[keep], s.y[keep]) for s in series]
    else:
        kept = []
        for s in series:
            keep = keep_indices(s.y, max_points)
            downsampled |= len(keep) < len(s.t)
            kept.append(Series(s.trace, s.t[keep], s.y[keep]))
        series = kept
    layouts, xs = {}, {}
    for axis in axes:
        shapes = milestone_shapes(milestones, clock, axis) if clock is not None else []
        layouts[axis] = _layout(axis, ytitle, shapes, (extra_notes or {}).get(axis, []))
        xs[axis] = [
            nums(s.t if clock is None else clock.convert(axis, s.t), 4 if axis == "time" else 0)
            for s in series
        ]
    data = unique_colors([{**s.trace, "y": nums(s.y)} for s in series])
    return {
        "id": chart_id,
        "kind": kind,
        "title": title,
        "downsampled": downsampled,
        "data": data,
        "x": xs,
        "layouts": layouts,
        "default": axes[0],
    }


def totals_chart(
    chart_id: str,
    kind: str,
    title: str,
    series: list[Series],
    axis: str,
    *,
    max_points: int,
    legend_room: int,
) -> dict | None:
    """One chart of total-PSS lines that compares runs or nodes on one x axis (``axis``, in the
    series' own units): taller than a run's charts, the nearest line's hover, and ``legend_room``
    pixels at the right for a legend of long names."""
    chart = build_chart(
        chart_id,
        kind,
        title,
        series,
        None,
        "total PSS (MB)",
        Milestones({}),
        max_points=max_points,
        axes=(axis,),
    )
    if chart is not None:
        layout = chart["layouts"][axis]
        layout.update(height=420, hovermode="closest")
        layout["margin"]["r"] = legend_room
    return chart


def name_items_axis(charts: list[dict], noun: str) -> list[dict]:
    """'images fetched' for a decode run's second x axis."""
    for c in charts:
        if "items" in c["layouts"]:
            c["layouts"]["items"]["xaxis"]["title"]["text"] = f"{noun} fetched"
    return charts


def share_x(charts: list[dict]) -> list[dict]:
    """One x range for all of a run's charts on each axis, so that they line up."""
    for axis in AXES:
        top = max(
            (v for c in charts for xs in c["x"].get(axis, []) for v in xs if v is not None), default=None
        )
        if top:
            for c in charts:
                c["layouts"][axis]["xaxis"]["range"] = [0, top * 1.02]
    return charts


def has_a_line(chart: dict | None) -> bool:
    """Whether some trace of the chart has two points or more (one point alone says nothing over time)."""
    return chart is not None and any(sum(v is not None for v in t["y"]) >= 2 for t in chart["data"])


def time_only(chart: dict) -> dict:
    """A chart without its items axis (a job that counted no items has none to offer)."""
    chart["x"] = {"time": chart["x"]["time"]}
    chart["layouts"] = {"time": chart["layouts"]["time"]}
    chart["default"] = "time"
    return chart
