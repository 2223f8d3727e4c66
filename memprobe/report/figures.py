"""The charts of one run (and of a recorded job's timeline), from its saved tables: which lines
each chart draws, in which colours, with which notes. Pure functions, tables in, chart specs
(:mod:`memprobe.report.chart`) out. Every number they draw comes from :mod:`memprobe.core.series`,
as the summary's numbers do; a sample the sampler could not read is a gap (``None``), never a
zero.

Over 500 lines because it is one catalogue: seven per-run charts and the timeline, each a
function of a few dozen lines that reads on its own (traces, titles, notes); the machinery they
share is in ``chart`` and the reductions in ``series``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from memprobe.core.series import (
    CPU_MIN_WINDOW_S,
    Clock,
    cpu_bands,
    ended,
    failed_reads,
    item_rate,
    process_counters,
    pss_by_role,
    shm_mapped,
    shm_used,
    sum_rss,
    thread_counters,
    total_pss,
)
from memprobe.core.vocabulary import MAIN, OTHER, is_loader_role, is_worker_role, role_order
from memprobe.report import format as fmt
from memprobe.report import groups
from memprobe.report.chart import (
    AXES,
    MAX_POINTS,
    ROLE_COLORS,
    WORKER_COLORS,
    Milestones,
    Series,
    build_chart,
    name_items_axis,
    role_color,
    share_x,
    spare_colors,
)
from memprobe.report.groups import Lifeline

# -- series and milestones -------------------------------------------------------------------------


# -- the per-run charts ---------------------------------------------------------------------


_STEPS = {"shape": "hv"}  # a value holds until the next point


def chart_pss_by_role(
    chart_id: str,
    samples: pd.DataFrame,
    clock: Clock,
    milestones: Milestones,
    *,
    max_points: int,
    held: bool = False,
    band_of: dict[str, str] | None = None,
) -> dict | None:
    """``held``: a recorded job's totals, known only at its sparse exact rounds and held between
    them (:func:`memprobe.core.series.held_readings`): drawn as steps, not as slopes between rounds.
    ``band_of``: role -> its band, in the bands' order (a job of many processes: a band per rank
    or kind, not 65 bands); a band is a gap where one of its processes could not be read."""
    table = pss_by_role(samples)
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


def _process_lines(rows: pd.DataFrame, keep: Callable[[str], bool]) -> list[tuple[int, str, str]]:
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


def _process_trace(name: str, role: str) -> dict:
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
    lines = _process_lines(rows, is_loader_role)
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
                    {**_process_trace(name, role), "hovertemplate": "%{y:,.1f} MB"}, g["t"].to_numpy(float), y
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


def generation_bands(lines: Sequence[Lifeline]) -> tuple[list[dict], list[dict]]:
    """Shaded spans where each generation of workers was alive, labelled at the top (shapes,
    annotations): a new generation of DataLoader workers is usually a new epoch."""
    spans: dict[int, list[float]] = {}
    for ln in lines:
        if ln.worker and ln.generation is not None and ln.start_t is not None and ln.end_t is not None:
            lo, hi = spans.get(ln.generation, [ln.start_t, ln.end_t])
            spans[ln.generation] = [min(lo, ln.start_t), max(hi, ln.end_t)]
    shapes, notes = [], []
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
        text = "workers alive" if len(spans) == 1 else f"generation {gen + 1}"
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
        chart["note"] = f"{note} The table below lists every process."
    return chart


def _at(clock: Clock, axis: str, t: float) -> float:
    """A time on ``axis``: seconds as they are, or the items fetched by then."""
    return float(t) if axis == "time" else float(clock.convert(axis, [t])[0])


FAULTS_NOTE = (
    "Read every tick, so denser than USS. Each shared page a forked process writes, and the kernel "
    "copies, is one fault; so is each page it newly allocates: compare slopes with a flat run's."
)
FAULTS_NOTE_ONE_PROCESS = (
    "Read every tick. One process, no worker processes: its faults are pages it allocates or "
    "touches for the first time; nothing is copied between processes."
)


def chart_faults(
    chart_id: str, samples: pd.DataFrame, clock: Clock, milestones: Milestones, *, max_points: int
) -> dict | None:
    """Minor page faults per worker since it started (the main process when there are no worker
    processes), from the cheap tier: a dense, early sign of copy-on-write between PSS rounds."""
    if samples.empty or "minflt" not in samples or samples["minflt"].isna().all():
        return None
    rows = samples[~(samples["missing"].fillna(False).astype(bool) & ended(samples))]
    if rows.empty:
        return None
    workers = _process_lines(rows, is_worker_role)
    lines = workers or _process_lines(rows, is_loader_role)
    curves = {pid: rows[rows["pid"] == pid].sort_values("t") for pid, _, _ in lines}
    wide = len(lines) > groups.MAX_LINES
    if wide:  # one band: their median and their range
        series = groups.band_series(
            [(g["t"].to_numpy(float), g["minflt"].to_numpy(float)) for g in curves.values()],
            f"{'workers' if workers else 'processes'} ({len(lines)})",
            WORKER_COLORS[0],
            min(groups.GROUP_POINTS, max_points),
            "%{y:,.0f} faults",
        )
    else:
        series = [
            Series(
                {**_process_trace(name, role), "mode": "lines", "hovertemplate": "%{y:,.0f} faults"},
                curves[pid]["t"].to_numpy(float),
                curves[pid]["minflt"].to_numpy(float),
            )
            for pid, name, role in lines
        ]
    title = (
        "Minor page faults per worker (cumulative)"
        if workers
        else "Minor page faults per process (cumulative)"
    )
    chart = build_chart(
        chart_id,
        "faults",
        title,
        series,
        clock,
        "minor faults since start",
        milestones,
        max_points=max_points,
    )
    if chart is not None:
        chart["note"] = FAULTS_NOTE_ONE_PROCESS if len(lines) == 1 and not workers else FAULTS_NOTE
        if wide:
            chart["note"] += (
                f" {len(lines)} {'workers' if workers else 'processes'}, drawn as one: the line is their median, "
                "the shade their range from the lowest to the highest."
            )
    return chart


def chart_rss_vs_pss(
    chart_id: str,
    samples: pd.DataFrame,
    clock: Clock,
    milestones: Milestones,
    *,
    max_points: int,
    held: bool = False,
) -> dict | None:
    """``held``: as :func:`chart_pss_by_role`'s (a recorded job: total PSS drawn as steps; a
    torchrun job's total once sloped down over 70 s from one round to the next, where it had
    dropped at once when its workers exited)."""
    rss, pss = sum_rss(samples), total_pss(samples)
    if rss.empty and pss.empty:
        return None
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
    ]
    return build_chart(
        chart_id,
        "rss_vs_pss",
        "Sum of RSS next to total PSS",
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


# -- CPU ---------------------------------------------------------------------------------------


def _band_order(bands: Sequence[str]) -> list[str]:
    threads = [b for b in bands if b == "main thread"] + sorted(
        (b for b in bands if b.startswith("worker thread ")), key=lambda b: (len(b), b)
    )
    processes = role_order([b for b in bands if is_loader_role(b)])
    return threads + processes + [b for b in ("other threads", "other processes") if b in bands]


def _band_color(band: str) -> str:
    if band.startswith("worker thread "):
        k = band.removeprefix("worker thread ")
        return WORKER_COLORS[int(k) % len(WORKER_COLORS)] if k.isdigit() else ROLE_COLORS[OTHER]
    if band == "main thread":
        return ROLE_COLORS[MAIN]
    return "#adb5bd" if band == "other threads" else role_color(band)


def chart_cpu(
    chart_id: str,
    samples: pd.DataFrame,
    threads: pd.DataFrame,
    clock: Clock,
    milestones: Milestones,
    *,
    max_points: int,
    cpu_count: int | None = None,
    gil_enabled: bool | None = None,
) -> dict | None:
    """CPU cores used over time, stacked by process (by thread of the main process when the run
    recorded its threads: thread-mode loaders), with the total on top."""
    mains = samples.loc[samples["role"] == MAIN, "pid"].unique() if not samples.empty else []
    by_thread = not threads.empty and len(mains) == 1
    counters = (thread_counters(threads, int(mains[0])) if by_thread else []) + process_counters(
        samples, skip=frozenset(int(p) for p in mains) if by_thread else frozenset()
    )
    mids, bands = cpu_bands(counters)
    if not bands:
        return None
    # Helpers that used (almost) no CPU would only crowd the legend.
    shown = [
        b
        for b in _band_order(list(bands))
        if not b.startswith("other") or np.nanmax(bands[b], initial=0) >= 0.01
    ]
    every = dict(bands)  # every process and thread, for the total
    colors = {b: _band_color(b) for b in shown}
    many = [b for b in shown if is_worker_role(b)] or [b for b in shown if b.startswith("worker thread ")]
    if len(shown) > groups.MAX_LINES and len(many) > 1:  # the workers (or worker threads) as one band
        merged = f"{'workers' if is_worker_role(many[0]) else 'worker threads'} ({len(many)})"
        bands = {**bands, merged: np.sum([bands[b] for b in many], axis=0)}
        colors[merged] = WORKER_COLORS[0]
        shown = [merged if b == many[0] else b for b in shown if b == many[0] or b not in many]
    series = [
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": band,
                "stackgroup": "cpu",
                "stackgaps": "interpolate",
                "line": {"width": 0.5, "color": colors[band]},
                "fillcolor": colors[band],
                "hovertemplate": "%{y:.2f} cores",
            },
            mids,
            bands[band],
        )
        for band in shown
    ]
    total = np.sum(list(every.values()), axis=0)
    series.append(
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "total",
                "connectgaps": False,
                "line": {"color": "#212529", "width": 1.5},
                "hovertemplate": "%{y:.2f} cores",
            },
            mids,
            total,
        )
    )
    title = "CPU cores used, by thread of the main process" if by_thread else "CPU cores used, by process"
    chart = build_chart(
        chart_id, "cpu", title, series, clock, "CPU cores", milestones, max_points=max_points, shared_x=True
    )
    if chart is None:
        return None
    top = float(np.nanmax(total, initial=0.0))
    if cpu_count and top >= 0.5 * cpu_count:
        _cpu_count_line(chart, cpu_count, top)
    window = mids[1] - mids[0] if len(mids) > 1 else CPU_MIN_WINDOW_S
    gil = (
        " The GIL was disabled (free-threaded build): threads running Python code can each use a core."
        if gil_enabled is False
        else " Threads running Python code share the GIL: together they use about one core at most, unless their "
        "work releases it (I/O, most numpy operations, Pillow's JPEG decoder)."
    )
    chart["note"] = (
        f"CPU time (user + system) per {window:.1f} s window, from each process's counter read every "
        f"tick; 1 = one core busy.{gil if by_thread else ''}"
    )
    return chart


def _cpu_count_line(chart: dict, cpu_count: int, top: float) -> None:
    """A dashed line at the machine's CPU count, with the y axis reaching it."""
    for layout in chart["layouts"].values():
        layout["shapes"].append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": cpu_count,
                "y1": cpu_count,
                "line": {"color": "#c92a2a", "width": 1, "dash": "dash"},
            }
        )
        layout["annotations"].append(
            {
                "xref": "paper",
                "x": 0,
                "xanchor": "left",
                "yref": "y",
                "y": cpu_count,
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 11, "color": "#c92a2a"},
                "text": f"{cpu_count} CPU{'s' if cpu_count != 1 else ''} on this machine",
            }
        )
        layout["yaxis"].update(range=[0, max(top, cpu_count) * 1.12], autorange=False)


def chart_dev_shm(
    chart_id: str,
    samples: pd.DataFrame,
    system: pd.DataFrame,
    clock: Clock,
    milestones: Milestones,
    *,
    max_points: int,
) -> dict | None:
    if not shm_used(samples):
        return None
    mapped = shm_mapped(samples)
    # The machine's line first, so that the run's own line is drawn over it; the legend lists the run's first.
    series = []
    if not system.empty and "dev_shm_mb" in system and system["dev_shm_mb"].notna().any():
        s = system.sort_values("t")
        series.append(
            Series(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "/dev/shm in use (whole machine)",
                    "line": {"color": "#adb5bd", "width": 1.5},
                    "connectgaps": False,
                    "legendrank": 2,
                    "hovertemplate": "%{y:,.1f} MB",
                },
                s["t"].to_numpy(float),
                s["dev_shm_mb"].to_numpy(float),
            )
        )
    series.append(
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "mapped by the run's processes (sum)",
                "line": {"color": "#7048e8", "width": 2},
                "connectgaps": False,
                "legendrank": 1,
                "hovertemplate": "%{y:,.1f} MB",
            },
            mapped.index.to_numpy(float),
            mapped.to_numpy(float),
        )
    )
    chart = build_chart(
        chart_id,
        "dev_shm",
        "Shared memory mapped by the run, and /dev/shm",
        series,
        clock,
        "MB",
        milestones,
        max_points=max_points,
    )
    if chart is not None:
        chart["note"] = (
            "Purple: shared memory the run's processes map (RssShmem, summed: a page two processes "
            "map counts twice), e.g. batches passed from workers as tensors. Grey: all of /dev/shm, "
            "which other programs on the machine use too."
        )
    return chart


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
) -> list[dict]:
    """Every chart one run's data supports, in page order (runs without samples get none)."""
    clock = Clock.from_progress(progress)
    threads = threads if threads is not None else pd.DataFrame()
    # Two columns on the page: totals, then per process, then throughput next to CPU, then shared memory.
    charts = [
        chart_pss_by_role(
            f"{prefix}-pss", samples, clock, milestones, max_points=max_points, band_of=worker_bands(samples)
        ),
        chart_rss_vs_pss(f"{prefix}-rss", samples, clock, milestones, max_points=max_points),
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
