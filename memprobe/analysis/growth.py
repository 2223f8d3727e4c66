"""Growth of every process of a recorded job (``memprobe record`` / ``watch``): pure functions
of a run's samples and meta. The verdict and the culprit in words built on it are
:mod:`memprobe.analysis.culprit`, the projection :mod:`memprobe.analysis.projection`, the job's summary
:mod:`memprobe.analysis.recorded`.

A job memprobe did not write has no warm and done points that fit every process, so each
process is measured over the window that fits what it is:

* a **forked worker** (DataLoader fork worker, ``os.fork``, a fork Pool...) starts sharing every
  page of its parent: USS 0 and no minor faults at its start. Its growth runs from then to its
  last exact reading alive.
* a **spawn / exec worker** first boots an interpreter and unpickles what it was given: its
  start-up copy (``startup_mb``) is not growth. It counts from the first exact reading after its
  RSS held still while it ran (:func:`memprobe.core.tree_rules.startup_end`; the sampler reads it
  then), 10 s after its start or half-way through its life, whichever comes first; a torch
  DataLoader worker counts from when torch renamed it (after unpickling).
* a **parent** (main, launcher, rank) counts from just before its first worker started to its
  last tick while it had workers; what it held then, above its first reading, is what it
  built (``built_mb``). A parent without workers counts from the job's first ``memprobe.mark``
  (iteration), else from its first reading.

Where exact readings are too sparse for that (a worker that lived and ended between them), the
sampler's USS estimate (``uss_est_mb``, from minor faults and RSS, calibrated at every exact
reading) stands in, and the table says so.

A process's USS also moves for reasons that are not its own: pages it shares become private when
the sharers copy them or exit, and its private pages become shared when it forks. So over each
interval between two exact readings a worker's own growth is the rise its minor faults can
explain (each fault maps at most one 4 KiB page, a huge-page fault one AnonHugePages block), and
a fall counts only as far as its RSS fell too. A parent's own growth is the new memory it
allocates: the rise of its anonymous RSS (read every tick), the same however often it was read
(its own writes to the pages its workers share fault too, and summed over many short intervals
those copies once made a parent look +65 MB "grown"). The rest is ``released_mb`` (pages made
private by others, positive), ``written_mb`` (a parent's pages made private by its own writes)
and ``shared_mb`` (pages shared at a fork, negative): stated, never judged.

The modules of this analysis: :mod:`memprobe.analysis.process` (what a process is),
:mod:`memprobe.analysis.processes` (every process of a run, as its meta lists them; an older
meta's list is completed on load, :mod:`memprobe.results.upgrade`), :mod:`memprobe.analysis.windows` (the
window of each kind), this one (own growth between readings, and each process's row) and
:mod:`memprobe.analysis.table` (the table, items, the estimate's error). The total PSS is
:mod:`memprobe.core.series`'s, the same as a scenario's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from memprobe.analysis.process import Proc, own_workers, owner
from memprobe.analysis.shape import growth_shape
from memprobe.analysis.windows import baseline, before_teardown, between_generations, renamed_t, settled_t
from memprobe.core.summary import first, last
from memprobe.core.system import PAGE_SIZE
from memprobe.core.tree_rules import LEVEL_MIN_S, LEVEL_NOISE_MB, LEVEL_SHARE, LEVEL_TAIL_S
from memprobe.core.vocabulary import MAIN, PARENT_KINDS, RANK, WORKER_KINDS

PAGE_MB = PAGE_SIZE / 2**20
ESTIMATE_EXTENDS_MB = (
    5.0  # a worker's estimate past its last exact reading beyond this counts, marked estimated
)


# -- own growth between exact readings --------------------------------------------------------------


def exact_readings(samples: pd.DataFrame, pid: int) -> pd.DataFrame:
    """A process's exact (PSS/USS) readings, in time order."""
    rows = samples[(samples["pid"] == pid) & (samples["tier"] == "pss") & samples["uss_mb"].notna()]
    return rows.sort_values("t")


def interval_own(d_uss: Any, d_rss: Any, d_faults_mb: Any) -> Any:
    """The part of a USS change between two exact readings that the process made itself: a rise
    as far as its faults can explain it, a fall as far as its RSS fell too (a fall beyond that is
    pages that became shared). Numbers or arrays; None or NaN for a counter not known."""
    d_uss = np.asarray(d_uss, dtype=float)
    d_rss = np.asarray(np.nan if d_rss is None else d_rss, dtype=float)
    faults = np.asarray(np.nan if d_faults_mb is None else d_faults_mb, dtype=float)
    rise = np.where(np.isnan(faults), d_uss, np.minimum(d_uss, np.maximum(faults, 0.0)))
    fall = np.where(np.isnan(d_rss), d_uss, np.minimum(0.0, np.maximum(d_uss, d_rss)))
    own = np.where(d_uss > 0, rise, fall)
    return float(own) if own.ndim == 0 else own


def _with_late_faults(own: np.ndarray, d_uss: np.ndarray, faults: np.ndarray) -> np.ndarray:
    """``own`` with each interval's rise that its faults left unexplained explained by later
    faults not used by later rises. A row's counters (read first in a tick) and its USS (read
    later in the same tick, tens of ms under load) are not simultaneous: a worker copying fast
    shows a rise one reading and its faults the next, and interval by interval ``min(rise,
    faults)`` lost most of it at a 5 % budget (52 MB of the 94 MB the worker found it had)."""
    out = own.copy()
    pending = spare = 0.0
    for i in range(len(own)):
        if np.isnan(faults[i]) or np.isnan(d_uss[i]):
            continue
        rise = max(float(d_uss[i]), 0.0)
        pending += rise - min(rise, float(own[i]) if own[i] > 0 else 0.0)
        spare += max(float(faults[i]), 0.0) - max(float(own[i]), 0.0)
        late = min(pending, max(spare, 0.0))
        out[i] += late
        pending -= late
        spare -= late
    return out


@dataclass(frozen=True)
class Split:
    own_mb: float
    released_mb: float  # pages that became private because others copied them or exited
    shared_mb: float  # pages that became shared (a fork): a fall that is not memory freed
    written_mb: float = 0.0  # a parent's: pages its own writes made private (copy-on-write of shared pages)


def split_growth(readings: pd.DataFrame, origin: dict | None = None, *, parent: bool = False) -> Split:
    """Own growth over consecutive exact readings (``origin``: a starting point that is not a
    reading, such as a forked child's USS 0 and no faults at its start).

    ``parent``: a parent's own growth is the new memory it allocates, the rise of its anonymous
    RSS: a copy-on-write fault (its own write to a page its children share, or theirs) replaces
    one anonymous page by another, and a sharer's exit changes nothing in it, so that rise is the
    same however often the process was read. Its USS rise beyond that is not growth: pages its
    own writes made private (as far as its faults beyond the new memory go, ``written_mb``),
    the rest made private by its children copying or exiting (``released_mb``)."""

    def column(name: str) -> np.ndarray:
        values = (
            pd.to_numeric(readings[name], errors="coerce").to_numpy(float)
            if name in readings
            else np.full(len(readings), np.nan)
        )
        first = origin.get(name) if origin else None
        head = [np.nan if first is None or pd.isna(first) else float(first)] if origin else []
        return np.concatenate([head, values])

    uss, rss, minflt, huge = (column(c) for c in ("uss_mb", "rss_mb", "minflt", "anon_huge_mb"))
    if len(uss) < 2:
        return Split(0.0, 0.0, 0.0)
    d_uss, d_flt = np.diff(uss), np.diff(minflt)
    d_flt[d_flt < 0] = np.nan  # not the same process's counter
    faults = d_flt * PAGE_MB + np.maximum(np.nan_to_num(np.diff(huge)), 0.0)
    written = np.zeros(len(d_uss))
    d_anon = np.diff(column("rss_anon_mb")) if parent else np.full(len(d_uss), np.nan)
    if parent and not np.isnan(d_anon).all():
        own = np.nan_to_num(d_anon)
        rest = d_uss - own
        written = np.clip(np.minimum(rest, np.nan_to_num(faults) - own), 0.0, None)
        rest = rest - written
    else:  # a worker, or results without anonymous RSS
        own = _with_late_faults(interval_own(d_uss, np.diff(rss), faults), d_uss, faults)
        rest = d_uss - own
        # A rise explained one interval late leaves +x then -x: not pages others moved.
        both = min(float(rest[rest > 0].sum()), float(-rest[rest < 0].sum()))
        return Split(float(own.sum()), float(rest[rest > 0].sum()) - both, float(rest[rest < 0].sum()) + both)
    return Split(
        float(own.sum()), float(rest[rest > 0].sum()), float(rest[rest < 0].sum()), float(written.sum())
    )


# -- per process -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Growth:
    """One row of the per-process table (summary.json ``processes``)."""

    pid: int
    role: str
    kind: str
    rank: int
    worker: int
    generation: int | None
    start_method: str | None
    # When it was read exactly, its window (from baseline_t; None without one) and what
    # happened over it; what a parent built before it, a spawned worker's start-up copy.
    first_t: float | None = None
    last_t: float | None = None
    baseline_t: float | None = None
    pss_samples: int = 0
    uss_start_mb: float | None = None
    uss_end_mb: float | None = None
    growth_mb: float | None = None
    built_mb: float | None = None
    startup_mb: float | None = None
    released_mb: float | None = None
    shared_mb: float | None = None
    growth_mb_per_min: float | None = None
    growth_per_1k_items_mb: float | None = None
    judged: bool = False
    parent_pid: int | None = None
    start_t: float | None = None  # the process's own start (may be before the first tick)
    end_t: float | None = None  # first seen gone (its last tick alive while it ran to the end)
    estimated: bool = False  # no exact reading in its window: growth from the sampler's estimate
    written_mb: float | None = None  # a parent's pages its own writes made private: not growth
    # A parent's USS just before its first worker started: what its forks share (its USS after
    # the fork counts those pages as shared), and what a worker's full copy would hold.
    held_mb: float | None = None
    # A forked worker's new memory (at least): the rise of its anonymous RSS over its window. The
    # rest of its growth is its parent's pages it copied (copy-on-access). None where not known.
    allocated_mb: float | None = None
    # A parent's memory built while none of its workers lived, between two generations of them:
    # like ``built_mb``, not growth. None without such a gap.
    built_between_mb: float | None = None
    # When its DataLoader thread workers were first seen (None: it had none); its window opens there.
    threads_first_t: float | None = None
    # A worker's USS stopped rising before its window ended (None: its window is too short to say),
    # judged over its last third from ``tail_from_t``, where it rose ``tail_rise_mb`` (its pace
    # there per 1,000 items: ``tail_per_1k_items_mb``, memprobe.analysis.table).
    levelled: bool | None = None
    tail_from_t: float | None = None
    tail_rise_mb: float | None = None
    tail_per_1k_items_mb: float | None = None
    # Why the kernel refused memprobe its memory map (the sampler's reason: another user's
    # process); None when it was readable. Such a process is left out of total PSS.
    denied: str | None = None
    # A parent's own growth: a steady rise or steps as its worker generations began
    # (memprobe.analysis.shape); None: neither, too small, or not a parent.
    shape: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_growth(p: Proc, samples: pd.DataFrame, procs: list[Proc], milestones: dict) -> Growth:
    """A process's own growth over its window (see the module doc); ``samples`` may hold only its rows."""
    by_pid = {q.pid: q for q in procs}
    # A main process or rank with no worker: nothing but its own allocation raises its RSS.
    alone = p.kind in (MAIN, RANK) and not any(
        q.is_worker and (owner(q, by_pid) or q).pid == p.pid for q in procs
    )
    if p.is_worker or alone:  # what it freed as it exited is not what it held (see before_teardown)
        samples = before_teardown(samples, p.pid)
    readings = exact_readings(samples, p.pid)
    base = baseline(p, readings, samples, procs, milestones)
    window, origin, built, startup = base
    up = owner(p, by_pid) if p.is_worker else None
    # Who it is (its Proc), when it was read exactly, and what it held before its window: a
    # process with no window keeps these and is not judged.
    empty = Growth(
        pid=p.pid,
        role=p.role,
        kind=p.kind,
        rank=p.rank,
        worker=p.worker,
        generation=p.generation,
        start_method=p.start_method,
        parent_pid=up.pid if up else None,
        start_t=p.start_t,
        end_t=p.end_t if p.end_t is not None else p.last_t,
        threads_first_t=p.threads_first_t,
        first_t=first(readings["t"]),
        last_t=last(readings["t"]),
        pss_samples=len(readings),
        uss_end_mb=last(readings["uss_mb"]),
        built_mb=built,
        startup_mb=startup,
    )
    if window is None or (origin is None and len(window) < 2) or window.empty:
        return (
            _with_levelled(_with_allocated(_estimated(empty, p, samples), p, samples), samples)
            if p.is_worker
            else empty
        )
    split = split_growth(window, origin, parent=p.is_parent)
    t0 = origin["t"] if origin else float(window["t"].iloc[0])
    t1 = float(window["t"].iloc[-1])
    start_uss = origin["uss_mb"] if origin else float(window["uss_mb"].iloc[0])
    between, gap_s = between_generations(p, samples, procs, t0, t1) if p.is_parent else (None, 0.0)
    own = split.own_mb - (between or 0.0)
    rate = own / (t1 - t0 - gap_s) * 60 if t1 - t0 - gap_s > 0.5 else None
    g = replace(
        empty,
        baseline_t=t0,
        last_t=t1,
        uss_start_mb=start_uss,
        uss_end_mb=float(window["uss_mb"].iloc[-1]),
        growth_mb=own,
        built_between_mb=between,
        released_mb=split.released_mb,
        shared_mb=split.shared_mb,
        written_mb=split.written_mb if p.is_parent else None,
        held_mb=_held(readings, built) if p.is_parent and _read_before_workers(p, readings, procs) else None,
        growth_mb_per_min=rate,
        judged=p.is_worker or p.is_parent,
        shape=growth_shape(p, samples, procs, t0, t1) if p.is_parent else None,
    )
    if p.is_worker:
        return _with_levelled(_with_allocated(_estimated_to_end(g, samples, p.forked), p, samples), samples)
    if alone:
        # Its growth after its last exact reading is the estimate's, bounded by its RSS rise (a
        # launcher's children are ranks: their exits move its pages, not it). The sampler reads
        # a process whose estimate it trusts only now and then: a loop keeping 120 MB in 3.7 s
        # was read at 0-1.3 s alone and judged +32 to +42 MB, "flat", in two runs of three.
        return _estimated_to_end(g, samples, forked=False)
    return g


def _with_levelled(g: Growth, samples: pd.DataFrame) -> Growth:
    """Whether a worker's USS levelled off: over the last third of its window (at least
    ``LEVEL_TAIL_S``), it rose less than ``LEVEL_SHARE`` of its growth, by its exact readings and
    the sampler's estimate between them. None where its window is too short to say. A forked
    worker that copied 40 % of its parent's pages and stopped is no full copy in the making."""
    if g.growth_mb is None or g.baseline_t is None or g.last_t is None or g.uss_start_mb is None:
        return g
    span = g.last_t - g.baseline_t
    if span < LEVEL_MIN_S:
        return g
    rows = samples[(samples["pid"] == g.pid) & ~samples["missing"].fillna(False).astype(bool)]
    exact = rows["uss_mb"].where(rows["tier"] == "pss")
    est = pd.to_numeric(rows["uss_est_mb"], errors="coerce") if "uss_est_mb" in rows else exact * np.nan
    curve = pd.DataFrame({"t": rows["t"], "v": exact.fillna(est)}).dropna()
    curve = curve[(curve["t"] > g.baseline_t) & (curve["t"] <= g.last_t + 1e-9)]
    start = pd.DataFrame({"t": [g.baseline_t], "v": [g.uss_start_mb]})  # a forked worker's USS 0 at its fork
    curve = pd.concat([start, curve]).sort_values("t")
    tail_from = g.last_t - max(span / 3, LEVEL_TAIL_S)
    before = curve[curve["t"] <= tail_from]
    if before.empty or curve["t"].iloc[-1] <= tail_from:
        return g
    rise = float(curve["v"].iloc[-1]) - float(before["v"].iloc[-1])
    return replace(
        g,
        levelled=rise < LEVEL_SHARE * max(g.growth_mb, 0.0) + LEVEL_NOISE_MB,
        tail_from_t=tail_from,
        tail_rise_mb=rise,
    )


def _with_allocated(g: Growth, p: Proc, samples: pd.DataFrame) -> Growth:
    """A forked worker's growth split: ``allocated_mb``, the rise of its anonymous RSS from its
    first tick to the end of its window. A copy-on-access fault replaces a shared anonymous page
    by a private one and leaves RSS as it was; only memory the worker allocates adds anonymous
    pages. A lower bound: what a child allocated before its first tick is not seen (its parent's
    anonymous RSS at the tick before the fork is no start either: a parent still building moves
    it by tens of MB between ticks). HF ``datasets.map(num_proc=4)``'s pool workers allocated
    30-36 MB of their ~134 MB; its manager process 87 MB of 97."""
    if not p.forked or g.growth_mb is None or g.last_t is None or "rss_anon_mb" not in samples:
        return g
    rows = samples.assign(anon=pd.to_numeric(samples["rss_anon_mb"], errors="coerce"))
    rows = rows.dropna(subset=["anon"]).sort_values("t")
    upto = rows[rows["t"] <= g.last_t + 1e-9]
    if len(upto) < 2:
        return g
    return replace(g, allocated_mb=max(0.0, float(upto["anon"].iloc[-1] - rows["anon"].iloc[0])))


def _read_before_workers(p: Proc, readings: pd.DataFrame, procs: list[Proc]) -> bool:
    """Whether a parent was read exactly before its first worker started: where it was not, its
    first reading holds its pages as shared already, and what it held is not known."""
    mine = own_workers(p, procs)
    return not mine or readings.empty or float(readings["t"].iloc[0]) < min(q.start_t for q in mine)


def _held(readings: pd.DataFrame, built: float | None) -> float | None:
    """A parent's USS just before its first worker: its first reading plus what it built."""
    if built is None or readings.empty:
        return None
    return float(readings["uss_mb"].iloc[0]) + built


def _estimated_to_end(g: Growth, samples: pd.DataFrame, forked: bool = True) -> Growth:
    """A worker (or a parent with none) that went on growing after its last exact reading (it
    ended before the next one):
    its growth to its last tick alive, by the estimate calibrated at that reading, marked as
    estimated. A worker's copy often happens in its last seconds of an epoch. A worker that was
    not forked has no parent's pages to copy: what it gains of its own is new memory, so no more
    than its RSS rose (a forkserver worker that freed and allocated its batches again faulted
    18 MB at flat RSS, and the estimate drifted with its faults)."""
    if "uss_est_mb" not in samples or g.last_t is None or g.growth_mb is None or g.uss_end_mb is None:
        return g
    later = samples[
        (samples["pid"] == g.pid) & (samples["t"] > g.last_t) & ~samples["missing"].fillna(False).astype(bool)
    ].sort_values("t")
    est = pd.to_numeric(later["uss_est_mb"], errors="coerce").dropna()
    if est.empty or float(est.iloc[-1]) - g.uss_end_mb < ESTIMATE_EXTENDS_MB:
        return g
    t1, end = float(later.loc[est.index[-1], "t"]), float(est.iloc[-1])
    # Its own growth goes as far as its own faults since that reading (the estimate's sharers'
    # term once put a worker at 175 MB with 94 MB of faults in all).
    own = samples[(samples["pid"] == g.pid) & (samples["t"] >= g.last_t)].sort_values("t")
    flt = pd.to_numeric(own["minflt"], errors="coerce").dropna()
    faults_mb = float(flt.iloc[-1] - flt.iloc[0]) * PAGE_MB if len(flt) >= 2 else math.inf
    rise = min(end - g.uss_end_mb, faults_mb)
    if not forked:
        rss = pd.to_numeric(own.loc[own["t"] <= t1, "rss_mb"], errors="coerce").dropna()
        rise = min(rise, max(float(rss.iloc[-1] - rss.iloc[0]), 0.0)) if len(rss) >= 2 else rise
        if rise < ESTIMATE_EXTENDS_MB:
            return g
        end = g.uss_end_mb + rise
    growth = g.growth_mb + rise
    t0 = g.baseline_t if g.baseline_t is not None else g.last_t
    return replace(
        g,
        last_t=t1,
        uss_end_mb=end,
        growth_mb=growth,
        estimated=True,
        growth_mb_per_min=growth / (t1 - t0) * 60 if t1 - t0 > 0.5 else None,
    )


def _estimated(g: Growth, p: Proc, samples: pd.DataFrame) -> Growth:
    """A worker with too few exact readings in its window (one that lived and ended between
    them): its growth from the sampler's estimate at its last tick alive, marked as estimated.
    A forked worker's start is exact (USS 0 at fork); a spawned one starts at its value when its
    start-up ended. Judged on it, because leaving it out would call a job whose workers all
    copied flat."""
    if "uss_est_mb" not in samples:
        return g
    rows = samples[(samples["pid"] == p.pid) & ~samples["missing"].fillna(False).astype(bool)].sort_values(
        "t"
    )
    value = (
        rows["uss_mb"].where(rows["tier"] == "pss").fillna(pd.to_numeric(rows["uss_est_mb"], errors="coerce"))
    )
    rows = rows.assign(value=value).dropna(subset=["value"])
    if p.forked:
        t0, base, startup = p.start_t, 0.0, None
    else:
        since = renamed_t(samples, p.pid)
        after = rows[rows["t"] >= (since if since is not None else settled_t(samples, p)) - 1e-9]
        if len(after) < 2:
            return g
        t0, base = float(after["t"].iloc[0]), float(after["value"].iloc[0])
        startup = base
    if rows.empty or float(rows["t"].iloc[-1]) <= t0:
        return g
    t1, end = float(rows["t"].iloc[-1]), float(rows["value"].iloc[-1])
    if not p.forked:  # new memory of its own, no more than its RSS rose (see _estimated_to_end)
        rss = pd.to_numeric(rows.loc[rows["t"] >= t0, "rss_mb"], errors="coerce").dropna()
        if len(rss) >= 2:
            end = base + min(end - base, max(float(rss.iloc[-1] - rss.iloc[0]), 0.0))
    rate = (end - base) / (t1 - t0) * 60 if t1 - t0 > 0.5 else None
    return replace(
        g,
        baseline_t=t0,
        last_t=t1,
        uss_start_mb=base,
        uss_end_mb=end,
        growth_mb=end - base,
        startup_mb=startup,
        growth_mb_per_min=rate,
        judged=True,
        estimated=True,
    )


# -- judged rows ---------------------------------------------------------------------------------


def grown(g: Growth) -> float:
    """A judged process's own growth (judged rows always have one)."""
    return g.growth_mb if g.growth_mb is not None else 0.0


def judged_workers(rows: list[Growth]) -> list[Growth]:
    return [g for g in rows if g.judged and g.kind in WORKER_KINDS and g.growth_mb is not None]


def judged_parents(rows: list[Growth]) -> list[Growth]:
    return [g for g in rows if g.judged and g.kind in PARENT_KINDS and g.growth_mb is not None]
