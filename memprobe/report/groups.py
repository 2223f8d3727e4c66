"""Many processes on one chart: which of them are drawn as a group (their median as a line,
their range shaded) and which by name (those that grew most beyond their group's median), so
that a chart of 65 processes reads as a few lines. Pure functions; the charts that use them are
in :mod:`memprobe.report.figures`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memprobe.report.chart import Series, with_alpha

# A chart of more processes draws them by group (median and range), with the top growers by name:
# eleven legend entries filled the legend's box; 65 lines of eight colours could not be told apart.
MAX_LINES = 10
TOP_GROWERS = 6
STANDS_OUT_MB = 1.0  # a grower is drawn by name above its group's median growth plus this, or 10 % of it
MAX_GROUPS = 4  # finer groups than that (one per generation of many): the coarser grouping
GROUP_POINTS = 400  # a group's median and range, at its readings' moments or at most this many


@dataclass(frozen=True)
class Lifeline:
    """One process on a chart of USS over time (a recorded job's timeline, a run's USS chart): its
    line's name and colour group (its role), when it lived, its groups and its own growth."""

    pid: int
    name: str
    role: str
    generation: int | None
    start_t: float | None
    end_t: float | None
    worker: bool
    # Its group on a chart of many processes, finest first (kind and generation, then kind).
    groups: tuple[str, ...] = ()
    growth_mb: float | None = None  # its own growth (judged), for the lines drawn by name


def grouping(lines: Sequence[Lifeline]) -> dict[str, list[Lifeline]]:
    """The chart's processes by group: the finest grouping with at most ``MAX_GROUPS`` groups of
    two or more (a process alone in its group is its own line)."""
    levels = max((len(ln.groups) for ln in lines), default=0)
    by: dict[str, list[Lifeline]] = {}
    for level in range(levels):
        by = {}
        for ln in lines:
            by.setdefault(ln.groups[min(level, len(ln.groups) - 1)] if ln.groups else ln.name, []).append(ln)
        if sum(len(m) > 1 for m in by.values()) <= MAX_GROUPS:
            break
    return by or {ln.name: [ln] for ln in lines}


def standouts(grouped: dict[str, list[Lifeline]]) -> tuple[dict[str, float], list[Lifeline]]:
    """Each group's median growth, and the (at most ``TOP_GROWERS``) processes that grew most
    beyond their group's median: by more than ``STANDS_OUT_MB`` and 10 % of it."""
    typical = {g: float(np.median([ln.growth_mb or 0.0 for ln in m])) for g, m in grouped.items()}
    growers = sorted(
        (
            ln
            for g, m in grouped.items()
            for ln in m
            if ln.growth_mb is not None
            and ln.growth_mb > typical[g] + max(STANDS_OUT_MB, 0.1 * abs(typical[g]))
        ),
        key=lambda ln: -(ln.growth_mb or 0.0),
    )
    return typical, growers[:TOP_GROWERS]


def held(t: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``y`` at each moment of ``grid``: its last value by then; NaN before its first and after its last."""
    idx = np.searchsorted(t, grid, side="right") - 1
    out = np.where(idx >= 0, y[np.clip(idx, 0, None)], np.nan)
    out[(grid < t[0]) | (grid > t[-1])] = np.nan
    return out


def band_series(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], name: str, color: str, points: int, hover: str
) -> list[Series]:
    """Curves (t, y; NaN: no value) of one group as their median (a line) and their range from
    the lowest to the highest (shaded in the line's colour), over the curves that have a value at
    each moment; ``hover`` formats a value ('%{y:,.1f} MB')."""
    kept = [(t[~np.isnan(y)], y[~np.isnan(y)]) for t, y in curves]
    kept = [(t, y) for t, y in kept if len(t)]
    if not kept:
        return []
    moments = np.unique(np.concatenate([t for t, _ in kept]))  # where some curve has a reading
    grid = moments if len(moments) <= points else np.linspace(moments[0], moments[-1], max(2, points))
    table = np.vstack([held(t, y, grid) for t, y in kept])
    with warnings.catch_warnings():  # a moment no process of the group was alive: a gap
        warnings.simplefilter("ignore", RuntimeWarning)
        low, mid, high = np.nanmin(table, axis=0), np.nanmedian(table, axis=0), np.nanmax(table, axis=0)
    edge = {
        "type": "scatter",
        "mode": "lines",
        "legendgroup": name,
        "showlegend": False,
        "connectgaps": False,
        "line": {"color": color, "width": 0},
    }
    return [
        Series({**edge, "name": f"{name}: lowest", "hovertemplate": f"{hover} (lowest)"}, grid, low),
        Series(
            {
                **edge,
                "name": f"{name}: highest",
                "fill": "tonexty",
                "fillcolor": with_alpha(color, 0.22),
                "hovertemplate": f"{hover} (highest)",
            },
            grid,
            high,
        ),
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{name}: median, range",
                "legendgroup": name,
                "connectgaps": False,
                "line": {"color": color, "width": 2.5},
                "hovertemplate": f"{hover} (median)",
            },
            grid,
            mid,
        ),
    ]
