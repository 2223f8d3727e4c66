"""Growth of every process of a recorded job (``memprobe record`` / ``watch``): pure functions
of a run's samples and meta.

A job memprobe did not write has no warm and done points that fit every process, so each
process is measured over the window that fits what it is:

* a **forked worker** (DataLoader fork worker, ``os.fork``, a fork Pool...) starts sharing every
  page of its parent: USS 0 and no minor faults at its start. Its growth runs from then to its
  last exact reading alive.
* a **spawn / exec worker** first boots an interpreter and unpickles what it was given: its
  start-up copy (``startup_mb``) is not growth. It counts from the first exact reading after its
  RSS held still (less than 1 MB over half a second) or 10 s after its start, whichever comes
  first; a torch DataLoader worker counts from when torch renamed it (after unpickling).
* a **parent** (main, launcher, rank) counts from just before its first worker started to its
  last reading while it had workers; what it held then, above its first reading, is what it
  built (``built_mb``). A parent without workers counts from the job's first ``memprobe.mark``
  (iteration), else from its first reading.

Where exact readings are too sparse for that (a worker that lived and ended between them, a
parent that kept building after its last one), the sampler's USS estimate (``uss_est_mb``, from
minor faults and RSS, calibrated at every exact reading) stands in, and the table says so.

A process's USS also moves for reasons that are not its own: pages it shares become private when
the sharers copy them or exit, and its private pages become shared when it forks. So over each
interval between two exact readings its own growth is the rise its minor faults can explain
(each fault maps at most one 4 KiB page, a huge-page fault one AnonHugePages block), and a fall
counts only as far as its RSS fell too. The rest is ``released_mb`` (pages made private by
others, positive) and ``shared_mb`` (pages shared at a fork, negative): stated, never judged.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # analysis imports this module
    from memprobe.analysis import RunSummary

PAGE_MB = 4096 / 2**20
WORKER_KINDS = ("dataloader", "fork", "spawn", "exec")
PARENT_KINDS = ("main", "launcher", "rank")
STILL_MB, STILL_S, STARTUP_MAX_S = 1.0, 0.5, 10.0
ESTIMATE_FLOOR_MB = 10.0  # estimate errors are percentages of readings at least this large
RELEASED_WORTH_MB = 10.0  # pages made private by others worth a sentence in the culprit
ESTIMATE_EXTENDS_MB = (
    5.0  # a worker's estimate past its last exact reading beyond this counts, marked estimated
)
PROJECTION_WORKERS = (2, 4, 8, 16)
PROJECTION_RANKS = (1, 2, 4, 8)
KIND_WORDS = {
    "dataloader": ("DataLoader worker", "DataLoader workers"),
    "fork": ("forked child", "forked children"),
    "spawn": ("spawned child", "spawned children"),
    "exec": ("child program", "child programs"),
}
RECORDED = ("record", "watch")


def is_recorded(meta: dict) -> bool:
    """A run of ``memprobe record`` or ``watch`` (older metas say so in the spec's workload)."""
    return (meta.get("kind") or (meta.get("spec") or {}).get("workload")) in RECORDED


# -- what each process is ------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    """The static facts of one process of the tree (meta ``processes``, older metas filled in)."""

    pid: int
    ppid: int | None
    role: str
    kind: str
    forked: bool
    start_method: str | None
    rank: int
    worker: int
    generation: int | None
    start_t: float
    first_t: float
    last_t: float
    end_t: float | None

    @property
    def is_worker(self) -> bool:
        return self.kind in WORKER_KINDS

    @property
    def is_parent(self) -> bool:
        return self.kind in PARENT_KINDS


_RANK = re.compile(r"^rank \d+$")


def _old_kind(role: str, worker: int, has_ranks: bool) -> str:
    """Kind from an older meta's role: only DataLoader workers were workers then."""
    if role == "main":
        return "launcher" if has_ranks else "main"
    if _RANK.match(role):
        return "rank"
    if worker >= 0:
        return "dataloader"
    for helper in ("forkserver", "resource tracker"):
        if role.endswith(helper):
            return helper
    return "other"


def processes(meta: dict, samples: pd.DataFrame) -> list[Proc]:
    """Every process of the run, from the meta where it lists them, else from the samples."""
    listed = {int(p["pid"]): p for p in meta.get("processes") or []}
    seen = _seen(samples)
    for pid, row in seen.items():
        listed.setdefault(pid, row)
    methods = meta.get("start_methods") or {}
    # Older metas: one start method for the run's DataLoader workers, the most common seen.
    method = next(iter(methods)) if len(methods) == 1 else (meta.get("spec") or {}).get("mode")
    root = next((p.get("command") for p in listed.values() if p.get("role") == "main"), None)
    procs = [
        _proc(pid, p, seen.get(pid, {}), method, bool(meta.get("ranks")), root) for pid, p in listed.items()
    ]
    return _with_generations(_with_parents(procs, meta))


def _proc(
    pid: int, p: dict, seen: dict, method: str | None, has_ranks: bool, root_command: str | None
) -> Proc:
    """One process's facts; what an older meta lacks is derived from its role and the samples."""
    role = str(p.get("role") or "other")
    worker = int(p["worker"]) if p.get("worker") is not None else -1
    kind = p.get("kind") or _old_kind(role, worker, has_ranks)
    if not p.get("kind") and kind == "other" and root_command and p.get("command") == root_command:
        kind = "fork"  # an older meta's "other" child with its parent's command line: forked, never exec'd
    start_method = p.get("start_method") or (method if kind == "dataloader" else None)
    forked = p.get("forked")
    if forked is None:
        forked = kind == "fork" or (kind == "dataloader" and start_method == "fork")
    first_t = _float(p.get("first_t"), seen.get("first_t", 0.0))
    return Proc(
        pid,
        _int_or_none(p.get("ppid")),
        role,
        kind,
        bool(forked),
        start_method,
        int(p["rank"]) if p.get("rank") is not None else -1,
        worker,
        _int_or_none(p.get("generation")),
        _float(p.get("start_t"), first_t),
        first_t,
        _float(p.get("last_t"), seen.get("last_t", first_t)),
        _float(p.get("end_t"), None),
    )


def _seen(samples: pd.DataFrame) -> dict[int, dict]:
    if samples.empty:
        return {}
    ok = samples[~samples["missing"].fillna(False).astype(bool)].sort_values("t")
    g = ok.groupby("pid")
    table = pd.DataFrame(
        {
            "role": g["role"].last(),
            "worker": g["worker"].last(),
            "first_t": g["t"].first(),
            "last_t": g["t"].last(),
        }
    )
    if "rank" in ok:
        table["rank"] = g["rank"].last()
    return {int(pid): r for pid, r in table.to_dict("index").items()}


def _float(v: Any, default: Any) -> Any:
    return (
        float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else default
    )


def _int_or_none(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _with_parents(procs: list[Proc], meta: dict) -> list[Proc]:
    """Older metas have no ppid: a worker's parent is its rank's process, else the root."""
    root = meta.get("root_pid") or next((p.pid for p in procs if p.role == "main"), None)
    ranks = {int(r): int(pid) for r, pid in (meta.get("ranks") or {}).items()}
    return [
        p if p.ppid is not None or not p.is_worker else replace(p, ppid=ranks.get(p.rank, root))
        for p in procs
    ]


def _with_generations(procs: list[Proc]) -> list[Proc]:
    """A worker's generation where the meta has none: per parent, a worker that starts after all
    earlier workers of that parent ended begins the next one."""
    out = {p.pid: p for p in procs}
    by_parent: dict[int | None, list[Proc]] = {}
    for p in procs:
        if p.is_worker and p.generation is None:
            by_parent.setdefault(p.ppid, []).append(p)
    for group in by_parent.values():
        gen, ends = -1, -math.inf
        for p in sorted(group, key=lambda p: (p.start_t, p.pid)):
            if p.start_t > ends:
                gen += 1
            ends = max(ends, p.end_t if p.end_t is not None else p.last_t)
            out[p.pid] = replace(p, generation=gen)
    return [out[p.pid] for p in procs]


def owner(p: Proc, by_pid: dict[int, Proc]) -> Proc | None:
    """The process a worker works for: its parent, or the parent's parent when a helper (a
    forkserver) forked it."""
    parent = by_pid.get(p.ppid) if p.ppid is not None else None
    if parent is not None and parent.kind in ("forkserver", "resource tracker"):
        return by_pid.get(parent.ppid) if parent.ppid is not None else parent
    return parent


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


@dataclass(frozen=True)
class Split:
    own_mb: float
    released_mb: float  # pages that became private because others copied them or exited
    shared_mb: float  # pages that became shared (a fork): a fall that is not memory freed


def split_growth(readings: pd.DataFrame, origin: dict | None = None) -> Split:
    """Own growth over consecutive exact readings (``origin``: a starting point that is not a
    reading, such as a forked child's USS 0 and no faults at its start)."""

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
    own = interval_own(d_uss, np.diff(rss), faults)
    rest = d_uss - own
    return Split(float(own.sum()), float(rest[rest > 0].sum()), float(rest[rest < 0].sum()))


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
    first_t: float | None
    last_t: float | None
    baseline_t: float | None
    pss_samples: int
    uss_start_mb: float | None
    uss_end_mb: float | None
    growth_mb: float | None
    built_mb: float | None
    startup_mb: float | None
    released_mb: float | None
    shared_mb: float | None
    growth_mb_per_min: float | None
    growth_per_1k_items_mb: float | None
    judged: bool
    parent_pid: int | None = None
    start_t: float | None = None  # the process's own start (may be before the first tick)
    end_t: float | None = None  # first seen gone (its last tick alive while it ran to the end)
    estimated: bool = False  # no exact reading in its window: growth from the sampler's estimate

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_growth(p: Proc, samples: pd.DataFrame, procs: list[Proc], milestones: dict) -> Growth:
    """A process's own growth over its window (see the module doc); ``samples`` may hold only its rows."""
    readings = exact_readings(samples, p.pid)
    by_pid = {q.pid: q for q in procs}
    base = _baseline(p, readings, samples, procs, milestones)
    window, origin, built, startup = base
    up = owner(p, by_pid) if p.is_worker else None
    empty = Growth(
        p.pid,
        p.role,
        p.kind,
        p.rank,
        p.worker,
        p.generation,
        p.start_method,
        _first(readings["t"]),
        _last(readings["t"]),
        None,
        len(readings),
        None,
        _last(readings["uss_mb"]),
        None,
        built,
        startup,
        None,
        None,
        None,
        None,
        False,
        up.pid if up else None,
        p.start_t,
        p.end_t if p.end_t is not None else p.last_t,
    )
    if window is None or (origin is None and len(window) < 2) or window.empty:
        return _estimated(empty, p, samples) if p.is_worker else empty
    split = split_growth(window, origin)
    t0 = origin["t"] if origin else float(window["t"].iloc[0])
    t1 = float(window["t"].iloc[-1])
    start_uss = origin["uss_mb"] if origin else float(window["uss_mb"].iloc[0])
    rate = split.own_mb / (t1 - t0) * 60 if t1 - t0 > 0.5 else None
    g = replace(
        empty,
        baseline_t=t0,
        uss_start_mb=start_uss,
        uss_end_mb=float(window["uss_mb"].iloc[-1]),
        growth_mb=split.own_mb,
        released_mb=split.released_mb,
        shared_mb=split.shared_mb,
        growth_mb_per_min=rate,
        judged=p.is_worker or p.is_parent,
    )
    return _estimated_to_end(g, samples) if p.is_worker else g


def _estimated_to_end(g: Growth, samples: pd.DataFrame) -> Growth:
    """A worker that went on growing after its last exact reading (it ended before the next one):
    its growth to its last tick alive, by the estimate calibrated at that reading, marked as
    estimated. A worker's copy often happens in its last seconds of an epoch."""
    if "uss_est_mb" not in samples or g.last_t is None or g.growth_mb is None or g.uss_end_mb is None:
        return g
    later = samples[
        (samples["pid"] == g.pid) & (samples["t"] > g.last_t) & ~samples["missing"].fillna(False).astype(bool)
    ].sort_values("t")
    est = pd.to_numeric(later["uss_est_mb"], errors="coerce").dropna()
    if est.empty or float(est.iloc[-1]) - g.uss_end_mb < ESTIMATE_EXTENDS_MB:
        return g
    t1, end = float(later.loc[est.index[-1], "t"]), float(est.iloc[-1])
    growth = g.growth_mb + end - g.uss_end_mb
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
        since = _renamed_t(samples, p.pid)
        after = rows[rows["t"] >= (since if since is not None else _settled_t(samples, p)) - 1e-9]
        if len(after) < 2:
            return g
        t0, base = float(after["t"].iloc[0]), float(after["value"].iloc[0])
        startup = base
    if rows.empty or float(rows["t"].iloc[-1]) <= t0:
        return g
    t1, end = float(rows["t"].iloc[-1]), float(rows["value"].iloc[-1])
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


Baseline = tuple[pd.DataFrame | None, dict | None, float | None, float | None]


def _baseline(
    p: Proc, readings: pd.DataFrame, samples: pd.DataFrame, procs: list[Proc], milestones: dict
) -> Baseline:
    """(readings in the window, a synthetic origin or None, built_mb, startup_mb)."""
    if readings.empty:
        return None, None, None, None
    if p.is_worker and p.forked:
        origin = {"t": p.start_t, "uss_mb": 0.0, "minflt": 0.0, "rss_mb": None, "anon_huge_mb": None}
        return readings[readings["t"] >= p.start_t], origin, None, None
    if p.is_worker:
        t = _renamed_t(samples, p.pid)
        if t is None:
            t = _settled_t(samples, p)
        window = readings[readings["t"] >= t - 1e-9]
        return window, None, None, _first(window["uss_mb"])
    if p.is_parent:
        return _parent_window(p, readings, samples, procs, milestones)
    return readings, None, None, None


def _parent_window(
    p: Proc, readings: pd.DataFrame, samples: pd.DataFrame, procs: list[Proc], milestones: dict
) -> Baseline:
    """From just before its first worker started (the pages a fork then shares are still its own
    there) to its last reading while it had workers: after the last one ends, its pages become
    private again and a program tears its data down, neither of which is growth. Without
    workers: from the job's first mark (or its first reading) to its last reading."""
    by_pid = {q.pid: q for q in procs}
    # A launcher's children are its ranks: it counts from the first, as a rank from its first worker.
    mine = [
        q
        for q in procs
        if (q.is_worker and (o := owner(q, by_pid)) is not None and o.pid == p.pid)
        or (q.kind == "rank" and q.ppid == p.pid)
    ]
    since = min(q.start_t for q in mine) if mine else milestones.get("first_mark")
    before = readings[readings["t"] < since] if since is not None else readings.iloc[:1]
    window = readings[readings["t"] >= float(before["t"].iloc[-1])] if len(before) else readings
    origin = None
    if since is not None and len(before):
        origin = _built_since_reading(p.pid, samples, window, since) or _built_unseen(
            p.pid, samples, window, since
        )
    if origin is not None:
        window = window[window["t"] > origin["t"]]
    if mine:
        until = max(q.end_t if q.end_t is not None else q.last_t for q in mine)
        during = window[window["t"] <= until]
        window = during if len(during) >= (1 if origin else 2) else window
    built = (
        _built(p, samples, readings, window, since)
        if origin is None
        else origin["uss_mb"] - float(readings["uss_mb"].iloc[0])
    )
    return window, origin, built, None


def _built_unseen(pid: int, samples: pd.DataFrame, window: pd.DataFrame, since: float) -> dict | None:
    """The parent's state just before its first worker started when neither a reading nor the
    estimate saw it build, but its anonymous RSS did: before a first fork every anonymous page
    is the parent's own, so that rise is memory it built (its USS then: the reading before plus
    the rise). None when the rise is under a megabyte or the column is missing."""
    if window.empty or "rss_anon_mb" not in samples:
        return None
    t0, uss0 = float(window["t"].iloc[0]), float(window["uss_mb"].iloc[0])
    rows = samples[(samples["pid"] == pid) & (samples["t"] >= t0) & (samples["t"] < since)].sort_values("t")
    rows = rows.assign(anon=pd.to_numeric(rows["rss_anon_mb"], errors="coerce")).dropna(subset=["anon"])
    if len(rows) < 2 or float(rows["anon"].iloc[-1] - rows["anon"].iloc[0]) < STILL_MB:
        return None
    last = rows.iloc[-1]
    return {
        "t": float(last["t"]),
        "uss_mb": uss0 + float(last["anon"] - rows["anon"].iloc[0]),
        "rss_mb": last.get("rss_mb"),
        "minflt": last.get("minflt"),
        "anon_huge_mb": None,
    }


def _built_since_reading(pid: int, samples: pd.DataFrame, window: pd.DataFrame, since: float) -> dict | None:
    """The parent's estimated state just before its first worker started, when it kept building
    after its last exact reading (the estimate rose by a megabyte or more): a start that leaves
    that building out of its growth. None when the reading before is close enough."""
    if window.empty or "uss_est_mb" not in samples:
        return None
    t0, uss0 = float(window["t"].iloc[0]), float(window["uss_mb"].iloc[0])
    rows = samples[(samples["pid"] == pid) & (samples["t"] > t0) & (samples["t"] < since)].sort_values("t")
    est = pd.to_numeric(rows["uss_est_mb"], errors="coerce")
    rows = rows.assign(uss_mb=est).dropna(subset=["uss_mb"])
    if rows.empty or float(rows["uss_mb"].iloc[-1]) - uss0 < STILL_MB:
        return None
    last = rows.iloc[-1]
    return {
        "t": float(last["t"]),
        "uss_mb": float(last["uss_mb"]),
        "rss_mb": last.get("rss_mb"),
        "minflt": last.get("minflt"),
        "anon_huge_mb": None,
    }


def _built(
    p: Proc, samples: pd.DataFrame, readings: pd.DataFrame, window: pd.DataFrame, since: float | None
) -> float | None:
    """What a parent built before its workers started (or before the first mark): its USS then
    minus at its first reading. Where no exact reading falls between the two, the sampler's
    estimate just before that moment stands in (shown, never judged); None when neither exists."""
    if window.empty or since is None:
        return None
    first_t, first = float(readings["t"].iloc[0]), float(readings["uss_mb"].iloc[0])
    if float(window["t"].iloc[0]) > first_t:
        return float(window["uss_mb"].iloc[0]) - first
    if "uss_est_mb" not in samples:
        return None
    est = samples[(samples["pid"] == p.pid) & (samples["t"] > first_t) & (samples["t"] < since)].sort_values(
        "t"
    )
    est = pd.to_numeric(est["uss_est_mb"], errors="coerce").dropna()
    return float(est.iloc[-1]) - first if len(est) else None


def _renamed_t(samples: pd.DataFrame, pid: int) -> float | None:
    """When torch renamed a spawn/forkserver DataLoader worker (after it unpickled the dataset):
    its first row as a DataLoader worker after rows as something else."""
    rows = samples[(samples["pid"] == pid) & ~samples["missing"].fillna(False).astype(bool)].sort_values("t")
    if rows.empty:
        return None
    is_dl = (
        rows["kind"] == "dataloader" if "kind" in rows and rows["kind"].notna().any() else rows["worker"] >= 0
    )
    if is_dl.all() or not is_dl.any():
        return None
    return float(rows.loc[is_dl, "t"].iloc[0])


def _settled_t(samples: pd.DataFrame, p: Proc) -> float:
    """The end of a spawn/exec child's start-up: its RSS rose less than 1 MB over half a second,
    or 10 s after its start."""
    rows = samples[(samples["pid"] == p.pid) & samples["rss_mb"].notna()].sort_values("t")
    t, rss = rows["t"].to_numpy(float), rows["rss_mb"].to_numpy(float)
    limit = p.start_t + STARTUP_MAX_S
    for i in range(len(t)):
        if t[i] >= limit:
            break
        j = int(np.searchsorted(t, t[i] - STILL_S))
        if t[i] - t[j] >= 0.8 * STILL_S - 1e-6 and rss[i] - rss[j : i + 1].min() < STILL_MB:
            return float(t[i])
    return limit


def _first(s: pd.Series) -> float | None:
    return float(s.iloc[0]) if len(s) else None


def _last(s: pd.Series) -> float | None:
    return float(s.iloc[-1]) if len(s) else None


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
        if g.worker >= 0 or g.kind in WORKER_KINDS:
            mid = (g.baseline_t + g.last_t) / 2
            alive = sum(
                1
                for w in rows
                if w.kind in WORKER_KINDS
                and w.baseline_t is not None
                and w.last_t is not None
                and w.baseline_t <= mid <= w.last_t
            )
            items /= max(alive, 1)
        out.append(replace(g, growth_per_1k_items_mb=g.growth_mb / (items / 1000) if items >= 1 else None))
    return out


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


# -- total PSS --------------------------------------------------------------------------------------


def held_readings(samples: pd.DataFrame) -> pd.DataFrame:
    """Exact readings, plus, at every time some process was read exactly, each other live
    process's last exact reading (readings are spent where memory moves, not on every process at
    once; one that was not read has not moved). Rows: t, pid, role, pss_mb, uss_mb, held."""
    cols = ["t", "pid", "role", "pss_mb", "uss_mb", "held"]
    if samples.empty or not (samples["tier"] == "pss").any():
        return pd.DataFrame(columns=cols)
    missing = samples["missing"].fillna(False).astype(bool)
    exact = samples[(samples["tier"] == "pss") & ~missing].assign(held=False)
    times = exact["t"].unique()
    # Alive and not read at a reading time; a cheap row with a reason is a failed read, not a hold.
    idle = samples[
        samples["t"].isin(times) & (samples["tier"] == "cheap") & ~missing & samples["reason"].isna()
    ]
    if idle.empty:
        return exact[cols].reset_index(drop=True)
    last = exact[["t", "pid", "pss_mb", "uss_mb"]].rename(columns={"t": "read_t"}).sort_values("read_t")
    held = (
        pd.merge_asof(
            idle[["t", "pid", "role"]].sort_values("t"),
            last,
            left_on="t",
            right_on="read_t",
            by="pid",
            direction="backward",
        )
        .dropna(subset=["pss_mb"])
        .assign(held=True)
    )
    return pd.concat([exact[cols], held[cols]], ignore_index=True).sort_values(
        ["t", "pid"], ignore_index=True
    )


def carried_pss(samples: pd.DataFrame) -> pd.DataFrame:
    """PSS per process (columns: pid) at every time some process was read exactly, with the
    processes not read then at their last reading (:func:`held_readings`); NaN where a process
    was not alive or not read yet."""
    rows = held_readings(samples)
    if rows.empty:
        return pd.DataFrame()
    return rows.pivot_table(index="t", columns="pid", values="pss_mb", aggfunc="last")


# -- the run -------------------------------------------------------------------------------------------


def table(meta: dict, samples: pd.DataFrame, progress: pd.DataFrame) -> list[Growth]:
    """The per-process table: every process of the tree, parents first, then per rank."""
    procs = processes(meta, samples)
    milestones = meta.get("milestones") or {}
    # Each process's own rows once: an hour-long job has hundreds of thousands of rows.
    own = dict(tuple(samples.groupby("pid", sort=False))) if not samples.empty else {}
    rows = [process_growth(p, own.get(p.pid, samples.iloc[0:0]), procs, milestones) for p in procs]
    return sorted(with_items(rows, progress), key=_order)


def _order(g: Growth) -> tuple:
    """main/launcher first; then per rank (none first): the rank process, its workers by start, the rest."""
    place = (
        0
        if g.kind in ("main", "launcher")
        else 1
        if g.kind == "rank"
        else 2
        if g.worker >= 0 or g.kind in WORKER_KINDS
        else 3
    )
    first = g.first_t if g.first_t is not None else math.inf
    return (place > 0, g.rank, place, g.generation or 0, first, g.pid)


# -- projection ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankShape:
    """What one rank (or the job's only parent) measured: its own memory, and per worker."""

    parent_mb: float  # the parent's USS when its first worker started, plus its own growth since
    built_full_mb: float  # the parent's USS just before its workers started: what a fork can copy
    worker_start_mb: float  # per worker: USS at its baseline (0 for a fork, its start-up copy otherwise)
    worker_growth_mb: float  # per worker: own growth as measured (mean)
    workers: int  # most workers alive at once
    forked: bool


def rank_shapes(rows: list[Growth], procs: list[Proc]) -> list[RankShape]:
    """Per parent that has workers: its measured shape."""
    by_pid = {p.pid: p for p in procs}
    out = []
    for parent in (g for g in rows if g.kind in PARENT_KINDS and g.uss_start_mb is not None):
        mine = [g for g in rows if g.parent_pid == parent.pid and g.judged and g.growth_mb is not None]
        if not mine:
            continue
        forked = all(by_pid[g.pid].forked for g in mine if g.pid in by_pid)
        start = parent.uss_start_mb or 0.0
        out.append(
            RankShape(
                start + max(grown(parent), 0.0),
                start,
                float(np.mean([g.uss_start_mb or 0.0 for g in mine])),
                float(np.mean([g.growth_mb for g in mine])),
                _most_alive(mine),
                forked,
            )
        )
    return out


def _most_alive(rows: list[Growth]) -> int:
    """The most of these processes alive at once (from each one's start to its end)."""
    life = [
        (
            g.start_t if g.start_t is not None else g.baseline_t or 0.0,
            g.end_t if g.end_t is not None else g.last_t or 0.0,
        )
        for g in rows
    ]
    events = sorted([(a, 1) for a, _ in life] + [(b, -1) for _, b in life], key=lambda e: (e[0], e[1]))
    alive = best = 0
    for _, step in events:
        alive += step
        best = max(best, alive)
    return max(best, 1)


@dataclass(frozen=True)
class Basis:
    """What a projection starts from: the measured ranks' means, and the rest of the tree."""

    ranks: int  # ranks measured (1 for a job without ranks)
    has_ranks: bool
    workers: int  # most workers alive at once per rank (mean over ranks)
    workers_measured: int  # worker processes measured (every generation)
    duration_s: float  # a worker's window, on average
    parent_mb: float
    full_copy_mb: float
    worker_start_mb: float
    worker_growth_mb: float
    others_mb: float  # launcher, helpers, parents without workers: once
    forked: bool


def projection_basis(rows: list[Growth], procs: list[Proc]) -> Basis | None:
    """The means a projection scales, or None for a job without measured workers."""
    shapes = rank_shapes(rows, procs)
    if not shapes:
        return None
    with_workers = {g.parent_pid for g in rows if g.kind in WORKER_KINDS}
    measured = [g for g in judged_workers(rows) if g.parent_pid in with_workers]

    def mean(xs: Any) -> float:
        return float(np.mean(list(xs)))

    return Basis(
        len(shapes),
        any(g.kind == "rank" for g in rows),
        round(mean(s.workers for s in shapes)),
        len(measured),
        mean((g.last_t or 0.0) - (g.baseline_t or 0.0) for g in measured),
        mean(s.parent_mb for s in shapes),
        mean(s.built_full_mb for s in shapes),
        mean(s.worker_start_mb for s in shapes),
        mean(s.worker_growth_mb for s in shapes),
        sum(g.uss_end_mb or 0.0 for g in rows if g.kind not in WORKER_KINDS and g.pid not in with_workers),
        all(s.forked for s in shapes),
    )


def projection(basis: Basis | None) -> list[dict]:
    """The memory the job would need at other worker counts per rank and rank counts: each rank
    as measured (the mean over its ranks), its shared pages once per rank, each worker's private
    memory as measured over the same duration; ``full_copy_mb``: every forked worker ends with a
    full copy of what its parent held when it started. Other processes (launcher, helpers) once."""
    if basis is None:
        return []
    b = basis
    rank_counts = sorted({b.ranks, *PROJECTION_RANKS}) if b.has_ranks else [1]
    per_worker = b.worker_start_mb + max(b.worker_growth_mb, 0.0)
    copy = max(per_worker, b.worker_start_mb + b.full_copy_mb) if b.forked else per_worker
    return [
        {
            "ranks": r,
            "workers_per_rank": w,
            "measured_mb": b.others_mb + r * (b.parent_mb + w * per_worker),
            "full_copy_mb": b.others_mb + r * (b.parent_mb + w * copy),
            "as_measured": r == b.ranks and w == b.workers,
        }
        for w in sorted({b.workers, *PROJECTION_WORKERS})
        for r in rank_counts
    ]


# -- the summary ----------------------------------------------------------------------------------


def grown(g: Growth) -> float:
    """A judged process's own growth (judged rows always have one)."""
    return g.growth_mb if g.growth_mb is not None else 0.0


def judged_workers(rows: list[Growth]) -> list[Growth]:
    return [g for g in rows if g.judged and g.kind in WORKER_KINDS and g.growth_mb is not None]


def judged_parents(rows: list[Growth]) -> list[Growth]:
    return [g for g in rows if g.judged and g.kind in PARENT_KINDS and g.growth_mb is not None]


def summarize_tree(base: RunSummary, meta: dict, samples: pd.DataFrame, progress: pd.DataFrame) -> RunSummary:
    """``base`` (an :class:`memprobe.analysis.RunSummary` of a recorded run) with its growth,
    verdict and totals measured per process over the right windows, plus the per-process table,
    the culprit in words, the estimate's error and the projection."""
    procs = processes(meta, samples)
    rows = table(meta, samples, progress)
    workers, parents = judged_workers(rows), judged_parents(rows)
    threshold = base.growth_threshold_mb
    judged = workers + parents
    verdict = None if not judged else ("growing" if max(map(grown, judged)) > threshold else "flat")
    main = max(parents, key=grown) if parents else None
    w_mean = float(np.mean([grown(g) for g in workers])) if workers else None
    per_worker_items = base.items / max(len(workers), 1) / 1000
    totals = carried_pss(samples).sum(axis=1, min_count=1).dropna()
    summary = replace(
        base,
        verdict=verdict,
        worker_uss_growth_mb=w_mean,
        worker_uss_growth_max_mb=max(map(grown, workers), default=None),
        worker_uss_start_mb=float(np.mean([g.uss_start_mb for g in workers])) if workers else None,
        main_uss_growth_mb=grown(main) if main else None,
        growth_per_1k_items_per_worker_mb=(w_mean / per_worker_items)
        if w_mean is not None and base.items
        else None,
        total_pss_start_mb=_first(totals) if len(totals) else base.total_pss_start_mb,
        total_pss_peak_mb=float(totals.max()) if len(totals) else base.total_pss_peak_mb,
        total_pss_end_mb=_last(totals) if len(totals) else base.total_pss_end_mb,
        processes=[g.to_dict() for g in rows],
        estimate_error=estimate_error(samples, meta.get("sampler")),
        projection=projection(projection_basis(rows, procs)),
    )
    if summary.sum_rss_peak_mb is not None and summary.total_pss_peak_mb is not None:
        summary = replace(summary, rss_overcount_mb=summary.sum_rss_peak_mb - summary.total_pss_peak_mb)
    words = culprit(rows, procs, verdict, threshold)
    return replace(summary, culprit=words, explanation=_explanation(summary, words))


def _explanation(s: RunSummary, words: str) -> str:
    if s.verdict is None:
        why = (
            "no verdict: no worker or parent process has two exact readings in its window"
            if s.status == "ok"
            else f"no verdict: the command ended {s.status} before enough was measured"
        )
        return why + (f" ({s.error})" if s.error else "")
    parts = [words]
    if s.rss_overcount_mb is not None and s.total_pss_peak_mb:
        parts.append(
            f"Summing RSS would have reported {s.sum_rss_peak_mb:,.0f} MB at peak, "
            f"{s.rss_overcount_mb:,.0f} MB more than the real total (PSS) of {s.total_pss_peak_mb:,.0f} MB."
        )
    return " ".join(parts)


# -- the culprit in words ------------------------------------------------------------------------------


def who(role: str) -> str:
    """'the main process', 'rank 0', 'the launcher'."""
    return {"main": "the main process", "launcher": "the launcher"}.get(role, role)


def _possessive(role: str) -> str:
    return f"{who(role)}'s"


def _duration(seconds: float) -> str:
    """'48 s', '12 min', '2.5 h': as long as a job runs, in the unit a person would say."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 2 * 3600 else f"{seconds / 3600:.1f} h"


def _mb(v: float) -> str:
    return f"{v:+,.0f} MB" if abs(v) >= 10 else f"{v:+,.1f} MB"


def _kind_words(kind: str, n: int, method: str | None, generations: int = 1) -> str:
    """'4 DataLoader workers (fork, 2 generations)', '3 forked children'."""
    noun = KIND_WORDS.get(kind, ("worker", "workers"))[n != 1]
    notes = ([method] if kind == "dataloader" and method else []) + (
        [f"{generations} generations"] if generations > 1 else []
    )
    return f"{noun} ({', '.join(notes)})" if notes else noun


def culprit(rows: list[Growth], procs: list[Proc], verdict: str | None, threshold: float) -> str:
    """The verdict in plain words, naming who grows, how fast, and why the others are not blamed."""
    if verdict is None:
        return "no verdict: no worker or parent process has two exact readings in its window."
    by_pid = {g.pid: g for g in rows}
    workers, parents = judged_workers(rows), judged_parents(rows)
    unjudged = [g for g in rows if g.kind in WORKER_KINDS and not g.judged]
    tail = (
        f" {len(unjudged)} worker{'s' if len(unjudged) != 1 else ''} had no exact reading to judge "
        f"({', '.join(g.role for g in unjudged[:4])}{', ...' if len(unjudged) > 4 else ''})."
        if unjudged
        else ""
    )
    if verdict == "flat":
        return _flat_words(workers, parents, threshold, by_pid) + tail
    growing = [g for g in workers if grown(g) > threshold]
    sentences = [_group_words(group, by_pid) for group in _worker_groups(growing, by_pid)]
    sentences += [_parent_grows(g, workers) for g in parents if grown(g) > threshold]
    calm = [g for g in parents if grown(g) <= threshold and (g.released_mb or 0) >= RELEASED_WORTH_MB]
    if calm:
        sentences.append(_not_growing(calm))
    return "growing: " + " ".join(sentences) + tail


def _since(g: Growth, workers: list[Growth]) -> str:
    """Where a parent's window began, in words."""
    if any(w.parent_pid == g.pid for w in workers):
        return "after its first worker started"
    return "after its first rank started" if g.kind == "launcher" else "while the job ran"


def _parent_grows(g: Growth, workers: list[Growth]) -> str:
    return _capital(f"{who(g.role)} grew {_mb(grown(g))} of its own {_since(g, workers)}{_rate(g)}.")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _rate(g: Growth) -> str:
    return f" ({g.growth_mb_per_min:,.0f} MB/min)" if g.growth_mb_per_min is not None else ""


def _worker_groups(workers: list[Growth], by_pid: dict[int, Growth]) -> list[list[Growth]]:
    """Workers of one kind and start method together; per parent, except that the workers of
    every rank make one group (a torchrun job repeats itself per rank)."""
    groups: dict[tuple, list[Growth]] = {}
    for g in workers:
        parent = by_pid.get(g.parent_pid) if g.parent_pid is not None else None
        who_key = "ranks" if parent is not None and parent.kind == "rank" else g.parent_pid
        groups.setdefault((who_key, g.kind, g.start_method), []).append(g)
    return list(groups.values())


def _group_words(group: list[Growth], by_pid: dict[int, Growth]) -> str:
    g0 = group[0]
    parents = list({g.parent_pid: by_pid[g.parent_pid] for g in group if g.parent_pid in by_pid}.values())
    n = len(group)
    gens = len({(g.parent_pid, g.generation) for g in group}) // max(len(parents), 1)
    mean = float(np.mean([g.growth_mb for g in group]))
    span = float(np.mean([(g.last_t or 0) - (g.baseline_t or 0) for g in group]))
    rates = [g.growth_mb_per_min for g in group if g.growth_mb_per_min is not None]
    each = "each grew ~" if n > 1 else "grew "
    workers = _kind_words(g0.kind, n, g0.start_method, gens)
    if len(parents) > 1:
        names = [p.role for p in parents]
        head = f"the {n} {workers} of {', '.join(names[:-1])} and {names[-1]} ({n // len(parents)} each)"
    else:
        head = (f"{_possessive(parents[0].role)} " if parents else "") + (f"{n} " if n > 1 else "") + workers
    per_1k = [g.growth_per_1k_items_mb for g in group if g.growth_per_1k_items_mb is not None]
    pace = ([f"{np.mean(rates):,.0f} MB/min"] if rates else []) + (
        [f"{np.mean(per_1k):,.2f} MB per 1,000 items"] if len(per_1k) == n else []
    )
    text = f"{head} {each}{_mb(mean)} in {_duration(span)}" + (f" ({', '.join(pace)})" if pace else "")
    return _capital(text + _estimate_words(group) + _cause(g0, parents)) + "."


def _estimate_words(group: list[Growth]) -> str:
    """Which figures came from the sampler's estimate, and why (exact readings missed the growth)."""
    guessed = [g for g in group if g.estimated]
    if not guessed:
        return ""
    n, unread = len(group), all(g.pss_samples == 0 for g in guessed)
    why = (
        "no exact reading while " + ("they" if n > 1 else "it") + " lived"
        if unread
        else "they went on growing after their last exact reading"
        if n > 1
        else "it went on growing after its last exact reading"
    )
    if len(guessed) == n:
        return f" (estimated from {'their' if n > 1 else 'its'} page faults: {why})"
    return f" ({len(guessed)} of them estimated from page faults: the exact readings missed their growth)"


def _cause(g0: Growth, parents: list[Growth]) -> str:
    """Why such workers grow: copy-on-access of what their parent built, or their own memory."""
    if not (g0.start_method in (None, "fork") and g0.startup_mb is None):
        return ": private memory that grows as they run, after their start-up"
    built = [p.built_mb for p in parents if p.built_mb is not None]
    if not built:
        return ": copy-on-access of pages they shared at fork"
    if len(parents) == 1:
        return (
            f": copy-on-access of what {who(parents[0].role)} built ({_mb(built[0])} before its workers "
            "started)"
        )
    amount = _mb(built[0]) if max(built) - min(built) < 1 else f"{_mb(min(built))} to {_mb(max(built))}"
    return f": copy-on-access of what each rank built ({amount} before its workers started)"


def _not_growing(parents: list[Growth]) -> str:
    """Why parents whose USS rose are not blamed: their pages became private as workers copied them."""
    if len(parents) == 1:
        g = parents[0]
        return _capital(
            f"{who(g.role)} is not growing ({_mb(grown(g))} of its own): "
            f"{_mb(g.released_mb or 0.0)} of its pages became private because its workers copied or exited."
        )
    names = ", ".join(who(g.role) for g in parents[:-1]) + f" and {who(parents[-1].role)}"
    low, high = min(g.released_mb or 0.0 for g in parents), max(g.released_mb or 0.0 for g in parents)
    return _capital(
        f"{names} are not growing (at most {_mb(max(map(grown, parents)))} of their own): "
        f"{_mb(low)} to {_mb(high)} of their pages became private because their workers copied or exited."
    )


def _flat_words(
    workers: list[Growth], parents: list[Growth], threshold: float, by_pid: dict[int, Growth]
) -> str:
    parts = []
    if workers:
        top = max(workers, key=grown)
        guessed = sum(1 for g in workers if g.estimated)
        parts.append(
            f"{len(workers)} worker{'s' if len(workers) != 1 else ''} grew at most {_mb(grown(top))}"
            f" ({top.role}{f'; {guessed} estimated from page faults' if guessed else ''})"
        )
    for g in parents:
        since = _since(g, workers)
        text = f"{who(g.role)} {_mb(grown(g))}" + (f" {since}" if since != "while the job ran" else "")
        if g.built_mb is not None and abs(g.built_mb) >= 1:
            text += f" (built {_mb(g.built_mb)} before)"
        parts.append(text)
    text = f"flat: no process grew more than {threshold:g} MB of its own: " + "; ".join(parts) + "."
    upfront = [g.startup_mb for g in workers if g.startup_mb is not None]
    if upfront and float(np.mean(upfront)) >= threshold:
        text += (
            f" But each {'spawned ' if len(upfront) == len(workers) else ''}worker started with "
            f"~{float(np.mean(upfront)):,.0f} MB of its own (its start-up copy: paid up front, not growth)."
        )
    return text
