"""One line per process: the per-process USS chart and the lines of a recorded job's timeline
(each process's exact readings and estimates between them, groups drawn as median and range, the
bands of worker generations). Tables in, traces out; the chart that holds them is
:func:`memprobe.report.figures.chart_timeline`'s or :func:`chart_uss`'s.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from memprobe.core.series import (
    Clock,
    failed_reads,
)
from memprobe.core.vocabulary import is_loader_role, is_worker_role, role_order
from memprobe.report import format as fmt
from memprobe.report import groups
from memprobe.report.chart import (
    Milestones,
    Series,
    build_chart,
    role_color,
    spare_colors,
)
from memprobe.report.groups import Lifeline


def process_lines(rows: pd.DataFrame, keep: Callable[[str], bool]) -> list[tuple[int, str, str]]:
    """(pid, line name, role) of the processes whose last role passes ``keep``, in role order;
    the pid is added to the name where two processes share a role (one that restarted)."""
    roles = rows.sort_values("t").groupby("pid")["role"].last()
    shown = [pid for pid in roles.index if keep(roles[pid])]
    order = role_order(list(roles[shown]))
    dup = roles[shown].duplicated(keep=False)
    return [
        (pid, f"{roles[pid]} (pid {pid})" if dup[pid] else roles[pid], roles[pid])
        for pid in sorted(shown, key=lambda pid: (order.index(roles[pid]), pid))
    ]


def process_trace(name: str, role: str) -> dict:
    """A per-process line: workers solid, main and rank processes dotted."""
    line = {"color": role_color(role), "width": 2, "dash": "solid" if is_worker_role(role) else "dot"}
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": name,
        "line": line,
        "marker": {"size": 5},
        "connectgaps": False,
    }


def chart_uss(
    chart_id: str, samples: pd.DataFrame, clock: Clock, milestones: Milestones, *, max_points: int
) -> dict | None:
    """USS per worker process (main and rank processes dotted): the private memory a process would
    free on exit."""
    if samples.empty or not (samples["tier"] == "pss").any():
        return None
    rows = samples[(samples["tier"] == "pss") | failed_reads(samples) | samples["missing"].astype(bool)]
    lines = process_lines(rows, is_loader_role)
    note = None
    if len(lines) > groups.MAX_LINES:
        series, note = _wide_uss(rows, lines, max_points)
    else:
        series = []
        for pid, name, role in lines:
            g = rows[rows["pid"] == pid].sort_values("t")
            y = np.where(g["tier"] == "pss", g["uss_mb"].to_numpy(float), np.nan)
            series.append(
                Series(
                    {**process_trace(name, role), "hovertemplate": "%{y:,.1f} MB"}, g["t"].to_numpy(float), y
                )
            )
    chart = build_chart(
        chart_id,
        "uss",
        "USS (private memory) per process",
        series,
        clock,
        "USS (MB)",
        milestones,
        max_points=max_points,
    )
    if chart is not None and note:
        chart["note"] = note
    return chart


def _wide_uss(
    rows: pd.DataFrame, lines: list[tuple[int, str, str]], max_points: int
) -> tuple[list[Series], str]:
    """USS of a run of more than ``groups.MAX_LINES`` processes: its workers as a group, those whose
    USS rose most beyond the group's median by name."""

    def rise(pid: int) -> float | None:
        uss = (
            rows.loc[(rows["pid"] == pid) & (rows["tier"] == "pss"), ["t", "uss_mb"]]
            .dropna()
            .sort_values("t")
        )
        return float(uss["uss_mb"].iloc[-1] - uss["uss_mb"].iloc[0]) if len(uss) > 1 else None

    lifelines = [
        Lifeline(
            pid,
            name,
            role,
            None,
            None,
            None,
            is_worker_role(role),
            ("workers",) if is_worker_role(role) else (),
            rise(pid) if is_worker_role(role) else None,
        )
        for pid, name, role in lines
    ]
    return wide_series(rows, lifelines, min(groups.GROUP_POINTS, max_points), ("rose", "rise"))


def worker_bands(samples: pd.DataFrame) -> dict[str, str] | None:
    """Role -> band of a run's total PSS chart where one band per process would be more than
    ``groups.MAX_LINES``: its workers as one band; None: a band per role."""
    roles = list(samples["role"].dropna().unique()) if not samples.empty else []
    workers = [r for r in roles if is_worker_role(r)]
    if len(roles) <= groups.MAX_LINES or len(workers) < 2:
        return None
    return {r: f"workers ({len(workers)})" if is_worker_role(r) else r for r in role_order(roles)}


# -- a recorded job's timeline -------------------------------------------------------------------


ESTIMATE_DASH = "dot"
BAND_FILLS = ("rgba(232,89,12,0.07)", "rgba(31,95,168,0.07)")


def _uss_readings(samples: pd.DataFrame, pid: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series | None]:
    """A process's rows, its exact USS readings, and its USS at every tick (exact where read, the
    sampler's estimate between: None without estimates)."""
    rows = samples[(samples["pid"] == pid) & ~samples["missing"].fillna(False).astype(bool)].sort_values("t")
    exact = rows[(rows["tier"] == "pss") & rows["uss_mb"].notna()]
    if "uss_est_mb" not in rows or not rows["uss_est_mb"].notna().any():
        return rows, exact, None
    best = (
        rows["uss_mb"].where(rows["tier"] == "pss").fillna(pd.to_numeric(rows["uss_est_mb"], errors="coerce"))
    )
    return rows, exact, best


def timeline_series(
    samples: pd.DataFrame, line: Lifeline, color: str | None = None, name: str | None = None
) -> list[Series]:
    """A process's exact USS readings as markers and, where the sampler estimated its USS between
    them, the estimate as a dotted line through them (same colour, one legend entry); without
    estimates, a solid line from reading to reading."""
    rows, exact, best = _uss_readings(samples, line.pid)
    has_est = best is not None
    if exact.empty and not has_est:
        return []
    color = color or role_color(line.role)
    name = name or line.name
    marker = {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "legendgroup": str(line.pid),
        "marker": {"size": 6, "color": color},
        "hovertemplate": "%{y:,.1f} MB (exact)",
    }
    if not has_est:
        solid = {
            **marker,
            "mode": "lines+markers",
            "line": {"color": color, "width": 2},
            "connectgaps": False,
        }
        return [Series(solid, exact["t"].to_numpy(float), exact["uss_mb"].to_numpy(float))]
    assert best is not None
    keep = best.notna()
    dotted = {
        "type": "scatter",
        "mode": "lines",
        "name": f"{name} (estimate)",
        "legendgroup": str(line.pid),
        "showlegend": False,
        "connectgaps": False,
        "hovertemplate": "%{y:,.1f} MB (estimate)",
        "line": {"color": color, "width": 1.5, "dash": ESTIMATE_DASH},
    }
    if exact.empty:  # never read exactly: its estimate alone, named in the legend
        dotted.update(name=f"{name} (estimated)", showlegend=True)
    return [
        Series(dotted, rows.loc[keep, "t"].to_numpy(float), best[keep].to_numpy(float)),
        Series(marker, exact["t"].to_numpy(float), exact["uss_mb"].to_numpy(float)),
    ]


def group_series(
    samples: pd.DataFrame, lines: Sequence[Lifeline], name: str, color: str, points: int
) -> list[Series]:
    """A group of processes as its median USS (a line) and its range from the lowest to the
    highest (shaded in the line's colour), over the processes alive at each moment."""
    curves = []
    for ln in lines:
        rows, exact, best = _uss_readings(samples, ln.pid)
        t, y = (rows["t"], best) if best is not None else (exact["t"], exact["uss_mb"])
        curves.append((t.to_numpy(float), y.to_numpy(float)))
    return groups.band_series(curves, name, color, points, "%{y:,.1f} MB")


def wide_series(
    samples: pd.DataFrame, lines: Sequence[Lifeline], points: int, grew: tuple[str, str] = ("grew", "growth")
) -> tuple[list[Series], str]:
    """Many processes on one chart: each group's median and range, a process alone in its group
    as its own line, and the top growers by name, no two in one colour; and the note that says so."""
    by_group = groups.grouping(lines)
    alone = [m[0] for m in by_group.values() if len(m) == 1]
    grouped = {g: m for g, m in by_group.items() if len(m) > 1}
    typical, growers = groups.standouts(grouped)
    spare = spare_colors(role_color(ln.role) for ln in alone)
    series = [s for ln in alone for s in timeline_series(samples, ln)]
    for g, members in grouped.items():
        series += group_series(samples, members, f"{g} ({len(members)})", next(spare), points)
    for ln in growers:
        series += timeline_series(samples, ln, next(spare), f"{ln.name} ({fmt.signed_mb(ln.growth_mb)})")
    medians = "; ".join(f"{g} {fmt.signed_mb(v)}" for g, v in typical.items())
    verb, noun = grew
    named = (
        f" Drawn by name, the {len(growers)} that {verb} most beyond their group's median {noun} ({medians}): "
        + ", ".join(f"{ln.name} {fmt.signed_mb(ln.growth_mb)}" for ln in growers)
        + "."
        if growers
        else f" None {verb} much beyond its group's median {noun} ({medians})."
    )
    note = (
        f"{len(lines)} processes, drawn by group: each group's line is its median USS, the shade its range "
        f"from the lowest to the highest of its processes alive at that moment.{named}"
    )
    return series, note


LABEL_SPACING = 0.1  # generation labels at least this share of the time axis apart (some unlabelled)


def generation_bands(lines: Sequence[Lifeline]) -> tuple[list[dict], list[dict]]:
    """Shaded spans where each generation of workers was alive, labelled at the top (shapes,
    annotations): a new generation of DataLoader workers is usually a new epoch. Labels at least
    :data:`LABEL_SPACING` of the axis apart: the first, then the next far enough (forty
    generations' labels overlapped into one smear); "gen N" where some are left unlabelled."""
    spans: dict[int, list[float]] = {}
    for ln in lines:
        if ln.worker and ln.generation is not None and ln.start_t is not None and ln.end_t is not None:
            lo, hi = spans.get(ln.generation, [ln.start_t, ln.end_t])
            spans[ln.generation] = [min(lo, ln.start_t), max(hi, ln.end_t)]
    shapes, notes = [], []
    xs = [x for span in spans.values() for x in span]
    gap = LABEL_SPACING * (max(xs) - min(xs)) if xs else 0.0
    crowded = any(b[0] - a[0] < gap for a, b in itertools.pairwise(sorted(spans.values())))
    labelled = -math.inf
    for k, (gen, (lo, hi)) in enumerate(sorted(spans.items())):
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": lo,
                "x1": hi,
                "y0": 0,
                "y1": 1,
                "fillcolor": BAND_FILLS[k % 2],
                "line": {"width": 0},
                "layer": "below",
            }
        )
        if lo - labelled < gap:
            continue
        labelled = lo
        text = (
            "workers alive" if len(spans) == 1 else f"gen {gen + 1}" if crowded else f"generation {gen + 1}"
        )
        notes.append(
            {
                "x": lo,
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "text": text,
                "font": {"size": 11, "color": "#5f6b7a"},
            }
        )
    return shapes, notes
