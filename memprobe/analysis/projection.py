"""What a recorded job would need at other worker and rank counts: each rank (or the job's only
parent) as measured (:class:`RankShape`), their means (:class:`Basis`) and the projection
from them, as measured and with every forked worker holding a full copy of its parent.

The projection scales the recording itself (:class:`Rounds`): at each round of its total PSS, the
workers' private memory (USS) counted for N workers in place of those that ran, and the ranks'
part for R ranks; each figure is the highest of those over the recording, so the configuration
that ran is the peak total PSS, the figure the summary, the page and the terminal state. Built
from USS figures alone (what a parent held before its fork, its own growth, each worker's), the
projection of one recording said "4 workers (measured) 1,164 MB" beside a peak of 1,297 MB: total
PSS also counts the pages the main process copied by writing to pages its workers share (+92 MB,
in no process's own growth) and its share of pages other programs map (its libraries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from memprobe.analysis.growth import Growth, grown, judged_workers
from memprobe.analysis.process import Proc
from memprobe.core.vocabulary import (
    DATALOADER,
    PARENT_KINDS,
    RANK,
    WORKER_KINDS,
)

PROJECTION_WORKERS = (2, 4, 8, 16)
PROJECTION_RANKS = (1, 2, 4, 8)


# -- projection ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankShape:
    """What one rank (or the job's only parent) measured: its own memory, and per worker."""

    parent_mb: float  # the parent's USS just before its first worker started, plus all it built or grew since
    built_full_mb: float  # the parent's USS just before its workers started: what a fork can copy
    worker_start_mb: float  # per worker: USS at its baseline (0 for a fork, its start-up copy otherwise)
    worker_growth_mb: float  # per worker: own growth as measured (mean)
    workers: int  # most workers alive at once
    forked: bool
    written_mb: float = 0.0  # pages it made private by writing to pages its workers share: not growth


def rank_shapes(rows: list[Growth], procs: list[Proc]) -> list[RankShape]:
    """Per parent that has workers: its measured shape."""
    by_pid = {p.pid: p for p in procs}
    out = []
    for parent in (g for g in rows if g.kind in PARENT_KINDS and g.uss_start_mb is not None):
        mine = projected(
            [g for g in rows if g.parent_pid == parent.pid and g.judged and g.growth_mb is not None]
        )
        if not mine:
            continue
        forked = all(by_pid[g.pid].forked for g in mine if g.pid in by_pid)
        # What it held before its fork, not its USS after it: the pages its workers share are
        # counted once, here, and are what a full copy copies.
        start = held(parent)
        out.append(
            RankShape(
                start + max(grown(parent) + (parent.built_between_mb or 0.0), 0.0),
                start,
                float(np.mean([g.uss_start_mb or 0.0 for g in mine])),
                float(np.mean([g.growth_mb for g in mine])),
                most_alive(mine, by_pid),
                forked,
                max(parent.written_mb or 0.0, 0.0),
            )
        )
    return out


def held(parent: Growth) -> float:
    """What a parent held just before its first worker started: its reading then plus what it
    built; where it was not read before, at least what it was seen to build (its USS after the
    fork counts the pages its workers share as theirs)."""
    if parent.held_mb is not None:
        return parent.held_mb
    return max(parent.uss_start_mb or 0.0, parent.built_mb or 0.0)


def projected(workers: list[Growth]) -> list[Growth]:
    """The workers of one parent whose count a projection varies: its DataLoader workers where it
    has any (a Hugging Face job's ``ds.map(num_proc=4)`` pool, 5 processes with its manager, was
    once "5 workers (measured)" beside a DataLoader of 2), else all of them."""
    loaders = [g for g in workers if g.kind == DATALOADER]
    return loaders or workers


def most_alive(rows: list[Growth], by_pid: dict[int, Proc] | None = None) -> int:
    """The most of these processes alive at once, each from its start to its last tick seen alive.
    Not to the tick it was first seen gone (``end_t``): a DataLoader without persistent workers
    starts the next epoch's workers within that tick, and two generations of 2 workers were once
    counted as 4 workers "at once" (the projection's measured row said 4 workers per rank)."""
    by_pid = by_pid or {}

    def end(g: Growth) -> float:
        p = by_pid.get(g.pid)
        if p is not None:
            return p.last_t
        return g.end_t if g.end_t is not None else g.last_t or 0.0

    # Per generation: Lightning starts the next epoch's iterator before the last one's workers
    # exit, and two generations of 2 that overlapped by half a second were 4 "at once".
    best = 0
    for gen in {g.generation for g in rows}:
        life = [
            (g.start_t if g.start_t is not None else g.baseline_t or 0.0, end(g))
            for g in rows
            if g.generation == gen
        ]
        events = sorted([(a, 1) for a, _ in life] + [(b, -1) for _, b in life], key=lambda e: (e[0], e[1]))
        alive = 0
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
    built_between: bool = False  # parent_mb holds what a parent built between its worker generations
    # Per worker with "full copy": a full copy of what its parent held, except for the workers
    # whose USS levelled off before (counted as measured); how many of them levelled off.
    full_copy_worker_mb: float | None = None
    levelled: int = 0
    written_mb: float = 0.0  # per rank: pages its process copied by writing to pages its workers share


def projection_basis(rows: list[Growth], procs: list[Proc]) -> Basis | None:
    """The means a projection scales, or None for a job without measured workers."""
    shapes = rank_shapes(rows, procs)
    if not shapes:
        return None
    with_workers = {g.parent_pid for g in rows if g.kind in WORKER_KINDS}
    measured = [
        g for pid in with_workers for g in projected([w for w in judged_workers(rows) if w.parent_pid == pid])
    ]

    def mean(xs: Any) -> float:
        return float(np.mean(list(xs)))

    parents = {g.pid: g for g in rows if g.kind in PARENT_KINDS}

    def full_copy(g: Growth) -> float:
        """A worker's memory with a full copy of what its parent held; as measured where it levelled off."""
        own = (g.uss_start_mb or 0.0) + max(grown(g), 0.0)
        parent = parents.get(g.parent_pid) if g.parent_pid is not None else None
        if g.levelled or parent is None:
            return own
        return max(own, (g.uss_start_mb or 0.0) + held(parent))

    return Basis(
        len(shapes),
        any(g.kind == RANK for g in rows),
        round(mean(s.workers for s in shapes)),
        len(measured),
        mean((g.last_t or 0.0) - (g.baseline_t or 0.0) for g in measured),
        mean(s.parent_mb for s in shapes),
        mean(s.built_full_mb for s in shapes),
        mean(s.worker_start_mb for s in shapes),
        mean(s.worker_growth_mb for s in shapes),
        sum(g.uss_end_mb or 0.0 for g in rows if g.kind not in WORKER_KINDS and g.pid not in with_workers),
        all(s.forked for s in shapes),
        any(abs(g.built_between_mb or 0.0) >= 1 for g in rows if g.kind in PARENT_KINDS),
        mean(full_copy(g) for g in measured) if measured else None,
        sum(1 for g in measured if g.levelled),
        mean(s.written_mb for s in shapes),
    )


@dataclass(frozen=True)
class Rounds:
    """The recording as the projection scales it: at each round of its total PSS (the summary's,
    whose highest is the peak total PSS), the PSS of the processes counted once whatever the rank
    count (launcher, helpers, parents without workers: ``once_mb``) and the private memory (USS)
    of the workers whose count the projection varies (``workers_uss_mb``, ``workers_alive`` of
    them with a reading then)."""

    t: np.ndarray
    total_mb: np.ndarray
    once_mb: np.ndarray
    workers_uss_mb: np.ndarray
    workers_alive: np.ndarray

    def peak(self) -> dict:
        """The round of the peak total PSS, in its parts (summary.json's ``projection_peak``)."""
        i = int(np.argmax(self.total_mb))
        return {
            "t": float(self.t[i]),
            "total_mb": float(self.total_mb[i]),
            "workers_uss_mb": float(self.workers_uss_mb[i]),
            "workers": int(self.workers_alive[i]),
            "once_mb": float(self.once_mb[i]),
        }


def projection_rounds(
    rows: list[Growth], totals: pd.Series, pss: pd.DataFrame, uss: pd.DataFrame
) -> Rounds | None:
    """The rounds of ``totals`` (total PSS, NaN rounds left out) split for the projection:
    ``pss`` and ``uss`` per process at those rounds (:func:`memprobe.core.series.by_pid`). None
    without a round or without a worker to scale."""
    with_workers = {g.parent_pid for g in rows if g.kind in WORKER_KINDS}
    scaled = [
        g.pid
        for pid in with_workers
        for g in projected([w for w in rows if w.kind in WORKER_KINDS and w.parent_pid == pid])
    ]
    once = [g.pid for g in rows if g.kind not in WORKER_KINDS and g.pid not in with_workers]
    if totals.empty or not scaled:
        return None

    def columns(table: pd.DataFrame, pids: list[int]) -> pd.DataFrame:
        return table.reindex(index=totals.index, columns=pids)

    workers = columns(uss, scaled)
    return Rounds(
        totals.index.to_numpy(float),
        totals.to_numpy(float),
        columns(pss, once).sum(axis=1).to_numpy(float),
        workers.sum(axis=1).to_numpy(float),
        workers.notna().sum(axis=1).to_numpy(int),
    )


def projection(basis: Basis | None, rounds: Rounds | None = None) -> list[dict]:
    """The memory the job would need at other worker counts per rank and rank counts.

    With the recording's ``rounds``: at each round, the workers' private memory (USS) times
    N / the workers per rank that ran, the ranks' part (all but the processes counted once) times
    R / the ranks that ran; the highest over the recording. The configuration that ran is the
    peak total PSS itself. Without rounds (no total PSS): each rank as measured (the mean over its
    ranks), its shared pages once per rank, each worker's private memory as measured over the
    same duration, other processes (launcher, helpers) once.

    ``full_copy_mb``: the same with every forked worker ending with a full copy of what its
    parent held when it started (each worker plus what it had left to copy), except those whose
    USS levelled off (a worker that copied 40 % and stopped is counted as measured)."""
    if basis is None:
        return []
    b = basis
    rank_counts = sorted({b.ranks, *PROJECTION_RANKS}) if b.has_ranks else [1]
    per_worker = b.worker_start_mb + max(b.worker_growth_mb, 0.0)
    if not b.forked:
        copy = per_worker
    elif b.full_copy_worker_mb is not None:
        copy = max(per_worker, b.full_copy_worker_mb)
    else:
        copy = max(per_worker, b.worker_start_mb + b.full_copy_mb)

    def measured(r: int, w: int) -> float:
        if rounds is None:
            return b.others_mb + r * (b.parent_mb + w * per_worker)
        ranks, workers = r / b.ranks - 1.0, (r / b.ranks) * (w / b.workers - 1.0)
        # As the difference from each round's total: the configuration that ran is the total itself.
        total = rounds.total_mb
        return float(np.max(total + ranks * (total - rounds.once_mb) + workers * rounds.workers_uss_mb))

    return [
        {
            "ranks": r,
            "workers_per_rank": w,
            "measured_mb": measured(r, w),
            "full_copy_mb": measured(r, w) + r * w * (copy - per_worker),
            "as_measured": r == b.ranks and w == b.workers,
        }
        for w in sorted({b.workers, *PROJECTION_WORKERS})
        for r in rank_counts
    ]
