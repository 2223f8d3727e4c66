"""Growth of every process of a recorded job (``memprobe record`` / ``watch``): pure functions
of a run's samples and meta. The verdict and the culprit in words built on it are
:mod:`memprobe.record.tree_verdict`.

A job memprobe did not write has no warm and done points that fit every process, so each
process is measured over the window that fits what it is:

* a **forked worker** (DataLoader fork worker, ``os.fork``, a fork Pool...) starts sharing every
  page of its parent: USS 0 and no minor faults at its start. Its growth runs from then to its
  last exact reading alive.
* a **spawn / exec worker** first boots an interpreter and unpickles what it was given: its
  start-up copy (``startup_mb``) is not growth. It counts from the first exact reading after its
  RSS held still while it ran (:func:`memprobe.probe.tree.startup_end`; the sampler reads it
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

This module is longer than most (about 780 lines) because a process's window has one section
per thing it must know: what each process is from a meta of any version, its own growth between
readings, the window for each kind of process, items and the estimate's error; each section is
short, and splitting them would pass the same frames between modules. The total PSS is
:mod:`memprobe.core.series`'s, the same as a scenario's.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from memprobe.core import vocabulary
from memprobe.core.vocabulary import (
    DATALOADER,
    FORK,
    HELPER_ROLES,
    LAUNCHER,
    MAIN,
    OTHER,
    PARENT_KINDS,
    RANK,
    WORKER_KINDS,
)
from memprobe.probe.tree import startup_end

PAGE_MB = 4096 / 2**20
# A parent's anonymous memory that rose this much between its last tick before its first fork
# and its first tick after was built before the fork (see _parent_before).
BUILT_ACROSS_FORK_MB = 8.0
STILL_MB = 1.0  # a parent's anonymous memory moved less than this before its first worker: nothing built
# A worker's final fall of RSS by this much (or a tenth of its peak), ending with it within
# TEARDOWN_S, is its teardown (see _before_teardown).
TEARDOWN_MB, TEARDOWN_S = 16.0, 3.0
FORK_MARGIN_S = 0.5  # a parent's readings this close before its first fork may already follow it
STARTUP_MAX_S, STARTUP_LIFE_SHARE = 10.0, 0.5  # a spawned worker's start-up ends by then at the latest
ESTIMATE_FLOOR_MB = 10.0  # estimate errors are percentages of readings at least this large
ESTIMATE_EXTENDS_MB = (
    5.0  # a worker's estimate past its last exact reading beyond this counts, marked estimated
)
END_TOGETHER_S = 2.0  # DataLoader workers whose last ticks alive are this close ended together
# A worker levelled off when over the last third of its window (at least LEVEL_TAIL_S, in a
# window of at least LEVEL_MIN_S) its USS rose less than LEVEL_SHARE of its growth plus LEVEL_NOISE_MB.
LEVEL_MIN_S, LEVEL_TAIL_S, LEVEL_SHARE, LEVEL_NOISE_MB = 3.0, 1.0, 0.05, 1.0


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
    # When its DataLoader thread workers were first and last seen (None: it had none).
    threads_first_t: float | None = None
    threads_last_t: float | None = None

    @property
    def is_worker(self) -> bool:
        return self.kind in WORKER_KINDS

    @property
    def is_parent(self) -> bool:
        return self.kind in PARENT_KINDS


_RANK = re.compile(r"^rank \d+$")


def _old_kind(role: str, worker: int, has_ranks: bool) -> str:
    """Kind from an older meta's role: only DataLoader workers were workers then."""
    if role == MAIN:
        return LAUNCHER if has_ranks else MAIN
    if _RANK.match(role):
        return RANK
    if worker >= 0:
        return DATALOADER
    for helper in HELPER_ROLES:
        if role.endswith(helper):
            return helper
    return OTHER


def as_analysed(samples: pd.DataFrame, procs: list[Proc]) -> pd.DataFrame:
    """``samples`` with each process's role as the analysis knows it at the end, its parent and
    its start (:data:`memprobe.core.series.LINEAGE`: what the total PSS needs for a process never read
    exactly). A row holds its process's role at that tick: Lightning's rank 0 was "main", then
    "launcher" once it started rank 1, then "rank 0" once its workers started, and the stacked
    PSS chart drew three roles for one process (an older meta's spawned ranks stayed "worker K"
    in every row)."""
    if samples.empty or "pid" not in samples:
        return samples
    by_pid = {p.pid: p for p in procs}
    roles = samples["pid"].map({pid: p.role for pid, p in by_pid.items()})
    return samples.assign(
        role=roles.fillna(samples["role"]) if "role" in samples else roles,
        ppid=samples["pid"].map({pid: p.ppid for pid, p in by_pid.items()}),
        start_t=samples["pid"].map({pid: p.start_t for pid, p in by_pid.items()}),
    )


def processes(meta: dict, samples: pd.DataFrame) -> list[Proc]:
    """Every process of the run, from the meta where it lists them, else from the samples."""
    listed = {int(p["pid"]): p for p in meta.get("processes") or []}
    seen = _seen(samples)
    for pid, row in seen.items():
        listed.setdefault(pid, row)
    methods = meta.get("start_methods") or {}
    # Older metas: one start method for the run's DataLoader workers, the most common seen.
    method = next(iter(methods)) if len(methods) == 1 else (meta.get("spec") or {}).get("mode")
    root = next((p.get("command") for p in listed.values() if p.get("role") == MAIN), None)
    procs = [
        _proc(pid, p, seen.get(pid, {}), method, bool(meta.get("ranks")), root) for pid, p in listed.items()
    ]
    return _with_generations(_with_loader_generations(_with_nested_parents(_with_parents(procs, meta))))


def _proc(
    pid: int, p: dict, seen: dict, method: str | None, has_ranks: bool, root_command: str | None
) -> Proc:
    """One process's facts; what an older meta lacks is derived from its role and the samples."""
    role = str(p.get("role") or OTHER)
    worker = int(p["worker"]) if p.get("worker") is not None else -1
    kind = p.get("kind") or _old_kind(role, worker, has_ranks)
    if not p.get("kind") and kind == OTHER and root_command and p.get("command") == root_command:
        kind = FORK  # an older meta's "other" child with its parent's command line: forked, never exec'd
    start_method = p.get("start_method") or (method if kind == DATALOADER else None)
    forked = p.get("forked")
    if forked is None:
        forked = kind == FORK or (kind == DATALOADER and start_method == FORK)
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
        _float(p.get("threads_first_t"), None),
        _float(p.get("threads_last_t"), None),
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
    root = meta.get("root_pid") or next((p.pid for p in procs if p.role == MAIN), None)
    ranks = {int(r): int(pid) for r, pid in (meta.get("ranks") or {}).items()}
    return [
        p if p.ppid is not None or not p.is_worker else replace(p, ppid=ranks.get(p.rank, root))
        for p in procs
    ]


def _with_nested_parents(procs: list[Proc]) -> list[Proc]:
    """Ranks that do not say so, in a meta recorded before the tree knew them
    (:meth:`memprobe.probe.tree.TreeRoles._promote` names them at record time now):

    * a child of the root that runs DataLoader workers of its own is a rank, whatever started it:
      ``torch.multiprocessing.spawn(train, nprocs=2)``, the DDP tutorials' launcher, starts ranks
      that carry no RANK in their environment. Judged as workers, each rank's building after its
      start-up was its "growth" (+57 MB, and -92 MB for its twin: the job was called growing);
    * a launcher that runs DataLoader workers of its own beside its ranks is a rank too:
      Lightning's DDP re-runs the script for ranks 1.. and trains as rank 0 itself.

    Each is renamed ``rank K`` (K: its worker index, the order spawn started them; for the root
    the lowest rank its children do not hold), and what it started ``rank K worker J``."""
    by_pid = {p.pid: p for p in procs}
    roots = {p.pid for p in procs if p.kind in (MAIN, LAUNCHER)}
    owners = {o.pid for q in procs if q.kind == DATALOADER and (o := owner(q, by_pid)) is not None}
    spawned = [p for p in procs if p.is_worker and p.pid in owners and p.ppid in roots]
    taken = {p.rank for p in procs if p.kind == RANK}
    promoted: dict[int, int] = {}
    for p in sorted(spawned, key=lambda p: (p.worker < 0, p.worker, p.start_t, p.pid)):
        promoted[p.pid] = p.worker if p.worker >= 0 and p.worker not in taken else _lowest(taken)
        taken.add(promoted[p.pid])
    for p in procs:
        if p.kind == LAUNCHER and p.pid in owners and any(q.kind == RANK and q.ppid == p.pid for q in procs):
            promoted[p.pid] = _lowest(taken)
            taken.add(promoted[p.pid])
    if not promoted:
        return procs
    # A main whose children all turned out ranks only launched them.
    launchers = {
        p.pid
        for p in procs
        if p.kind == MAIN and p.pid not in owners and any(by_pid[c].ppid == p.pid for c in promoted)
    }

    def top(p: Proc) -> Proc | None:
        """The promoted process ``p`` descends from, if any."""
        seen = set()
        q = by_pid.get(p.ppid) if p.ppid is not None else None
        while p.kind != RANK and q is not None and q.pid not in seen and q.kind != RANK:
            if q.pid in promoted:
                return q
            seen.add(q.pid)
            q = by_pid.get(q.ppid) if q.ppid is not None else None
        return None

    out = []
    for p in procs:
        if p.pid in promoted:
            k = promoted[p.pid]
            out.append(replace(p, kind=RANK, forked=False, start_method=None, rank=k, role=f"rank {k}"))
        elif (t := top(p)) is not None:
            k = promoted[t.pid]
            out.append(replace(p, rank=k, role=_under_rank(p.role, t.role, k)))
        elif p.pid in launchers:
            out.append(replace(p, kind=LAUNCHER, role=LAUNCHER))
        else:
            out.append(p)
    return out


def _lowest(taken: set[int]) -> int:
    return next(k for k in range(len(taken) + 1) if k not in taken)


def _under_rank(role: str, old: str, rank: int) -> str:
    """A role under a process that became ``rank K``: ``worker K.J`` (a spawned child's worker)
    and ``worker J`` (a launcher's) become ``rank K worker J``, ``forkserver`` ``rank K forkserver``."""
    if role.startswith(old + "."):
        return f"rank {rank} worker {role[len(old) + 1 :]}"
    return role if role.startswith("rank ") else f"rank {rank} {role}"


_INDEXED = re.compile(r"^((?:rank \d+ )?worker )\d+$")


def _with_loader_generations(procs: list[Proc]) -> list[Proc]:
    """A parent's DataLoader workers recorded as one generation that were two: those that end
    together (within ``END_TOGETHER_S``: an iterator shuts its workers down together, and torch
    never replaces one) started after every one of those that ended before them. Lightning's
    ``ddp_spawn`` starts the next epoch's spawned workers (one after the other, each once the
    last has read its copy) while the last epoch's still live: the tree cannot see it then, and
    they were "worker 2" and "worker 3" of one generation, 4 workers per rank "at once"."""
    by_pid = {p.pid: p for p in procs}
    groups: dict[tuple, list[Proc]] = {}
    for p in procs:
        if p.kind == DATALOADER and p.generation is not None and (o := owner(p, by_pid)) is not None:
            groups.setdefault((o.pid, p.generation), []).append(p)
    splits = {key: _end_clusters(ws) for key, ws in groups.items()}
    if all(len(c) < 2 for c in splits.values()):
        return procs
    out = {p.pid: p for p in procs}
    for parent in {key[0] for key in groups}:
        clusters = [c for key in sorted(k for k in groups if k[0] == parent) for c in splits[key]]
        for gen, cluster in enumerate(clusters):
            for index, p in enumerate(sorted(cluster, key=lambda p: (p.start_t, p.pid))):
                m = _INDEXED.match(p.role)
                role = f"{m.group(1)}{index}" if m else p.role
                out[p.pid] = replace(p, generation=gen, worker=index if m else p.worker, role=role)
    return [out[p.pid] for p in procs]


def _end_clusters(workers: list[Proc]) -> list[list[Proc]]:
    """Workers of one recorded generation in groups that ended together, in order of their end;
    one group unless each group started after every worker of the group before it."""
    ends = sorted(workers, key=lambda p: (p.last_t, p.pid))
    clusters: list[list[Proc]] = []
    for p in ends:
        if clusters and p.last_t - clusters[-1][-1].last_t <= END_TOGETHER_S:
            clusters[-1].append(p)
        else:
            clusters.append([p])
    for before, after in pairwise(clusters):
        if min(p.start_t for p in after) <= max(p.start_t for p in before):
            return [workers]
    return clusters


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
    if parent is not None and parent.kind in HELPER_ROLES:
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
    # A worker's USS stopped rising before its window ended (None: its window is too short to say).
    levelled: bool | None = None
    # Why the kernel refused memprobe its memory map (the sampler's reason: another user's
    # process); None when it was readable. Such a process is left out of total PSS.
    denied: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_growth(p: Proc, samples: pd.DataFrame, procs: list[Proc], milestones: dict) -> Growth:
    """A process's own growth over its window (see the module doc); ``samples`` may hold only its rows."""
    if p.is_worker:
        samples = _before_teardown(samples, p.pid)
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
        first(readings["t"]),
        last(readings["t"]),
        None,
        len(readings),
        None,
        last(readings["uss_mb"]),
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
        threads_first_t=p.threads_first_t,
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
    between, gap_s = _between_generations(p, samples, procs, t0, t1) if p.is_parent else (None, 0.0)
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
    )
    return (
        _with_levelled(_with_allocated(_estimated_to_end(g, samples, p.forked), p, samples), samples)
        if p.is_worker
        else g
    )


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
    return replace(g, levelled=rise < LEVEL_SHARE * max(g.growth_mb, 0.0) + LEVEL_NOISE_MB)


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
    mine = _own_workers(p, procs)
    return not mine or readings.empty or float(readings["t"].iloc[0]) < min(q.start_t for q in mine)


def _held(readings: pd.DataFrame, built: float | None) -> float | None:
    """A parent's USS just before its first worker: its first reading plus what it built."""
    if built is None or readings.empty:
        return None
    return float(readings["uss_mb"].iloc[0]) + built


def _estimated_to_end(g: Growth, samples: pd.DataFrame, forked: bool = True) -> Growth:
    """A worker that went on growing after its last exact reading (it ended before the next one):
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
        since = _renamed_t(samples, p.pid)
        after = rows[rows["t"] >= (since if since is not None else _settled_t(samples, p)) - 1e-9]
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
        return window, None, None, first(window["uss_mb"])
    if p.is_parent:
        return _parent_window(p, readings, samples, procs, milestones)
    return readings, None, None, None


def _parent_window(
    p: Proc, readings: pd.DataFrame, samples: pd.DataFrame, procs: list[Proc], milestones: dict
) -> Baseline:
    """From just before its first worker started (the pages a fork then shares are still its own
    there) to its last reading while it had workers: after the last one ends, its pages become
    private again and a program tears its data down, neither of which is growth. With thread
    workers and no worker process, from just before its first thread worker was seen to the last
    tick one was (what it built before is built, not growth: a job whose two thread workers
    read a list built before them was said to grow +69 MB). Without workers: from the job's
    first mark (or its first reading) to its last reading."""
    mine = _own_workers(p, procs)
    threads = not mine and p.threads_first_t is not None
    if mine:
        since: float | None = min(q.start_t for q in mine)
    else:
        since = p.threads_first_t if threads else milestones.get("first_mark")
    if since is None:
        return readings, None, None, None
    # Its first tick from then on (read exactly there, as the sampler reads a parent at the tick
    # its children appear, or estimated): what it built just before is not in the window, even
    # when it freed part of it between the last tick before and the fork.
    before = _before_fork(readings[readings["t"] < since], since) if mine else readings[readings["t"] < since]
    pre = _parent_before(p.pid, samples, before, since)
    # Without workers (from the first mark) there is no fork to keep out: the state just before.
    origin = _tick_at(samples, p.pid, since) if mine or threads else pre
    if threads:
        # No fork either, and what it built up to its first tick with them is built: a tick
        # (0.2-0.45 s) can hold the end of a build and a thread's start alike.
        pre = origin if origin is not None and not math.isnan(origin["uss_mb"]) else pre
    if origin is not None:
        window = readings[readings["t"] > origin["t"]]
    else:
        window = readings[readings["t"] >= float(before["t"].iloc[-1])] if len(before) else readings
    if mine or threads:
        # Their last tick alive: once they are seen gone, a program that joined them may already
        # be tearing its data down.
        until = max(q.last_t for q in mine) if mine else _float(p.threads_last_t, since)
        during = window[window["t"] <= until]
        window = during if origin is not None or len(during) >= 2 else window
        after = float(window["t"].iloc[-1]) if len(window) else origin["t"] if origin else -math.inf
        window = _to_last_tick(window, samples, p.pid, after, until)
    first = float(readings["uss_mb"].iloc[0])
    if pre is not None:
        built: float | None = pre["uss_mb"] - first
    elif len(before):
        built = float(before["uss_mb"].iloc[-1]) - first
    else:
        built = _built_unread(samples, p.pid, since) if mine else None
    return window, origin, built, None


def _built_unread(samples: pd.DataFrame, pid: int, since: float) -> float | None:
    """What a parent never read exactly before its first worker started built from its first
    tick to then: the rise of its anonymous RSS (read every tick). accelerate's
    ``debug_launcher`` ranks built their lists of dicts (+230 MB each) before a first exact
    reading, and the culprit said the workers copied "pages they shared at fork" instead of what
    each rank built. None when it moved less than a megabyte or was seen only once before."""
    if "rss_anon_mb" not in samples:
        return None
    rows = samples[(samples["pid"] == pid) & (samples["t"] < since)].sort_values("t")
    anon = pd.to_numeric(rows["rss_anon_mb"], errors="coerce").dropna()
    if len(anon) < 2 or abs(float(anon.iloc[-1] - anon.iloc[0])) < STILL_MB:
        return None
    return float(anon.iloc[-1] - anon.iloc[0])


def _own_workers(p: Proc, procs: list[Proc]) -> list[Proc]:
    """The processes whose lives open and close a parent's window: its workers (a helper's
    children included). A launcher's children are its ranks: it counts from the first, as a
    rank from its first worker; a rank that started ranks (Lightning's rank 0) from its own
    first worker."""
    by_pid = {q.pid: q for q in procs}
    workers = [q for q in procs if q.is_worker and (o := owner(q, by_pid)) is not None and o.pid == p.pid]
    # A root that trains as rank 0 beside the ranks it started (Lightning) counts from its own
    # workers: from rank 1's start it was still building, and to rank 1's end it was tearing down.
    return workers or [q for q in procs if q.kind == RANK and q.ppid == p.pid]


def _between_generations(
    p: Proc, samples: pd.DataFrame, procs: list[Proc], t0: float, t1: float
) -> tuple[float | None, float]:
    """What a parent built while none of its workers lived, between two generations of them,
    within its window (``t0`` to ``t1``), and for how long: (MB, or None without such a gap;
    seconds). A gap runs from its last tick with a worker alive to its first tick once the next
    one started, where its window would close and open, and what it built there is the rise of
    its anonymous RSS, the measure of its own growth: what is left of that is its growth while
    workers lived. A Hugging Face job's main ran ``ds.map(num_proc=4)``, then ``to_list()``
    (+65 MB), then a DataLoader, and was said to have grown by it."""
    if "rss_anon_mb" not in samples:
        return None, 0.0
    built, seconds = None, 0.0
    for since, until in _gaps(_own_workers(p, procs)):
        a, b = _tick_at(samples, p.pid, since), _tick_at(samples, p.pid, until)
        if a is None or b is None or not t0 <= a["t"] <= b["t"] <= t1:
            continue
        rise = _float(b["rss_anon_mb"], math.nan) - _float(a["rss_anon_mb"], math.nan)
        if not math.isnan(rise):
            built, seconds = (built or 0.0) + rise, seconds + b["t"] - a["t"]
    return built, seconds


def _gaps(workers: list[Proc]) -> list[tuple[float, float]]:
    """When none of these processes lived, between two of them: (the last tick one was seen
    alive, the next one's start). Not from the tick they were first seen gone (``end_t``): a
    DataLoader's next workers often start within that tick, and what a Hugging Face job's main
    built between its ``map(num_proc=4)`` pool and its DataLoader was once its "growth"."""
    gaps, alive_until = [], -math.inf
    for q in sorted(workers, key=lambda q: (q.start_t, q.pid)):
        if q.start_t > alive_until > -math.inf:
            gaps.append((alive_until, q.start_t))
        alive_until = max(alive_until, q.last_t)
    return gaps


def _tick_at(samples: pd.DataFrame, pid: int, t: float) -> dict | None:
    """A process's first tick at or after ``t``, as an origin: its exact USS if it was read
    then, else the sampler's estimate (NaN when it had none)."""
    rows = samples[
        (samples["pid"] == pid) & (samples["t"] >= t) & ~samples["missing"].fillna(False).astype(bool)
    ]
    if rows.empty:
        return None
    row = rows.sort_values("t").iloc[0]
    exact = row.get("tier") == "pss" and pd.notna(row.get("uss_mb"))
    uss = row.get("uss_mb") if exact else row.get("uss_est_mb")
    return {
        "t": float(row["t"]),
        "uss_mb": float(uss) if uss is not None and pd.notna(uss) else np.nan,
        "rss_mb": row.get("rss_mb"),
        "rss_anon_mb": row.get("rss_anon_mb"),
        "minflt": row.get("minflt"),
        "anon_huge_mb": row.get("anon_huge_mb") if exact else None,
    }


def _before_teardown(samples: pd.DataFrame, pid: int) -> pd.DataFrame:
    """``samples`` without a worker's rows taken while it freed its data as it ended: after its
    last tick at its peak RSS, when its RSS then fell by ``TEARDOWN_MB`` or a tenth of that peak
    and it ended within ``TEARDOWN_S``. A spawned worker exits through the interpreter's
    teardown, which frees its copy of the dataset: read then, one had "start-up 97 MB" of its
    139 and a growth of -80 MB. Kept whole where no exact reading of it would be left."""
    mine = samples["pid"] == pid
    rows = samples[mine & ~samples["missing"].fillna(False).astype(bool)]
    rows = (
        rows.assign(rss=pd.to_numeric(rows["rss_mb"], errors="coerce"))
        .dropna(subset=["rss"])
        .sort_values("t")
    )
    if len(rows) < 2:
        return samples
    peak = float(rows["rss"].max())
    at_peak = float(rows.loc[rows["rss"] >= peak - STILL_MB, "t"].iloc[-1])
    fell = peak - float(rows["rss"].iloc[-1])
    if fell < max(TEARDOWN_MB, 0.1 * peak) or float(rows["t"].iloc[-1]) - at_peak > TEARDOWN_S:
        return samples
    kept = samples[~mine | (samples["t"] <= at_peak + 1e-9)]
    return kept if ((kept["pid"] == pid) & (kept["tier"] == "pss")).any() else samples


def _to_last_tick(
    window: pd.DataFrame, samples: pd.DataFrame, pid: int, after: float, until: float
) -> pd.DataFrame:
    """A parent's window carried to its last tick while it had workers: its own growth is the
    rise of its anonymous RSS, read every tick, so it needs no exact reading there (its USS there
    is the sampler's estimate). A program that pickled its data to spawn children and freed the
    buffer again has not grown, whenever its last exact reading fell."""
    if "uss_est_mb" not in samples:
        return window
    rows = samples[
        (samples["pid"] == pid)
        & (samples["t"] > after)
        & (samples["t"] <= until)
        & ~samples["missing"].fillna(False).astype(bool)
    ]
    rows = rows[pd.to_numeric(rows["uss_est_mb"], errors="coerce").notna()].sort_values("t")
    if rows.empty:
        return window
    last = rows.iloc[[-1]].assign(uss_mb=lambda d: pd.to_numeric(d["uss_est_mb"]))
    return pd.concat([window, last])


def _before_fork(before: pd.DataFrame, since: float) -> pd.DataFrame:
    """A parent's readings up to its last one before its first fork. A reading is dated by its
    tick's start and taken later in the tick (tens of ms under load), maybe after a fork that
    started in between, which shows its pages shared already: of the readings in the last half
    second before, and the one before them, the largest (a fork only lowers it)."""
    near = before[before["t"] >= since - FORK_MARGIN_S]
    if near.empty:
        return before
    candidates = pd.concat([before[before["t"] < since - FORK_MARGIN_S].iloc[-1:], near])
    top = float(candidates.loc[candidates["uss_mb"].idxmax(), "t"])
    return before[before["t"] <= top]


def _parent_before(pid: int, samples: pd.DataFrame, before: pd.DataFrame, since: float) -> dict | None:
    """A parent's state just before ``since`` (its first worker's start, or the first mark) when
    it kept building (or freed) after its last exact reading in ``before``: that reading's USS
    plus the change of its anonymous RSS since (before a first fork every anonymous page is its
    own, and that counter is read every tick). None when it moved less than a megabyte (the
    reading is the start) or there is no reading before."""
    if before.empty or "rss_anon_mb" not in samples:
        return None
    t0, uss0 = float(before["t"].iloc[-1]), float(before["uss_mb"].iloc[-1])
    mine = samples[samples["pid"] == pid].sort_values("t")
    mine = mine.assign(anon=pd.to_numeric(mine["rss_anon_mb"], errors="coerce")).dropna(subset=["anon"])
    rows = mine[(mine["t"] >= t0) & (mine["t"] < since)]
    # A fork leaves the parent's RSS as it was: its first tick after holds no more than it had at
    # the fork, unless it allocated since. What it freed between its last tick and the fork (a
    # temporary list deleted just before the DataLoader started) it did not hold there.
    after = mine[mine["t"] >= since].iloc[:1]
    if len(rows) and len(after):
        rise = float(after["anon"].iloc[0]) - float(rows["anon"].iloc[-1])
        # What it allocated up to that tick, where its window opens, it built before its fork:
        # on a wide tree ticks are up to 2 s apart, and a main process that filled 50 MB more
        # between its last tick before its fork and its first after was said to have built
        # +53.6 MB of its 104. A few MB there may be its workers' set-up after the fork: left out.
        if rise < 0 or rise >= BUILT_ACROSS_FORK_MB:
            rows = pd.concat([rows, after])
    if len(rows) < 2 or abs(float(rows["anon"].iloc[-1] - rows["anon"].iloc[0])) < STILL_MB:
        return None
    last = rows.iloc[-1]
    return {
        "t": float(last["t"]),
        "uss_mb": uss0 + float(last["anon"] - rows["anon"].iloc[0]),
        "rss_mb": last.get("rss_mb"),
        "rss_anon_mb": float(last["anon"]),
        "minflt": last.get("minflt"),
        "anon_huge_mb": None,
    }


def _renamed_t(samples: pd.DataFrame, pid: int) -> float | None:
    """When torch renamed a spawn/forkserver DataLoader worker (after it unpickled the dataset):
    its first row as a DataLoader worker after rows as something else."""
    rows = samples[(samples["pid"] == pid) & ~samples["missing"].fillna(False).astype(bool)].sort_values("t")
    if rows.empty:
        return None
    is_dl = (
        rows["kind"] == DATALOADER if "kind" in rows and rows["kind"].notna().any() else rows["worker"] >= 0
    )
    if is_dl.all() or not is_dl.any():
        return None
    return float(rows.loc[is_dl, "t"].iloc[0])


def _settled_t(samples: pd.DataFrame, p: Proc) -> float:
    """The end of a spawn/exec child's start-up (:func:`memprobe.probe.tree.startup_end`, the rule
    the sampler reads it by), at the latest 10 s after its start or half-way through its life:
    every worker that lives a few seconds has a window to be judged over."""
    end = p.end_t if p.end_t is not None else p.last_t
    limit = p.start_t + min(STARTUP_MAX_S, STARTUP_LIFE_SHARE * max(end - p.start_t, 0.0))
    rows = samples[(samples["pid"] == p.pid) & samples["rss_mb"].notna() & (samples["t"] <= limit)]
    rows = rows.sort_values("t")
    t = rows["t"].to_numpy(float)
    cpu = pd.to_numeric(rows["cpu_s"], errors="coerce").ffill().fillna(0.0) if "cpu_s" in rows else rows["t"]
    found = startup_end(t, rows["rss_mb"].to_numpy(float), cpu.to_numpy(float))
    return found if found is not None else limit


def first(s: pd.Series) -> float | None:
    return float(s.iloc[0]) if len(s) else None


def last(s: pd.Series) -> float | None:
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


# -- the run -------------------------------------------------------------------------------------------


def table(
    meta: dict, samples: pd.DataFrame, progress: pd.DataFrame, procs: list[Proc] | None = None
) -> list[Growth]:
    """The per-process table: every process of the tree (``procs``, :func:`processes` where not
    given), parents first, then per rank."""
    procs = processes(meta, samples) if procs is None else procs
    milestones = meta.get("milestones") or {}
    # Each process's own rows once: an hour-long job has hundreds of thousands of rows.
    own = dict(tuple(samples.groupby("pid", sort=False))) if not samples.empty else {}
    rows = [process_growth(p, own.get(p.pid, samples.iloc[0:0]), procs, milestones) for p in procs]
    rows = [replace(g, denied=denied_reason(own.get(g.pid))) for g in rows]
    return sorted(with_items(rows, progress), key=_order)


def denied_reason(rows: pd.DataFrame | None) -> str | None:
    """The first reason among a process's rows that says memprobe may not read its memory map."""
    if rows is None or rows.empty or "reason" not in rows:
        return None
    said = [r for r in rows["reason"].dropna() if vocabulary.denied(r)]
    return str(said[0]) if said else None


def _order(g: Growth) -> tuple:
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
