"""The rules a recorded tree is read by, the same live (the tree sampler, :mod:`memprobe.probe.tree`)
and afterwards (the record path's analysis, :mod:`memprobe.analysis.windows`; an older folder's
upgrade on load, :mod:`memprobe.results.upgrade`), so that the report, which reads results, never
reaches the probe: when a spawned or exec'd worker's start-up is over (:func:`settled_at`,
:func:`startup_end`), which index a new worker or rank takes (:func:`lowest_free`), and, on a
meta's process list, the generation of a worker no parent of the tree numbered
(:func:`with_generations`) and DataLoader workers numbered as one generation that were two
(:func:`with_loader_generations`); and the thresholds the analysis judges by that its words (the
record page, the terminal) quote: when a worker levelled off, the estimate's floor, a cgroup
that holds the job alone, a process that ran before memprobe began (:func:`seen_late`).
Standard library only."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from operator import itemgetter
from typing import TypeVar

from memprobe.core.vocabulary import COMMAND, DATALOADER, EXEC, HELPER_ROLES, PROGRAM, WORKER_KINDS

E = TypeVar("E")  # a process as one stage knows it: a meta's entry, the analysis' Proc

# The end of a spawned or exec'd worker's start-up (it boots an interpreter and unpickles what it
# was given: its own copy, not growth): the first moment its RSS held still while it ran. Still
# per CPU second it used over the last half second at least (a process waiting for a CPU on a
# loaded machine holds still without having started anything), and relative to its size (a
# 500 MB process's allocator moves by more than a megabyte while it works).
STILL_SPAN_S, STILL_CPU_S = 0.5, 0.1
STILL_MB_PER_CPU_S, STILL_SHARE_PER_CPU_S = 10.0, 0.05
# A start-up is taken to be over by then at the latest (the sampler stops watching for its end;
# the analysis caps the start-up window there, or at a share of the worker's life).
STARTUP_MAX_S = 10.0
# A worker levelled off when over the last third of its window (at least LEVEL_TAIL_S, in a
# window of at least LEVEL_MIN_S) its USS rose less than LEVEL_SHARE of its growth plus LEVEL_NOISE_MB.
LEVEL_MIN_S, LEVEL_TAIL_S, LEVEL_SHARE, LEVEL_NOISE_MB = 3.0, 1.0, 0.05, 1.0
ESTIMATE_FLOOR_MB = 10.0  # the USS estimate's errors are percentages of readings at least this large
ALONE_MB = 32.0  # other processes in the job's cgroup holding less than this together: the job alone
SEEN_LATE_S = 0.5  # a process started this long before memprobe began was running already (watch)


def seen_late(start_t: float | None) -> bool:
    """A process started then (``start_t``) was running before memprobe began (``watch``): its
    building was not seen."""
    return start_t is not None and start_t < -SEEN_LATE_S


def lowest_free(taken: set[int]) -> int:
    """The lowest index not taken: a worker or rank appearing while others live takes it."""
    return next(i for i in range(len(taken) + 1) if i not in taken)


# A child program seen alive for less than this from its start, and then ended, is a command its
# parent ran for a moment, not a worker (:func:`brief_commands`).
BRIEF_COMMAND_S = 1.0


def brief_commands(processes: list[dict]) -> list[dict]:
    """A meta's process list with each brief command made one: a child that exec'd a program
    (kind ``exec``, or ``program`` beside its parent's workers) last seen alive within
    :data:`BRIEF_COMMAND_S` of its start and then ended. torch's CUDA build runs
    ``ldconfig -p`` at ``import torch`` (ctypes.util.find_library): recorded, every such job
    had a "worker 0 (exec)" with no exact reading to judge, and a worker generation before its
    DataLoader's, so the main process's growth up to its workers read "between worker
    generations". Its kind becomes ``command`` and its role ``command`` (after its rank's, as a
    helper's): listed, never a worker; its parent's later generations are numbered from 0 again.
    DataLoader, spawned and forked workers are never commands, however short their lives (a
    forked worker the OOM killer ended 0.8 s after its fork is the job's worker; a subprocess
    seen between its fork and its exec stays a forked child, a window of milliseconds)."""
    out, renumber = [], set()
    for p in processes:
        ended = p.get("end_t") is not None
        if p["kind"] in (EXEC, PROGRAM) and ended and p["last_t"] - p["start_t"] < BRIEF_COMMAND_S:
            rank = p.get("rank", -1)
            role = f"rank {rank} {COMMAND}" if rank is not None and rank >= 0 else COMMAND
            out.append({**p, "kind": COMMAND, "role": role, "worker": -1, "generation": None})
            renumber.add(p["ppid"])
        else:
            out.append(p)
    for ppid in renumber:
        counted_from_zero([p for p in out if p["ppid"] == ppid])
    return out


def counted_from_zero(processes: list[dict]) -> None:
    """The workers among one parent's ``processes`` with their generations counted 0, 1, ... in
    their order (in place), once processes that are no workers (a brief command, a program run
    beside the workers) left the generations they had started."""
    mine = [p for p in processes if p["kind"] in WORKER_KINDS and p["generation"] is not None]
    dense = {g: k for k, g in enumerate(sorted({p["generation"] for p in mine}))}
    for p in mine:
        p["generation"] = dense[p["generation"]]


def with_generations(processes: list[dict]) -> list[dict]:
    """A meta's process list (its entries' ``pid``, ``ppid``, ``kind``, ``generation``,
    ``start_t``, ``last_t``, ``end_t``) with a generation for every worker that has none (the
    tree numbers the workers of its own processes; one whose parent it never saw, or an older
    meta's): per parent, a worker that starts after all earlier workers of that parent ended
    begins the next one."""
    out = {p["pid"]: p for p in processes}
    by_parent: dict[int | None, list[dict]] = {}
    for p in processes:
        if p["kind"] in WORKER_KINDS and p["generation"] is None:
            by_parent.setdefault(p["ppid"], []).append(p)
    for group in by_parent.values():
        gen, ends = -1, -math.inf
        for p in sorted(group, key=lambda p: (p["start_t"], p["pid"])):
            if p["start_t"] > ends:
                gen += 1
            ends = max(ends, p["end_t"] if p["end_t"] is not None else p["last_t"])
            out[p["pid"]] = {**p, "generation": gen}
    return [out[p["pid"]] for p in processes]


END_TOGETHER_S = 2.0  # DataLoader workers whose last ticks alive are this close ended together
_INDEXED = re.compile(r"^((?:rank \d+ )?worker )\d+$")


def owner_of(
    ppid: int | None, by_pid: Mapping[int, E], ppid_of: Callable[[E], int | None], kind_of: Callable[[E], str]
) -> E | None:
    """The process a worker whose parent is ``ppid`` works for: its parent, or the parent's parent
    when a helper (a forkserver) forked it. The one rule, for a meta's entries (:func:`owner`)
    and the analysis' processes (:func:`memprobe.analysis.process.owner`)."""
    parent = by_pid.get(ppid) if ppid is not None else None
    if parent is not None and kind_of(parent) in HELPER_ROLES:
        up = ppid_of(parent)
        return by_pid.get(up) if up is not None else parent
    return parent


def owner(p: dict, by_pid: dict[int, dict]) -> dict | None:
    """The entry of the process a worker works for (:func:`owner_of`)."""
    return owner_of(p["ppid"], by_pid, itemgetter("ppid"), itemgetter("kind"))


def with_loader_generations(processes: list[dict]) -> list[dict]:
    """A meta's process list with a parent's DataLoader workers numbered as one generation that
    were two split: those that end together (within ``END_TOGETHER_S``: an iterator shuts its
    workers down together, and torch never replaces one) started after every one of those that
    ended before them. Lightning's ``ddp_spawn`` starts the next epoch's spawned workers (one
    after the other, each once the last has read its copy) while the last epoch's still live:
    the tree cannot tell while they start, and they were "worker 2" and "worker 3" of one
    generation, 4 workers per rank "at once"."""
    by_pid = {p["pid"]: p for p in processes}
    groups: dict[tuple, list[dict]] = {}
    for p in processes:
        if p["kind"] == DATALOADER and p["generation"] is not None and (o := owner(p, by_pid)) is not None:
            groups.setdefault((o["pid"], p["generation"]), []).append(p)
    splits = {key: _end_clusters(ws) for key, ws in groups.items()}
    if all(len(c) < 2 for c in splits.values()):
        return processes
    out = {p["pid"]: p for p in processes}
    for parent in {key[0] for key in groups}:
        clusters = [c for key in sorted(k for k in groups if k[0] == parent) for c in splits[key]]
        for gen, cluster in enumerate(clusters):
            for index, p in enumerate(sorted(cluster, key=lambda p: (p["start_t"], p["pid"]))):
                m = _INDEXED.match(p["role"])
                role = f"{m.group(1)}{index}" if m else p["role"]
                out[p["pid"]] = {**p, "generation": gen, "worker": index if m else p["worker"], "role": role}
    return [out[p["pid"]] for p in processes]


def _end_clusters(workers: list[dict]) -> list[list[dict]]:
    """Workers of one recorded generation in groups that ended together, in order of their end;
    one group unless each group started after every worker of the group before it."""
    ends = sorted(workers, key=lambda p: (p["last_t"], p["pid"]))
    clusters: list[list[dict]] = []
    for p in ends:
        if clusters and p["last_t"] - clusters[-1][-1]["last_t"] <= END_TOGETHER_S:
            clusters[-1].append(p)
        else:
            clusters.append([p])
    for before, after in pairwise(clusters):
        if min(p["start_t"] for p in after) <= max(p["start_t"] for p in before):
            return [workers]
    return clusters


def settled_at(t: Sequence[float], rss_mb: Sequence[float], cpu_s: Sequence[float], i: int) -> bool:
    """Whether a spawned or exec'd worker's start-up is over at its ``i``-th row (see
    ``STILL_SPAN_S``): over the rows back to where it spent ``STILL_CPU_S`` of CPU and at least
    ``STILL_SPAN_S`` went by, its RSS rose less than 10 MB, or 5 % of its RSS, per CPU second."""
    j = i
    while j > 0 and (t[i] - t[j] < STILL_SPAN_S or cpu_s[i] - cpu_s[j] < STILL_CPU_S):
        j -= 1
    cpu = cpu_s[i] - cpu_s[j]
    if t[i] - t[j] < STILL_SPAN_S or cpu < STILL_CPU_S:
        return False
    rise = rss_mb[i] - min(rss_mb[j : i + 1])
    return rise / cpu < max(STILL_MB_PER_CPU_S, STILL_SHARE_PER_CPU_S * rss_mb[i])


def startup_end(t: Sequence[float], rss_mb: Sequence[float], cpu_s: Sequence[float]) -> float | None:
    """The time of the first row at which the start-up is over (:func:`settled_at`), or None."""
    return next((float(t[i]) for i in range(len(t)) if settled_at(t, rss_mb, cpu_s, i)), None)
