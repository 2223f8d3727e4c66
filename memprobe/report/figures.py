"""Plotly figures from a run's saved tables: pure functions, data in, JSON-ready dicts out.

A chart spec is a plain dict that the page's script hands to ``Plotly.newPlot``::

    {"id", "kind", "title", "downsampled", "data": [traces without x],
     "x": {"time": [x per trace], "items": [x per trace]}, "layouts": {"time": {...}, "items": {...}},
     "default": "time" | "items"}

Every per-run chart can be drawn against seconds since the run's process started or against
items fetched by then (the page toggles between the two). A sample the sampler could not read
(``missing`` for a reason other than the process having ended, or a failed PSS read) is a gap
(``None``), never a zero. Long series are downsampled to about ``max_points`` per line,
keeping each interval's minimum and maximum so that peaks survive.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from memprobe.tree_analysis import held_readings

MAX_POINTS = 1500
AXES = ("time", "items")
X_TITLES = {"time": "seconds since the run's process started", "items": "items fetched"}
ROLE_COLORS = {
    "main": "#1f5fa8",
    "forkserver": "#8a8a8a",
    "resource tracker": "#b5b5b5",
    "spawn (starting)": "#d0c9b0",
    "other": "#cfcfcf",
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
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_ENDED = ("exited", "zombie", "exiting")  # missing because the process ended (see probe.sampler)
MILESTONES = ("dataset_built", "first_batch", "done")  # drawn as dotted lines


# -- clocks and milestones --------------------------------------------------------------------


@dataclass(frozen=True)
class Clock:
    """Maps seconds since the run started to the number of items fetched by then."""

    t: np.ndarray
    items: np.ndarray

    @classmethod
    def from_progress(cls, progress: pd.DataFrame) -> Clock:
        if progress.empty or "items" not in progress:
            return cls(np.zeros(0), np.zeros(0))
        p = progress.sort_values("t")
        return cls(p["t"].to_numpy(float), np.maximum.accumulate(p["items"].to_numpy(float)))

    def items_at(self, ts: Sequence[float] | np.ndarray) -> np.ndarray:
        ts = np.asarray(ts, dtype=float)
        if not len(self.t):
            return np.zeros(len(ts))
        idx = np.searchsorted(self.t, ts, side="right") - 1
        return np.where(idx >= 0, self.items[np.clip(idx, 0, None)], 0.0)

    def convert(self, axis: str, ts: Sequence[float] | np.ndarray) -> np.ndarray:
        return np.asarray(ts, dtype=float) if axis == "time" else self.items_at(ts)


@dataclass(frozen=True)
class Series:
    """One line of a chart: a plotly trace (without x/y) and its points, NaN for a gap."""

    trace: dict
    t: np.ndarray
    y: np.ndarray


# -- helpers ------------------------------------------------------------------------------


def _num(v: float, digits: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def _values(a: np.ndarray, digits: int = 3) -> list[float | None]:
    return [_num(v, digits) for v in np.asarray(a, dtype=float)]


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


def _ended(rows: pd.DataFrame) -> pd.Series:
    reason = rows["reason"].fillna("").astype(str)
    return reason.str.startswith(_ENDED)


def failed_reads(rows: pd.DataFrame) -> pd.Series:
    """Rows whose process was there but could not be read (a gap, not a zero)."""
    missing = rows["missing"].fillna(False).astype(bool)
    pss_failed = (rows["tier"] == "cheap") & rows["reason"].notna()
    return (missing & ~_ended(rows)) | pss_failed


_ROLE = re.compile(r"^(?:rank (\d+))? ?(?:worker (\d+))?$")


def _role_parts(role: str) -> tuple[int, int] | None:
    """(rank, worker) for 'worker 2', 'rank 1', 'rank 1 worker 0' (-1 where absent); None for helpers."""
    m = _ROLE.match(role)
    if role == "main" or not m or not (m.group(1) or m.group(2)):
        return None
    return (int(m.group(1)) if m.group(1) else 0, int(m.group(2)) if m.group(2) else -1)


def role_order(roles: Sequence[str]) -> list[str]:
    """main first, then ranks and workers (by rank, then index), then helpers alphabetically."""

    def key(role: str) -> tuple:
        parts = _role_parts(role)
        return (0, 0, 0, role) if role == "main" else (1, *parts, role) if parts else (2, 0, 0, role)

    return sorted(dict.fromkeys(roles), key=key)


def is_loader_role(role: str) -> bool:
    """main, a rank process or a worker: the processes whose private memory matters."""
    return role == "main" or _role_parts(role) is not None


def role_color(role: str) -> str:
    parts = _role_parts(role)
    if parts is None:
        return ROLE_COLORS.get(role, ROLE_COLORS["other"])
    rank, worker = parts
    if worker < 0:
        return RANK_COLORS[rank % len(RANK_COLORS)]
    return WORKER_COLORS[(worker + 3 * rank) % len(WORKER_COLORS)]


# -- tables derived from samples --------------------------------------------------------------


def pss_by_role(samples: pd.DataFrame) -> pd.DataFrame:
    """PSS summed per role at every PSS round (index t); NaN where a process could not be read."""
    if samples.empty or "tier" not in samples or not (samples["tier"] == "pss").any():
        return pd.DataFrame()
    rounds = np.sort(samples.loc[samples["tier"] == "pss", "t"].unique())
    at = samples[samples["t"].isin(rounds)]
    # A recorded job's sampler reads only the processes whose memory moved: the others count
    # with their last reading.
    ok = held_readings(samples)
    table = ok.pivot_table(index="t", columns="role", values="pss_mb", aggfunc="sum").reindex(rounds)
    table = table.fillna(0.0)
    for _, row in at[failed_reads(at)].iterrows():
        table.loc[row["t"], row["role"]] = np.nan
    return table[role_order(list(table.columns))]


def total_pss(samples: pd.DataFrame) -> pd.Series:
    """Total PSS of the tree per PSS round; NaN for a round with a process that could not be read."""
    table = pss_by_role(samples)
    return table.sum(axis=1, skipna=False) if not table.empty else pd.Series(dtype=float)


def sum_rss(samples: pd.DataFrame) -> pd.Series:
    """Sum of RSS over the tree at every tick; NaN for a tick with a process that could not be read."""
    if samples.empty:
        return pd.Series(dtype=float)
    ok = samples[~samples["missing"].fillna(False).astype(bool)]
    totals = ok.groupby("t")["rss_mb"].sum().reindex(np.sort(samples["t"].unique()))
    bad = samples[samples["missing"].fillna(False).astype(bool) & ~_ended(samples)]["t"].unique()
    totals.loc[totals.index.isin(bad)] = np.nan
    return totals


def item_rate(
    progress: pd.DataFrame, start: float | None, min_dt: float = 0.25
) -> tuple[np.ndarray, np.ndarray]:
    """Items/s between progress reports at least ``min_dt`` apart, as steps (x: each interval's start)."""
    if progress.empty:
        return np.zeros(0), np.zeros(0)
    p = progress.sort_values("t").drop_duplicates("t", keep="last")
    t, items = p["t"].to_numpy(float), np.maximum.accumulate(p["items"].to_numpy(float))
    # The rate ends with the last item: reports after it (the loader's closing report) add no
    # items and would draw a drop to zero that is not a slowdown.
    last = int(np.argmax(items >= items[-1])) if len(items) else 0
    t, items = t[: last + 1], items[: last + 1]
    if start is not None and (not len(t) or start < t[0]):
        t, items = np.r_[start, t], np.r_[0.0, items]
    span = t[-1] - t[0] if len(t) else 0.0
    step = max(min_dt, span / 400)
    picked = [0]
    for i in range(1, len(t)):
        if t[i] - t[picked[-1]] >= step or i == len(t) - 1:
            picked.append(i)
    # A last interval much shorter than the others (a few items over a few ms) would show as a
    # spike: it joins the interval before it.
    if len(picked) > 2 and t[picked[-1]] - t[picked[-2]] < step / 2:
        del picked[-2]
    t, items = t[picked], items[picked]
    if len(t) < 2:
        return np.zeros(0), np.zeros(0)
    rate = np.diff(items) / np.diff(t)
    return t, np.r_[rate, rate[-1]]  # each rate from its interval's start; the last repeated to the end


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
            _values(s.t if clock is None else clock.convert(axis, s.t), 4 if axis == "time" else 0)
            for s in series
        ]
    data = [{**s.trace, "y": _values(s.y)} for s in series]
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


# -- the per-run charts ---------------------------------------------------------------------


def chart_pss_by_role(
    chart_id: str, samples: pd.DataFrame, clock: Clock, milestones: Milestones, *, max_points: int
) -> dict | None:
    table = pss_by_role(samples)
    if table.empty:
        return None
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
                "line": {"width": 0.5, "color": role_color(role)},
                "fillcolor": role_color(role),
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
        "Total PSS, stacked by process role",
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


def _is_worker(role: str) -> bool:
    return (_role_parts(role) or (0, -1))[1] >= 0


def _process_trace(name: str, role: str) -> dict:
    """A per-process line: workers solid, main and rank processes dotted."""
    line = {"color": role_color(role), "width": 2, "dash": "solid" if _is_worker(role) else "dot"}
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
    series = []
    for pid, name, role in _process_lines(rows, is_loader_role):
        g = rows[rows["pid"] == pid].sort_values("t")
        y = np.where(g["tier"] == "pss", g["uss_mb"].to_numpy(float), np.nan)
        series.append(
            Series({**_process_trace(name, role), "hovertemplate": "%{y:,.1f} MB"}, g["t"].to_numpy(float), y)
        )
    return build_chart(
        chart_id,
        "uss",
        "USS (private memory) per process",
        series,
        clock,
        "USS (MB)",
        milestones,
        max_points=max_points,
    )


# -- a recorded job's timeline -------------------------------------------------------------------


@dataclass(frozen=True)
class Lifeline:
    """One process of a recorded job on its rank's timeline: its line's name and colour group."""

    pid: int
    name: str
    role: str
    generation: int | None
    start_t: float | None
    end_t: float | None
    worker: bool


ESTIMATE_DASH = "dot"
BAND_FILLS = ("rgba(232,89,12,0.07)", "rgba(31,95,168,0.07)")


def timeline_series(samples: pd.DataFrame, line: Lifeline) -> list[Series]:
    """A process's exact USS readings as markers and, where the sampler estimated its USS between
    them, the estimate as a dotted line through them (same colour, one legend entry); without
    estimates, a solid line from reading to reading."""
    rows = samples[(samples["pid"] == line.pid) & ~samples["missing"].fillna(False).astype(bool)].sort_values(
        "t"
    )
    exact = rows[(rows["tier"] == "pss") & rows["uss_mb"].notna()]
    has_est = "uss_est_mb" in rows and rows["uss_est_mb"].notna().any()
    if exact.empty and not has_est:
        return []
    color = role_color(line.role)
    marker = {
        "type": "scatter",
        "mode": "markers",
        "name": line.name,
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
    best = (
        rows["uss_mb"].where(rows["tier"] == "pss").fillna(pd.to_numeric(rows["uss_est_mb"], errors="coerce"))
    )
    keep = best.notna()
    dotted = {
        "type": "scatter",
        "mode": "lines",
        "name": f"{line.name} (estimate)",
        "legendgroup": str(line.pid),
        "showlegend": False,
        "connectgaps": False,
        "hovertemplate": "%{y:,.1f} MB (estimate)",
        "line": {"color": color, "width": 1.5, "dash": ESTIMATE_DASH},
    }
    if exact.empty:  # never read exactly: its estimate alone, named in the legend
        dotted.update(name=f"{line.name} (estimated)", showlegend=True)
    return [
        Series(dotted, rows.loc[keep, "t"].to_numpy(float), best[keep].to_numpy(float)),
        Series(marker, exact["t"].to_numpy(float), exact["uss_mb"].to_numpy(float)),
    ]


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
    """USS per process of one rank (or of a job without ranks) over time, worker generations banded."""
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
        layout["margin"]["r"] = 170
    return chart


def _at(clock: Clock, axis: str, t: float) -> float:
    """A time on ``axis``: seconds as they are, or the items fetched by then."""
    return float(t) if axis == "time" else float(clock.convert(axis, [t])[0])


def has_a_line(chart: dict | None) -> bool:
    """Whether some trace of the chart has two points or more (one point alone says nothing over time)."""
    return chart is not None and any(sum(v is not None for v in t["y"]) >= 2 for t in chart["data"])


def time_only(chart: dict) -> dict:
    """A chart without its items axis (a job that counted no items has none to offer)."""
    chart["x"] = {"time": chart["x"]["time"]}
    chart["layouts"] = {"time": chart["layouts"]["time"]}
    chart["default"] = "time"
    return chart


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
    rows = samples[~(samples["missing"].fillna(False).astype(bool) & _ended(samples))]
    if rows.empty:
        return None
    workers = _process_lines(rows, _is_worker)
    lines = workers or _process_lines(rows, is_loader_role)
    series = []
    for pid, name, role in lines:
        g = rows[rows["pid"] == pid].sort_values("t")
        series.append(
            Series(
                {**_process_trace(name, role), "mode": "lines", "hovertemplate": "%{y:,.0f} faults"},
                g["t"].to_numpy(float),
                g["minflt"].to_numpy(float),
            )
        )
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
    return chart


def chart_rss_vs_pss(
    chart_id: str, samples: pd.DataFrame, clock: Clock, milestones: Milestones, *, max_points: int
) -> dict | None:
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
                "line": {"color": "#1f5fa8", "width": 2},
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
    if chart is not None and decode is not None and len(series) == 2:
        _right_axis_in_mb(chart, decode)
    return chart


def _right_axis_in_mb(chart: dict, decode: DecodeInfo) -> None:
    """Both axes get fixed ranges in the ratio of one image to its encoded MB, so that the one line
    reads in images/s on the left and in MB/s on the right."""
    assert decode.bytes_per_item is not None  # the MB/s series is drawn only with it
    top = max((v for v in chart["data"][0]["y"] if v is not None), default=0.0) * 1.08 or 1.0
    factor = decode.bytes_per_item / 1e6
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
    per_image = f"{decode.bytes_per_item / 1e3:,.1f} kB"
    pixels = (
        f" Each image has {decode.pixels_per_item / 1e6:.2f} megapixels: megapixels/s = images/s × "
        f"{decode.pixels_per_item / 1e6:.2f}."
        if decode.pixels_per_item
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

THREAD_NAME_PREFIX = "mp-tworker-"  # the thread loader's OS thread names (loaders.thread.NATIVE_NAME_PREFIX)
CPU_MIN_WINDOW_S = 0.5  # CPU times count in 1/100 s: over 0.5 s a rate is good to 0.02 cores


@dataclass(frozen=True)
class CpuCounter:
    """One process's (or thread's) cumulative CPU seconds at its readable samples, the band of the
    chart it adds to, and until when it was alive but unreadable after its last reading."""

    band: str
    t: np.ndarray
    cpu_s: np.ndarray
    unknown_until: float | None = None


def _counters(band: str, t: np.ndarray, cpu: np.ndarray, unknown_until: float | None) -> list[CpuCounter]:
    """Split where the counter goes down (a pid reused by a new process): each part counts on its own."""
    parts = np.split(np.arange(len(t)), np.flatnonzero(np.diff(cpu) < 0) + 1)
    return [
        CpuCounter(band, t[i], cpu[i], unknown_until if k == len(parts) - 1 else None)
        for k, i in enumerate(parts)
        if len(i)
    ]


def process_counters(samples: pd.DataFrame, skip: frozenset[int] = frozenset()) -> list[CpuCounter]:
    """A CPU counter per process of the run (but the pids in ``skip``), banded by its last role:
    main, each worker and rank process apart, every helper process together."""
    if samples.empty or "cpu_s" not in samples:
        return []
    rows = samples[~(samples["missing"].fillna(False).astype(bool) & _ended(samples))].sort_values("t")
    out = []
    for pid, g in rows.groupby("pid", sort=False):
        if pid in skip:
            continue
        ok = ~g["missing"].fillna(False).astype(bool) & g["cpu_s"].notna()
        if not ok.any():
            continue
        t, cpu = g.loc[ok, "t"].to_numpy(float), g.loc[ok, "cpu_s"].to_numpy(float)
        later_failed = g.loc[~ok & (g["t"] > t[-1]), "t"]
        role = g["role"].iloc[-1]
        out += _counters(
            role if is_loader_role(role) else "other processes",
            t,
            cpu,
            float(later_failed.max()) if len(later_failed) else None,
        )
    return out


def thread_counters(threads: pd.DataFrame, main_pid: int) -> list[CpuCounter]:
    """A CPU counter per thread of the main process, banded as the main thread, each loader worker
    thread (by its OS name; a restarted worker joins its band), and the other threads together."""
    if threads.empty or "cpu_s" not in threads:
        return []
    out = []
    for tid, g in threads.dropna(subset=["cpu_s"]).sort_values("t").groupby("tid", sort=False):
        name = str(g["name"].iloc[-1])
        band = (
            "main thread"
            if tid == main_pid
            else f"worker thread {name.removeprefix(THREAD_NAME_PREFIX)}"
            if name.startswith(THREAD_NAME_PREFIX)
            else "other threads"
        )
        out += _counters(band, g["t"].to_numpy(float), g["cpu_s"].to_numpy(float), None)
    return out


def cpu_bands(
    counters: list[CpuCounter], min_dt: float = CPU_MIN_WINDOW_S
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """CPU cores used per band in windows at least ``min_dt`` long: (window midpoints, band -> cores).

    Each counter is interpolated at the window edges and held outside its own life, so a process or
    thread adds what it used while it was sampled and nothing else: one that ends stops adding
    (no drop of its cumulative count), one that could not be read for a few ticks is bridged by its
    counter, and one that stayed unreadable until it ended makes its band unknown (NaN) there."""
    counters = [c for c in counters if len(c.t)]
    if not counters:
        return np.zeros(0), {}
    t0 = min(c.t[0] for c in counters)
    t1 = max(max(c.t[-1], c.unknown_until or c.t[-1]) for c in counters)
    if t1 - t0 < min_dt:
        return np.zeros(0), {}
    edges = np.linspace(t0, t1, max(1, int((t1 - t0) // max(min_dt, (t1 - t0) / 200))) + 1)
    used: dict[str, np.ndarray] = {}
    for c in counters:
        add = np.diff(np.interp(edges, c.t, c.cpu_s))
        if c.unknown_until is not None:
            add[(edges[1:] > c.t[-1]) & (edges[:-1] < c.unknown_until)] = np.nan
        used[c.band] = used.get(c.band, np.zeros(len(add))) + add
    return (edges[:-1] + edges[1:]) / 2, {band: u / np.diff(edges) for band, u in used.items()}


def _band_order(bands: Sequence[str]) -> list[str]:
    threads = [b for b in bands if b == "main thread"] + sorted(
        (b for b in bands if b.startswith("worker thread ")), key=lambda b: (len(b), b)
    )
    processes = role_order([b for b in bands if is_loader_role(b)])
    return threads + processes + [b for b in ("other threads", "other processes") if b in bands]


def _band_color(band: str) -> str:
    if band.startswith("worker thread "):
        k = band.removeprefix("worker thread ")
        return WORKER_COLORS[int(k) % len(WORKER_COLORS)] if k.isdigit() else ROLE_COLORS["other"]
    if band == "main thread":
        return ROLE_COLORS["main"]
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
    mains = samples.loc[samples["role"] == "main", "pid"].unique() if not samples.empty else []
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
    series = [
        Series(
            {
                "type": "scatter",
                "mode": "lines",
                "name": band,
                "stackgroup": "cpu",
                "stackgaps": "interpolate",
                "line": {"width": 0.5, "color": _band_color(band)},
                "fillcolor": _band_color(band),
                "hovertemplate": "%{y:.2f} cores",
            },
            mids,
            bands[band],
        )
        for band in shown
    ]
    total = np.sum([bands[b] for b in bands], axis=0)
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


def shm_mapped(samples: pd.DataFrame) -> pd.Series:
    """Shared memory (RssShmem: /dev/shm files, shared anonymous memory) mapped by the run's
    processes, summed over them at every tick; NaN for a tick with a process that could not be read."""
    if samples.empty or "rss_shmem_mb" not in samples:
        return pd.Series(dtype=float)
    missing = samples["missing"].fillna(False).astype(bool)
    totals = samples[~missing].groupby("t")["rss_shmem_mb"].sum().reindex(np.sort(samples["t"].unique()))
    totals.loc[totals.index.isin(samples[missing & ~_ended(samples)]["t"].unique())] = np.nan
    return totals


def shm_used(samples: pd.DataFrame, min_mb: float = 1.0) -> bool:
    """Whether the run's own processes mapped at least ``min_mb`` of shared memory at some tick (e.g.
    batches handed from worker processes to the main process as tensors in /dev/shm). Judged on the
    run's processes, not on /dev/shm as a whole: that is the whole machine's, and other programs
    create and delete files there while a run goes."""
    mapped = shm_mapped(samples)
    return bool(mapped.notna().any() and mapped.max() >= min_mb)


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
        chart_pss_by_role(f"{prefix}-pss", samples, clock, milestones, max_points=max_points),
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


# -- across runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunLine:
    """One run's line on a chart that compares runs."""

    name: str
    samples: pd.DataFrame
    progress: pd.DataFrame
    color: str
    dash: str = "solid"
    group: str | None = None


def styles(keys: Sequence[str], palette: Sequence[str]) -> dict[str, str]:
    """A stable style per distinct key, in order of first appearance."""
    return {k: palette[i % len(palette)] for i, k in enumerate(dict.fromkeys(keys))}


def chart_runs_pss(
    chart_id: str, title: str, lines: list[RunLine], *, max_points: int = MAX_POINTS
) -> dict | None:
    """Every run's total PSS against items fetched (so runs of different speed line up)."""
    series = []
    for line in lines:
        pss = total_pss(line.samples)
        if pss.empty:
            continue
        clock = Clock.from_progress(line.progress)
        t = pss.index.to_numpy(float)
        trace = {
            "type": "scatter",
            "mode": "lines+markers",
            "name": line.name,
            "connectgaps": False,
            "line": {"color": line.color, "dash": line.dash, "width": 2},
            "marker": {"size": 5},
            "hovertemplate": "%{y:,.0f} MB at %{x:,} items<extra>%{fullData.name}</extra>",
        }
        if line.group:
            trace["legendgroup"] = line.group
        series.append(Series(trace, clock.items_at(t), pss.to_numpy(float)))
    chart = build_chart(
        chart_id,
        "runs_pss",
        title,
        series,
        None,
        "total PSS (MB)",
        Milestones({}),
        max_points=max_points,
        axes=("items",),
    )
    if chart is not None:
        layout = chart["layouts"]["items"]
        layout.update(height=420, hovermode="closest")
        layout["legend"].update(x=1.01)
        layout["margin"]["r"] = 220
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
    colors = styles(groups, SERIES_COLORS)
    data, xs = [], []
    for g in groups:
        mine = {r["label"]: r for r in rows if f"{r['mode']} · {r['workers']}w" == g}
        xs.append([lab for lab in labels if lab in mine])
        data.append(
            {
                "type": "bar",
                "name": g,
                "marker": {"color": colors[g]},
                "y": [_num(float(mine[lab][value])) for lab in labels if lab in mine],
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
