"""Charts that put runs side by side: every run's total PSS against items fetched, grouped bars
per backend, mode and worker count (the report's comparison and ``memprobe compare``), and
items/s and scaling efficiency against the worker count."""

from __future__ import annotations

import colorsys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from memprobe.core.scaling import Scaling
from memprobe.core.series import Clock, total_pss
from memprobe.report.chart import (
    DASHES,
    MAX_POINTS,
    Series,
    color_styles,
    limit_line,
    num,
    styles,
    totals_chart,
)


@dataclass(frozen=True)
class RunLine:
    """One run's line on a chart that compares runs."""

    name: str
    samples: pd.DataFrame
    progress: pd.DataFrame
    color: str
    dash: str = "solid"
    group: str | None = None
    # The run's total PSS per round where its analysis has it (a recorded job's: held readings and
    # estimates, whose highest is its summary's peak); else summed from ``samples``.
    total: pd.Series | None = None


HOVER = {
    "items": "%{y:,.0f} MB at %{x:,} items<extra>%{fullData.name}</extra>",
    "time": "%{y:,.0f} MB at %{x:,.1f} s<extra>%{fullData.name}</extra>",
}


def chart_runs_pss(
    chart_id: str,
    title: str,
    lines: list[RunLine],
    *,
    max_points: int = MAX_POINTS,
    limit_mb: float | None = None,
    limit_of: str = "",
    axis: str = "items",
) -> dict | None:
    """Every run's total PSS against items fetched (so runs of different speed line up), or
    against seconds since each run started (``axis="time"``: runs that counted no items, which
    against items would stand at x = 0). ``limit_mb``: the memory the runs had to fit in
    (``limit_of``: what it is), drawn across the chart where a run reaches a quarter of it
    (further down, it would flatten them into the axis)."""
    series = []
    for line in lines:
        pss = line.total if line.total is not None else total_pss(line.samples)
        if pss.empty:
            continue
        t = pss.index.to_numpy(float)
        trace = {
            "type": "scatter",
            "mode": "lines+markers",
            "name": line.name,
            "connectgaps": False,
            "line": {"color": line.color, "dash": line.dash, "width": 2},
            "marker": {"size": 5},
            "hovertemplate": HOVER[axis],
        }
        if line.group:
            trace["legendgroup"] = line.group
        x = Clock.from_progress(line.progress).items_at(t) if axis == "items" else t
        series.append(Series(trace, x, pss.to_numpy(float)))
    limit = limit_line(limit_mb, series, of=limit_of)
    if limit is not None:
        series.append(limit)
    chart = totals_chart(chart_id, "runs_pss", title, series, axis, max_points=max_points, legend_room=220)
    if chart is not None:
        chart["layouts"][axis]["legend"].update(x=1.01)
    return chart


# -- across runs: bars per backend x mode x workers (the decode post's figure 4) --------------


def _bar_layout(ytitle: str, xtitle: str) -> dict:
    return {
        "barmode": "group",
        "height": 380,
        "margin": {"l": 70, "r": 20, "t": 20, "b": 60},
        "xaxis": {"title": {"text": xtitle}, "type": "category"},
        "yaxis": {"title": {"text": ytitle}},
        # The legend names the mode and worker count of each bar, even when there is one.
        "legend": {"orientation": "h", "y": -0.25},
        "showlegend": True,
        "hovermode": "closest",
        "plot_bgcolor": "#ffffff",
    }


def chart_bars(
    chart_id: str,
    title: str,
    rows: Sequence[dict],
    value: str,
    ytitle: str,
    hover: str,
    xtitle: str = "backend",
) -> dict | None:
    """Grouped bars: x = backend label, one bar per mode x workers; ``rows`` are summary dicts."""
    rows = [r for r in rows if r.get(value) is not None]
    if not rows:
        return None
    groups = list(dict.fromkeys(f"{r['mode']} · {r['workers']}w" for r in rows))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    colors = color_styles(groups)
    data, xs = [], []
    for g in groups:
        mine = {r["label"]: r for r in rows if f"{r['mode']} · {r['workers']}w" == g}
        xs.append([lab for lab in labels if lab in mine])
        data.append(
            {
                "type": "bar",
                "name": g,
                "marker": {"color": colors[g]},
                "y": [num(float(mine[lab][value])) for lab in labels if lab in mine],
                "customdata": [mine[lab].get("extra", "") for lab in labels if lab in mine],
                "hovertemplate": hover + "<extra>%{fullData.name}</extra>",
            }
        )
    return {
        "id": chart_id,
        "kind": "bars",
        "title": title,
        "downsampled": False,
        "data": data,
        "x": {"time": xs},
        "layouts": {"time": _bar_layout(ytitle, xtitle)},
        "default": "time",
    }


# -- across worker counts: items/s and scaling efficiency (memprobe.core.scaling) ---------------


# Scaling chart: a hue per backend, a shade of it per mode (and a dash and marker per mode), so the
# lines of one backend read as a family and no two lines share a colour.
BACKEND_HUES = (0.58, 0.07, 0.36, 0.76, 0.50, 0.97, 0.15)
MODE_SHADES = (0.30, 0.47, 0.62, 0.38, 0.55, 0.25, 0.68)
MARKERS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross")


def scaling_colors(groups: Sequence[Scaling]) -> dict[tuple[str, str], str]:
    """A colour per (mode, backend): the backend's hue, the mode's shade; distinct for every pair."""
    backends = list(dict.fromkeys(g.backend for g in groups))
    modes = list(dict.fromkeys(g.mode for g in groups))
    out = {}
    for g in groups:
        b, m = backends.index(g.backend), modes.index(g.mode)
        hue = BACKEND_HUES[b] if b < len(BACKEND_HUES) else (b * 0.381966) % 1.0
        light = MODE_SHADES[m % len(MODE_SHADES)] + 0.02 * (m // len(MODE_SHADES))
        r, gr, bl = colorsys.hls_to_rgb(hue, light, 0.8)
        out[(g.mode, g.backend)] = f"#{round(r * 255):02x}{round(gr * 255):02x}{round(bl * 255):02x}"
    return out


def chart_scaling(chart_id: str, groups: Sequence[Scaling], noun: str = "items") -> dict | None:
    """Items/s (top; a log axis where the rates span more than 20x) and scaling efficiency
    (bottom) against the worker count, one line per mode x backend, each its own colour (a hue
    per backend, a shade, dash and marker per mode); a dotted line at efficiency 1 (perfect).

    Long because the chart is one plotly spec, its two panels' traces and axes read top to
    bottom."""
    if not groups:
        return None
    names = [f"{g.mode} · {g.backend}" for g in groups]
    colors = {f"{m} · {b}": c for (m, b), c in scaling_colors(groups).items()}
    dashes = styles([g.mode for g in groups], DASHES)
    markers = styles([g.mode for g in groups], MARKERS)
    data: list[dict[str, Any]] = []
    xs: list[list[int]] = []
    for g, name in zip(groups, names, strict=True):
        workers = [p.workers for p in g.points]
        cpu = [f"{p.cpu_ms_per_item:.4g} ms CPU per item" if p.cpu_ms_per_item else "" for p in g.points]
        line = {"color": colors[name], "dash": dashes[g.mode], "width": 2}
        marker = {"size": 8, "color": colors[name], "symbol": markers[g.mode]}
        common = {"type": "scatter", "mode": "lines+markers", "legendgroup": name, "line": line}
        data.append(
            {
                **common,
                "name": name,
                "y": [num(p.items_per_s, 1) for p in g.points],
                "customdata": cpu,
                "marker": marker,
                "hovertemplate": "%{y:,.0f} " + noun + "/s at %{x} workers (%{customdata})"
                "<extra>%{fullData.name}</extra>",
            }
        )
        data.append(
            {
                **common,
                "name": name,
                "showlegend": False,
                "yaxis": "y2",
                "y": [num(p.efficiency) for p in g.points],
                "marker": marker,
                "hovertemplate": "efficiency %{y:.2f} at %{x} workers<extra>%{fullData.name}</extra>",
            }
        )
        xs += [workers, workers]
    counts = sorted({p.workers for g in groups for p in g.points})
    top = max(p.efficiency for g in groups for p in g.points)
    rates = [p.items_per_s for g in groups for p in g.points]
    log = max(rates) > 20 * min(rates)
    layout = {
        "height": 560,
        "margin": {"l": 80, "r": 20, "t": 20, "b": 60},
        "xaxis": {"title": {"text": "workers"}, "tickvals": counts, "anchor": "y2"},
        "yaxis": {"title": {"text": f"{noun}/s" + (" (log)" if log else "")}, "domain": [0.5, 1.0]}
        | ({"type": "log", "dtick": 1} if log else {"rangemode": "tozero"}),
        "yaxis2": {
            "title": {"text": "scaling efficiency (1: perfect)"},
            "domain": [0.0, 0.4],
            "range": [0, max(1.1, top * 1.1)],
        },
        "shapes": [
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y2",
                "y0": 1,
                "y1": 1,
                "line": {"color": "#868e96", "dash": "dot", "width": 1},
            }
        ],
        "legend": {"orientation": "h", "y": -0.15},
        "showlegend": True,
        "hovermode": "closest",
        "plot_bgcolor": "#ffffff",
    }
    return {
        "id": chart_id,
        "kind": "scaling",
        "title": f"Scaling: {noun}/s and efficiency against the worker count, per mode and backend",
        "downsampled": False,
        "data": data,
        "x": {"time": xs},
        "layouts": {"time": layout},
        "default": "time",
    }
