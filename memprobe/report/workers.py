"""The scenario page's "How many workers": the worker-count curves the analysis computed
(:class:`memprobe.analysis.workers.Sweep`) as one chart of four panels on one x axis (time per
100 batches, items/s, CPU per item, total PSS), each point the median of its repeats with two
error bars (the standard deviation, thick; the min-max, thin and pale), the memory limit drawn
and the counts that would not fit marked; and the table of every group's medians and spreads.
Formats only: every figure and sentence is the analysis'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memprobe.core.rounds import spread_text
from memprobe.report.chart import LIMIT_COLOR, LIMIT_SHOWN_FROM, color_styles, num
from memprobe.report.format import is_num

if TYPE_CHECKING:
    from memprobe.analysis.workers import Group, Sweep

# (figure, panel title, hover format): top to bottom, the exercise's measure first.
PANELS = (
    ("time_per_100_batches_s", "time per 100 batches (s)", "%{y:,.2f} s"),
    ("items_per_s", "{noun}/s", "%{y:,.0f} {noun}/s"),
    ("cpu_ms_per_item", "CPU ms per {item}", "%{y:,.3f} ms"),
    ("total_pss_peak_mb", "peak total PSS (MB)", "%{y:,.0f} MB"),
)
GAP = 0.04  # the panels' share of the height between two of them
NOT_FIT = "#e03131"
JITTER = 0.06  # curves at one count side by side, so that their error bars do not hide each other


def _errors(group: Group, figure: str) -> tuple[float | None, float | None, float | None, float | None]:
    """median, std, and the distances down to the min and up to the max."""
    s = group.figures.get(figure)
    if s is None:
        return None, None, None, None
    return s.median, s.std if s.std is not None else 0.0, s.median - s.min, s.max - s.median


def chart_workers(chart_id: str, sweep: Sweep, noun: str = "items") -> dict | None:
    """One chart, four panels sharing the worker-count axis, a colour per curve (mode x
    dataset); None without a curve.

    Long because the chart is one plotly spec: per curve and panel a trace with its standard
    deviation and a pale one with its range, the limit and the counts that do not fit, then
    the four axes."""
    curves = list(sweep.curves)
    if not curves:
        return None
    names = [f"{c.mode} · {c.backend}" for c in curves]
    colors = color_styles(names)
    data: list[dict[str, Any]] = []
    xs: list[list[float]] = []
    for i, (c, name) in enumerate(zip(curves, names, strict=True)):
        shift = (i - (len(curves) - 1) / 2) * JITTER
        x = [p.workers + shift for p in c.points]
        for k, (figure, _, hover) in enumerate(PANELS):
            axis = "" if k == 0 else str(k + 1)
            cols = [_errors(p, figure) for p in c.points]
            y = [num(m, 4) if is_num(m) else None for m, _, _, _ in cols]
            runs = [
                f"{len(p.run_ids)} runs: median ± std" + (", min-max" if len(p.run_ids) > 1 else "")
                for p in c.points
            ]
            common = {"type": "scatter", "legendgroup": name, "xaxis": "x", "yaxis": f"y{axis}"}
            data.append(
                {
                    **common,
                    "mode": "lines+markers",
                    "name": name,
                    "showlegend": k == 0,
                    "y": y,
                    "customdata": runs,
                    "line": {"color": colors[name], "width": 2},
                    "marker": {"size": 8, "color": colors[name]},
                    "error_y": {  # the std each way, never below 0 (no time or rate is negative)
                        "type": "data",
                        "symmetric": False,
                        "array": [num(s, 4) for _, s, _, _ in cols],
                        "arrayminus": [
                            num(min(s, m), 4) if is_num(m) and is_num(s) else None for m, s, _, _ in cols
                        ],
                        "color": colors[name],
                        "thickness": 2.5,
                        "width": 7,
                    },
                    "hovertemplate": hover.replace("{noun}", noun)
                    + " at %{text} workers (%{customdata})<extra>%{fullData.name}</extra>",
                    "text": [str(p.workers) for p in c.points],
                }
            )
            data.append(
                {
                    **common,
                    "mode": "markers",
                    "name": f"{name}: min-max",
                    "showlegend": False,
                    "hoverinfo": "skip",
                    "y": y,
                    "marker": {"size": 1, "color": colors[name], "opacity": 0},
                    "error_y": {
                        "type": "data",
                        "symmetric": False,
                        "array": [num(hi, 4) for _, _, _, hi in cols],
                        "arrayminus": [num(lo, 4) for _, _, lo, _ in cols],
                        "color": colors[name],
                        "thickness": 1,
                        "width": 3,
                    },
                    "opacity": 0.45,
                }
            )
            xs += [x, x]
    counts = sorted({p.workers for c in curves for p in c.points})
    limit = _limit(sweep, counts)
    out = [(c, p) for c in curves for p in c.points if p.fits is False]
    if out:
        pss = [p.median("total_pss_peak_mb") for _, p in out]
        data.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": "does not fit in the limit",
                "xaxis": "x",
                "yaxis": f"y{len(PANELS)}",
                "y": [num(v, 1) for v in pss],
                "text": ["does not fit"] * len(out),
                "textposition": "top center",
                "textfont": {"color": NOT_FIT},
                "marker": {"symbol": "x-thin-open", "size": 16, "color": NOT_FIT, "line": {"width": 3}},
                "hovertemplate": "%{y:,.0f} MB: over the limit<extra></extra>",
            }
        )
        xs.append([float(p.workers) for _, p in out])
    if limit is not None:
        data.append(limit)
        xs.append([counts[0] - 0.3, counts[-1] + 0.3])
    return {
        "id": chart_id,
        "kind": "workers",
        "title": f"How many workers: time per 100 batches, {noun}/s, CPU per {noun[:-1]} and total PSS "
        "against the worker count (median of the repeats; error bars: standard deviation, and pale, min-max)",
        "downsampled": False,
        "data": data,
        "x": {"time": xs},
        "layouts": {"time": _layout(counts, noun)},
        "default": "time",
    }


def _limit(sweep: Sweep, counts: list[int]) -> dict | None:
    """The memory limit across the PSS panel, where a count reaches a quarter of it or one does
    not fit (further down, it would flatten every point into the axis)."""
    if sweep.limit_mb is None:
        return None
    top = max((p.median("total_pss_peak_mb") or 0.0 for c in sweep.curves for p in c.points), default=0.0)
    if top < LIMIT_SHOWN_FROM * sweep.limit_mb and not any(
        p.fits is False for c in sweep.curves for p in c.points
    ):
        return None
    return {
        "type": "scatter",
        "mode": "lines",
        "name": f"memory limit ({sweep.limit_of})",
        "xaxis": "x",
        "yaxis": f"y{len(PANELS)}",
        "y": [num(sweep.limit_mb, 1)] * 2,
        "line": {"color": LIMIT_COLOR, "width": 2, "dash": "dot"},
        "hovertemplate": "limit %{y:,.0f} MB<extra></extra>",
    }


def _layout(counts: list[int], noun: str) -> dict:
    n = len(PANELS)
    height = (1.0 - GAP * (n - 1)) / n
    layout: dict[str, Any] = {
        "height": 980,
        "margin": {"l": 80, "r": 20, "t": 20, "b": 60},
        "xaxis": {
            "title": {"text": "workers (num_workers; 0: the main process alone)"},
            "tickvals": counts,
            "range": [counts[0] - 0.4, counts[-1] + 0.4],
            "anchor": f"y{n}",
            "zeroline": False,
        },
        "legend": {"orientation": "h", "y": -0.08},
        "showlegend": True,
        "hovermode": "closest",
        "plot_bgcolor": "#ffffff",
    }
    for k, (_, title, _) in enumerate(PANELS):
        top = 1.0 - k * (height + GAP)
        layout[f"yaxis{'' if k == 0 else k + 1}"] = {
            "title": {"text": title.format(noun=noun, item=noun[:-1])},
            "domain": [max(0.0, top - height), top],
            "rangemode": "tozero",
            "gridcolor": "#e9ecef",
        }
    return layout


def group_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """The table under the chart: a row per group (dataset, mode, workers), each figure its
    median with its spread, and whether it fits."""
    return [
        {
            "backend": g.backend,
            "mode": g.mode,
            "workers": g.workers,
            "runs": len(g.run_ids),
            "cells": [spread_text(g.figures.get(f), digits, dash="–", between="–") for f, digits in ROWS],
            "fits": "–" if g.fits is None else ("yes" if g.fits else "no"),
        }
        for g in sweep.groups  # the analysis' order: each dataset's, by worker count
    ]


ROWS = (("time_per_100_batches_s", 2), ("items_per_s", 0), ("cpu_ms_per_item", 3), ("total_pss_peak_mb", 0))
