"""One process of a recorded job as the analysis knows it (:class:`Proc`: its kind, parent,
rank, worker index, generation and life), and its relations: the process it works for
(:func:`owner`), the workers that open and close a parent's window (:func:`own_workers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import pandas as pd

from memprobe.core.tree_rules import owner_of
from memprobe.core.vocabulary import PARENT_KINDS, RANK, WORKER_KINDS


@dataclass(frozen=True)
class Proc:
    """The static facts of one process of the tree (meta ``processes``; an older folder's
    completed on load, :mod:`memprobe.results.upgrade`)."""

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


def as_analysed(samples: pd.DataFrame, procs: list[Proc]) -> pd.DataFrame:
    """``samples`` with each process's role and kind as the analysis knows them at the end (a
    program exec'd before its parent's workers has rows of "worker 0", kind exec), its parent and
    its start (:data:`memprobe.core.series.LINEAGE`: what the total PSS needs for a process never read
    exactly). A row holds its process's role at that tick: Lightning's rank 0 was "main", then
    "launcher" once it started rank 1, then "rank 0" once its workers started, and the stacked
    PSS chart drew three roles for one process (an older meta's spawned ranks stayed "worker K"
    in every row)."""
    if samples.empty or "pid" not in samples:
        return samples
    by_pid = {p.pid: p for p in procs}
    roles = samples["pid"].map({pid: p.role for pid, p in by_pid.items()})
    kinds = samples["pid"].map({pid: p.kind for pid, p in by_pid.items()})
    return samples.assign(
        role=roles.fillna(samples["role"]) if "role" in samples else roles,
        kind=kinds.fillna(samples["kind"]) if "kind" in samples else kinds,
        ppid=samples["pid"].map({pid: p.ppid for pid, p in by_pid.items()}),
        start_t=samples["pid"].map({pid: p.start_t for pid, p in by_pid.items()}),
    )


def owner(p: Proc, by_pid: dict[int, Proc]) -> Proc | None:
    """The process a worker works for (:func:`memprobe.core.tree_rules.owner_of`)."""
    return owner_of(p.ppid, by_pid, attrgetter("ppid"), attrgetter("kind"))


def own_workers(p: Proc, procs: list[Proc]) -> list[Proc]:
    """The processes whose lives open and close a parent's window: its workers (a helper's
    children included). A launcher's children are its ranks: it counts from the first, as a
    rank from its first worker; a rank that started ranks (Lightning's rank 0) from its own
    first worker. A program it exec'd beside its workers (kind ``program``: W&B's wandb-core,
    started before a Lightning fit built its dataset) is none of them: its start made the
    dataset the main process's own growth."""
    by_pid = {q.pid: q for q in procs}
    workers = [q for q in procs if q.is_worker and (o := owner(q, by_pid)) is not None and o.pid == p.pid]
    return workers or [q for q in procs if q.kind == RANK and q.ppid == p.pid]

    # A root that trains as rank 0 beside the ranks it started (Lightning) counts from its own
    # workers: from rank 1's start it was still building, and to rank 1's end it was tearing down.


def finite_or(v: Any, default: Any) -> Any:
    return (
        float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else default
    )
