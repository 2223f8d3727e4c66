"""What a run uses besides memory, drawn: CPU by band (main, workers, pin memory, sampler) against
the machine's cores, page faults per process, and /dev/shm (shared-memory tensors). Tables in,
chart specs (:mod:`memprobe.report.chart`) out; :func:`memprobe.report.figures.run_charts` puts them
on the page.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from memprobe.core.series import (
    CPU_MIN_WINDOW_S,
    Clock,
    cpu_bands,
    ended,
    process_counters,
    shm_mapped,
    shm_used,
    thread_counters,
)
from memprobe.core.vocabulary import MAIN, OTHER, is_loader_role, is_worker_role, role_order
from memprobe.report import groups
from memprobe.report.chart import (
    ROLE_COLORS,
    WORKER_COLORS,
    Milestones,
    Series,
    build_chart,
    role_color,
)
from memprobe.report.lifelines import process_lines, process_trace

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
    workers = process_lines(rows, is_worker_role)
    lines = workers or process_lines(rows, is_loader_role)
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
                {**process_trace(name, role), "mode": "lines", "hovertemplate": "%{y:,.0f} faults"},
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
    recorded its threads: thread-mode loaders), with the total on top.

    Long because the chart is one plotly spec, its traces and axes read top to bottom."""
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
