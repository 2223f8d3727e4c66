"""Every process of a recorded job (:func:`processes`), as its meta lists them: today's memprobe
lists every process it sampled with all of its facts, and a loaded folder of an older version
has its list completed once on load (:mod:`memprobe.results.upgrade`); nothing is derived here
from roles or samples. One correction applies to every meta: DataLoader workers recorded as one
generation that were two (:func:`with_loader_generations`), which the tree cannot see live.
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import pairwise
from typing import Any, TypeVar

from memprobe.core.vocabulary import DATALOADER, OTHER
from memprobe.record.process import Proc, finite_or, owner

_T = TypeVar("_T", int, None)

END_TOGETHER_S = 2.0  # DataLoader workers whose last ticks alive are this close ended together


def processes(meta: dict) -> list[Proc]:
    """Every process of the run, from the meta's list (in today's shape: a loaded folder's)."""
    return with_loader_generations([_proc(p) for p in meta.get("processes") or []])


def _proc(p: dict) -> Proc:
    """One process's facts as listed (a value of the wrong type, from a folder edited by hand, as
    none: the schema let it through as null)."""
    first_t = finite_or(p.get("first_t"), 0.0)
    return Proc(
        int(p["pid"]),
        _int_or(p.get("ppid"), None),
        str(p.get("role") or OTHER),
        str(p.get("kind") or OTHER),
        bool(p.get("forked")),
        p.get("start_method"),
        _int_or(p.get("rank"), -1),
        _int_or(p.get("worker"), -1),
        _int_or(p.get("generation"), None),
        finite_or(p.get("start_t"), first_t),
        first_t,
        finite_or(p.get("last_t"), first_t),
        finite_or(p.get("end_t"), None),
        finite_or(p.get("threads_first_t"), None),
        finite_or(p.get("threads_last_t"), None),
    )


def _int_or(v: Any, default: _T) -> int | _T:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


_INDEXED = re.compile(r"^((?:rank \d+ )?worker )\d+$")


def with_loader_generations(procs: list[Proc]) -> list[Proc]:
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
