"""Every process of a recorded job (:func:`processes`), from the meta's process list (what an
older meta lacks filled in by :mod:`memprobe.record.upgrade`) and, for a process the meta does
not list, from the samples. One correction applies to every meta: DataLoader workers recorded as
one generation that were two (:func:`with_loader_generations`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pandas as pd

from memprobe.core.vocabulary import DATALOADER, FORK, MAIN, OTHER
from memprobe.record import upgrade
from memprobe.record.process import Proc, finite_or, owner

END_TOGETHER_S = 2.0  # DataLoader workers whose last ticks alive are this close ended together


def processes(meta: dict, samples: pd.DataFrame) -> list[Proc]:
    """Every process of the run, from the meta where it lists them, else from the samples."""
    listed = {int(p["pid"]): p for p in meta.get("processes") or []}
    seen = _seen(samples)
    for pid, row in seen.items():
        listed.setdefault(pid, row)
    methods = meta.get("start_methods") or {}
    # Older metas: one start method for the run's DataLoader workers, the most common seen.
    method = next(iter(methods)) if len(methods) == 1 else meta.get("start_method")
    root = next((p.get("command") for p in listed.values() if p.get("role") == MAIN), None)
    procs = [
        _proc(pid, p, seen.get(pid, {}), method, bool(meta.get("ranks")), root) for pid, p in listed.items()
    ]
    return upgrade.with_generations(with_loader_generations(upgrade.with_lineage(procs, meta)))


def _proc(
    pid: int, p: dict, seen: dict, method: str | None, has_ranks: bool, root_command: str | None
) -> Proc:
    """One process's facts; what an older meta lacks is derived from its role and the samples."""
    role = str(p.get("role") or OTHER)
    worker = int(p["worker"]) if p.get("worker") is not None else -1
    kind = p.get("kind") or upgrade.older_kind(role, worker, has_ranks, p.get("command"), root_command)
    start_method = p.get("start_method") or (method if kind == DATALOADER else None)
    forked = p.get("forked")
    if forked is None:
        forked = kind == FORK or (kind == DATALOADER and start_method == FORK)
    first_t = finite_or(p.get("first_t"), seen.get("first_t", 0.0))
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
        finite_or(p.get("start_t"), first_t),
        first_t,
        finite_or(p.get("last_t"), seen.get("last_t", first_t)),
        finite_or(p.get("end_t"), None),
        finite_or(p.get("threads_first_t"), None),
        finite_or(p.get("threads_last_t"), None),
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


def _int_or_none(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


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
