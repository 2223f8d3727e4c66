"""A results folder as a Chrome/Perfetto trace (the Trace Event Format's JSON object form): per
process a counter track for each of RSS, PSS and USS in MB (``"ph": "C"``, its pid, at each
reading), its name with its role as metadata (``"ph": "M"``: ``process_name``, its command line
as ``process_labels``, role order as ``process_sort_index``), the job's total PSS as a counter of
its first process, and the milestones and OOM kills as global instant events (``"ph": "i"``,
``"s": "g"``).

Time: ``ts`` is in microseconds after ``baseTimeNanoseconds`` (the whole Unix second the folder's
first run started in), the convention torch.profiler's ``export_chrome_trace`` follows since
torch 2.4; so ``baseTimeNanoseconds / 1000 + ts`` is Unix time in microseconds in both, and a
memprobe trace and a torch.profiler trace of the same job line up once one is shifted by the
difference of their bases (``docs/export.md``). A folder whose run does not say when it started
(none of memprobe's lacks it) gets no base, and ``ts`` counts from the run's start.

PSS and USS are the exact readings as taken (a recorded job reads a process exactly where its
memory moved: the counter holds its value between readings, as the sampler held it); RSS is read
at every tick, and so is a recorded job's USS estimate (``uss_est_mb``: the sampler's, from page
faults, between exact readings; the report draws it dotted). A process that ended drops to 0 at its last row; one that could not be read
adds nothing (missing is not zero: the counter keeps its last reading).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from memprobe import __version__
from memprobe.core import series
from memprobe.export.source import RunView

COUNTERS = (("RSS", "rss_mb"), ("PSS", "pss_mb"), ("USS", "uss_mb"), ("USS estimate", "uss_est_mb"))
# Read at every tick where the row has it: RSS, and a recorded job's USS estimate between exact readings.
EVERY_TICK = ("rss_mb", "uss_est_mb")
TOTAL = "total PSS (job)"


def trace(runs: list[RunView], manifest: dict) -> dict[str, Any]:
    """The trace of ``runs`` (a folder's, :func:`memprobe.export.source.runs_of`), as a JSON-ready
    object (:func:`dumps` writes it)."""
    starts = [r.started for r in runs if r.started is not None]
    base = math.floor(min(starts)) if starts else None
    events: list[dict[str, Any]] = []
    for run in runs:
        offset = run.started - base if base is not None and run.started is not None else 0.0
        events += run_events(run, offset, f"{run.run_id}: " if len(runs) > 1 else "")
    out: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if base is not None:
        out["baseTimeNanoseconds"] = base * 1_000_000_000
    out["otherData"] = {
        "writer": f"memprobe {__version__}",
        "kind": manifest.get("kind"),
        "name": manifest.get("scenario"),
        "clock": "ts: microseconds after baseTimeNanoseconds (Unix time)"
        if base is not None
        else "ts: microseconds since the run started",
    }
    return out


def dumps(obj: dict[str, Any]) -> str:
    """The trace as JSON text: strings escaped by JSON's rules (any character outside ASCII as
    ``\\uXXXX``), no NaN (not JSON)."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n"


def run_events(run: RunView, offset: float, prefix: str) -> list[dict[str, Any]]:
    """One run's events; its times shifted by ``offset`` seconds (its start after the trace's
    base), its process names led by ``prefix`` (the run's id, in a folder of several runs)."""

    def ts(t: float) -> float:
        return round((offset + t) * 1e6, 3)

    events: list[dict[str, Any]] = []
    for i, p in enumerate(run.processes()):
        meta = {"ph": "M", "pid": p.pid, "tid": p.pid}
        events.append({**meta, "name": "process_name", "args": {"name": f"{prefix}{p.name}"}})
        events.append({**meta, "name": "process_sort_index", "args": {"sort_index": i}})
        if p.command:
            events.append({**meta, "name": "process_labels", "args": {"labels": p.command}})
    events += counter_events(run.samples, ts)
    main = run.main_pid()
    if main is None:
        return events
    for t, total in run.total_pss.items():
        events.append(
            {
                "ph": "C",
                "name": TOTAL,
                "pid": main,
                "tid": main,
                "ts": ts(float(t)),
                "args": {"MB": _mb(total)},
            }
        )
    for m in [*run.milestones(), *run.oom_kills()]:
        events.append(
            {
                "ph": "i",
                "s": "g",
                "name": m.what,
                "cat": "memprobe.oom" if m.oom else "memprobe.milestone",
                "pid": main,
                "tid": main,
                "ts": ts(m.t),
                "args": {"t_s": round(m.t, 4), "run": run.run_id},
            }
        )
    return events


def counter_events(samples: pd.DataFrame, ts: Any) -> list[dict[str, Any]]:
    """RSS (and the USS estimate) at every readable row that has it, PSS and USS at exact
    readings, 0 for each where a process ended; a row that could not be read gives nothing."""
    if samples.empty or "pid" not in samples:
        return []
    rows = samples.sort_values("t", kind="stable")
    missing = (
        rows["missing"].fillna(False).astype(bool)
        if "missing" in rows
        else pd.Series(False, index=rows.index)
    )
    gone = missing & series.ended(rows)
    exact = (rows["tier"] == "pss").to_numpy() if "tier" in rows else [False] * len(rows)
    values = {
        column: pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
        if column in rows
        else [math.nan] * len(rows)
        for _, column in COUNTERS
    }
    events: list[dict[str, Any]] = []
    for i, (pid, t) in enumerate(zip(rows["pid"].to_numpy(), rows["t"].to_numpy(float), strict=True)):
        for name, column in COUNTERS:
            if gone.iat[i]:
                value: float | None = 0.0 if column in rows else None
            elif missing.iat[i] or (column not in EVERY_TICK and not exact[i]):
                value = None
            else:
                value = _mb(values[column][i])
            if value is not None:
                events.append(
                    {
                        "ph": "C",
                        "name": name,
                        "pid": int(pid),
                        "tid": int(pid),
                        "ts": ts(float(t)),
                        "args": {"MB": value},
                    }
                )
    return events


def _mb(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return round(f, 3) if math.isfinite(f) else None
