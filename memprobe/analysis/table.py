"""The per-process table of a recorded job (summary.json ``processes``): every process's
:class:`~memprobe.analysis.growth.Growth` in the order the report lists them, with its
growth per 1,000 items, and the USS estimate's error against exact readings.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from memprobe.analysis.growth import Growth, process_growth
from memprobe.analysis.process import Proc
from memprobe.analysis.processes import processes
from memprobe.core import vocabulary
from memprobe.core.tree_rules import ESTIMATE_FLOOR_MB
from memprobe.core.vocabulary import LAUNCHER, MAIN, RANK, WORKER_KINDS

# -- items -----------------------------------------------------------------------------------------


def items_between(progress: pd.DataFrame, t0: float, t1: float) -> float:
    """Items the job counted (memprobe.mark) between ``t0`` and ``t1``."""
    if progress.empty or "items" not in progress:
        return 0.0
    p = progress.sort_values("t")
    t, items = p["t"].to_numpy(float), np.maximum.accumulate(p["items"].to_numpy(float))

    def at(x: float) -> float:
        i = int(np.searchsorted(t, x, side="right")) - 1
        return float(items[i]) if i >= 0 else 0.0

    return max(at(t1) - at(t0), 0.0)


def with_items(rows: list[Growth], progress: pd.DataFrame) -> list[Growth]:
    """Growth per 1,000 items: a worker's items are the job's over its window, shared with the
    workers alive at its middle; a parent's are the job's over its window."""
    out = []
    for g in rows:
        if g.growth_mb is None or g.baseline_t is None or g.last_t is None:
            out.append(g)
            continue
        items = items_between(progress, g.baseline_t, g.last_t)
        tail = items_between(progress, g.tail_from_t, g.last_t) if g.tail_from_t is not None else 0.0
        if g.worker >= 0 or g.kind in WORKER_KINDS:
            alive = _alive_at((g.baseline_t + g.last_t) / 2, rows)
            items /= alive
            tail /= _alive_at((g.tail_from_t + g.last_t) / 2, rows) if g.tail_from_t is not None else alive
        out.append(
            replace(
                g,
                growth_per_1k_items_mb=g.growth_mb / (items / 1000) if items >= 1 else None,
                tail_per_1k_items_mb=g.tail_rise_mb / (tail / 1000)
                if g.tail_rise_mb is not None and tail >= 1
                else None,
            )
        )
    return out


def _alive_at(t: float, rows: list[Growth]) -> int:
    """How many workers' windows hold ``t`` (at least 1): the items are shared among them."""
    alive = sum(
        1
        for w in rows
        if w.kind in WORKER_KINDS
        and w.baseline_t is not None
        and w.last_t is not None
        and w.baseline_t <= t <= w.last_t
    )
    return max(alive, 1)


# -- the estimate's error ------------------------------------------------------------------------


def estimate_error(samples: pd.DataFrame, sampler: dict | None = None) -> dict | None:
    """The USS estimate against the next exact reading: the sampler's own check where it made one
    (the estimate at the very moment of the reading; intervals with a fork or a sharer's exit,
    which the counters cannot see, apart: ``n_events``, ``events_median_pct``), else the last
    estimate (``uss_est_mb``) before each exact reading of at least 10 MB: {median_pct, max_pct,
    max_mb, n}; None without estimates."""
    own = (sampler or {}).get("estimate_error")
    if isinstance(own, dict) and own.get("n"):
        return own
    if samples.empty or "uss_est_mb" not in samples or samples["uss_est_mb"].isna().all():
        return None
    rows = samples[~samples["missing"].fillna(False).astype(bool)].sort_values(["pid", "t"])
    exact = ((rows["tier"] == "pss") & rows["uss_mb"].notna()).to_numpy()
    # Rows after a process's k-th exact reading form stretch k; an exact reading closes the
    # stretch before it, whose last estimate it is checked against.
    stretch = pd.Series(exact, index=rows.index).groupby(rows["pid"]).cumsum()
    est = pd.to_numeric(rows["uss_est_mb"], errors="coerce")
    last = est.groupby([rows["pid"], stretch]).last()
    key = pd.MultiIndex.from_arrays([rows["pid"][exact], stretch[exact] - 1])
    before = last.reindex(key).to_numpy(float)
    uss = pd.to_numeric(rows["uss_mb"][exact], errors="coerce").to_numpy(float)
    keep = ~np.isnan(before) & (uss >= ESTIMATE_FLOOR_MB)
    if not keep.any():
        return None
    diff = np.abs(before[keep] - uss[keep])
    pct = diff / uss[keep] * 100
    return {
        "median_pct": float(np.median(pct)),
        "max_pct": float(pct.max()),
        "max_mb": float(diff.max()),
        "n": int(keep.sum()),
    }


# -- the run -------------------------------------------------------------------------------------------


def table(
    meta: dict, samples: pd.DataFrame, progress: pd.DataFrame, procs: list[Proc] | None = None
) -> list[Growth]:
    """The per-process table: every process of the tree (``procs``, :func:`processes` where not
    given), parents first, then per rank."""
    procs = processes(meta) if procs is None else procs
    milestones = meta.get("milestones") or {}
    # Each process's own rows once: an hour-long job has hundreds of thousands of rows.
    own = dict(tuple(samples.groupby("pid", sort=False))) if not samples.empty else {}
    rows = [process_growth(p, own.get(p.pid, samples.iloc[0:0]), procs, milestones) for p in procs]
    rows = [replace(g, denied=denied_reason(own.get(g.pid))) for g in rows]
    return sorted(with_items(rows, progress), key=order)


def denied_reason(rows: pd.DataFrame | None) -> str | None:
    """The first reason among a process's rows that says memprobe may not read its memory map."""
    if rows is None or rows.empty or "reason" not in rows:
        return None
    said = [r for r in rows["reason"].dropna() if vocabulary.denied(r)]
    return str(said[0]) if said else None


def order(g: Growth) -> tuple:
    """main/launcher first; then per rank (none first): the rank process, its workers by start, the rest."""
    place = (
        0
        if g.kind in (MAIN, LAUNCHER)
        else 1
        if g.kind == RANK
        else 2
        if g.worker >= 0 or g.kind in WORKER_KINDS
        else 3
    )
    first = g.first_t if g.first_t is not None else math.inf
    return (place > 0, g.rank, place, g.generation or 0, first, g.pid)
