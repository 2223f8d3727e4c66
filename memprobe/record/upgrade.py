"""What a recorded job's meta written by an older memprobe lacks, derived once from what it holds
(:func:`memprobe.record.processes.processes` applies it; today's metas hold all of it, as the
tree classified each process while it ran, :mod:`memprobe.probe.tree`): a process's kind from
its role, a worker's parent, the ranks that did not say so, and worker generations.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from memprobe.core.tree_rules import lowest_free
from memprobe.core.vocabulary import DATALOADER, FORK, HELPER_ROLES, LAUNCHER, MAIN, OTHER, RANK
from memprobe.record.process import Proc, owner

_RANK = re.compile(r"^rank \d+$")


def older_kind(
    role: str, worker: int, has_ranks: bool, command: str | None = None, root_command: str | None = None
) -> str:
    """Kind from an older meta's role: only DataLoader workers were workers then; an "other"
    child with its parent's command line was forked, never exec'd."""
    if role == MAIN:
        return LAUNCHER if has_ranks else MAIN
    if _RANK.match(role):
        return RANK
    if worker >= 0:
        return DATALOADER
    for helper in HELPER_ROLES:
        if role.endswith(helper):
            return helper
    return FORK if root_command and command == root_command else OTHER


def _under_rank(role: str, old: str, rank: int) -> str:
    """A role under a process that became ``rank K``: ``worker K.J`` (a spawned child's worker)
    and ``worker J`` (a launcher's) become ``rank K worker J``, ``forkserver`` ``rank K forkserver``."""
    if role.startswith(old + "."):
        return f"rank {rank} worker {role[len(old) + 1 :]}"
    return role if role.startswith("rank ") else f"rank {rank} {role}"


def with_generations(procs: list[Proc]) -> list[Proc]:
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


def with_lineage(procs: list[Proc], meta: dict) -> list[Proc]:
    """Each worker's parent where the meta has none, then the ranks that did not say so."""
    return with_nested_parents(with_parents(procs, meta))


def with_parents(procs: list[Proc], meta: dict) -> list[Proc]:
    """Older metas have no ppid: a worker's parent is its rank's process, else the root."""
    root = meta.get("root_pid") or next((p.pid for p in procs if p.role == MAIN), None)
    ranks = {int(r): int(pid) for r, pid in (meta.get("ranks") or {}).items()}
    return [
        p if p.ppid is not None or not p.is_worker else replace(p, ppid=ranks.get(p.rank, root))
        for p in procs
    ]


def with_nested_parents(procs: list[Proc]) -> list[Proc]:
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
        promoted[p.pid] = p.worker if p.worker >= 0 and p.worker not in taken else lowest_free(taken)
        taken.add(promoted[p.pid])
    for p in procs:
        if p.kind == LAUNCHER and p.pid in owners and any(q.kind == RANK and q.ppid == p.pid for q in procs):
            promoted[p.pid] = lowest_free(taken)
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
