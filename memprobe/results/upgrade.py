"""A results folder's run records (meta.json) of an older schema version in today's shape, when the
folder is loaded, never rewritten: the one place older metas are upgraded; the analysis reads
every meta in today's shape and derives none of it. Each meta as read (:func:`upgraded`):
version 1 named the run's milestones ``marks``; before version 3 a recorded job's meta was a
scenario-like spec (:func:`upgrade_recorded`, which the schema check applies too). A recorded job's process list once its samples are loaded
(:func:`complete_processes`, called by :meth:`memprobe.results.folder.ResultSet.of`), below.

From schema version 4 (:data:`PROCESSES_COMPLETE`) the tree sampler lists every process it
sampled with its kind, parent, rank, worker index, generation and life
(:meth:`memprobe.probe.tree_sampler.TreeSampler.process_list`), and the analysis takes the list
as it is (:func:`memprobe.analysis.processes.processes`). An older meta lacks some of it:

* written before the tree was classified (version 1, until 6532fbd): no kind, parent or
  generation; a process's kind comes from its role (:func:`older_kind`), a worker's parent is
  its rank's process or the root (:func:`with_parents`), its generation from the lives of its
  siblings (:func:`memprobe.core.tree_rules.with_generations`);
* written before ranks that do not say so were named at record time (versions 1 and 2, until
  7fb42a5): ``torch.multiprocessing.spawn``'s ranks and Lightning's root are renamed ranks
  (:func:`with_nested_parents`);
* written before the recorder split DataLoader workers numbered as one generation that were
  two (version 3 and before): split (:func:`memprobe.core.tree_rules.with_loader_generations`);
* written before the tree named the programs a process runs beside its workers (``program K``):
  W&B's wandb-core, exec'd by a Lightning fit before its DataLoader workers, was "worker 0" (kind
  ``exec``) and could start their generation; listed as a program (:func:`with_programs`),
  whatever the version (today's lists have none to rename);
* a process the samples hold that the list does not (a version-1 meta listed only some; a meta
  saved at a checkpoint, memprobe killed after it, lists none that started later): added from
  its rows, then completed as above, whatever the version.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from memprobe.core.tree_rules import (
    counted_from_zero,
    lowest_free,
    owner,
    with_generations,
    with_loader_generations,
)
from memprobe.core.vocabulary import (
    DATALOADER,
    EXEC,
    FORK,
    HELPER_ROLES,
    LAUNCHER,
    MAIN,
    OTHER,
    PROGRAM,
    RANK,
    SPAWN,
    WORKER_KINDS,
    program_role,
)

# The first schema version whose recorded metas list every process with all of its facts.
PROCESSES_COMPLETE = 4

_RANK = re.compile(r"^rank \d+$")


RECORDED_KINDS = ("record", "watch")


def is_recorded(meta: dict) -> bool:
    """A run of ``memprobe record`` or ``watch`` (older metas say so in the spec's workload)."""
    spec = meta.get("spec")
    workload = spec.get("workload") if isinstance(spec, dict) else None
    return (meta.get("kind") or workload) in RECORDED_KINDS


def upgrade_recorded(meta: dict) -> dict:
    """A recorded job's run record in the current shape (others as they are). Earlier memprobes
    wrote it as a scenario's spec so that the scenario analysis took it: ``spec.backend`` the
    command's name (the run id), ``spec.mode`` the workers' most common start method (or the
    kind when none appeared), ``spec.workers`` the most alive at once, ``spec.verdict``, and
    ``spec.command``, ``spec.pid``, ``spec.ended``, ``spec.sampling``. Now each is a field of its
    own: ``start_method`` (None without workers), ``max_workers``, ``verdict``, ``command``,
    ``pid``, ``ended``, ``sampling``. Read this way, never rewritten."""
    spec = meta.get("spec")
    if not is_recorded(meta) or not isinstance(spec, dict) or "max_workers" in meta:
        return meta
    out = {k: v for k, v in meta.items() if k != "spec"}
    out["kind"] = meta.get("kind") or spec.get("workload")
    mode = spec.get("mode")
    out["start_method"] = None if mode in RECORDED_KINDS else mode
    out["max_workers"] = spec.get("workers")
    out["verdict"] = spec.get("verdict")
    for key in ("command", "pid", "ended", "sampling"):
        if key in spec:
            out[key] = spec[key]
    return out


def upgraded(meta: dict, version: int) -> dict:
    """A run record (meta.json) of schema ``version`` in today's shape, but for a recorded job's
    process list (:func:`complete_processes`, which needs the samples)."""
    return upgrade_recorded(upgrade_meta(meta, version))


def upgrade_meta(meta: dict, version: int) -> dict:
    """Version 1 named the run's milestones ``marks``, the word :func:`memprobe.mark` uses for
    counting items."""
    if version < 2 and "marks" in meta and "milestones" not in meta:
        return {("milestones" if k == "marks" else k): v for k, v in meta.items()}
    return meta


def complete_processes(meta: dict, samples: pd.DataFrame, version: int) -> dict:
    """``meta`` with its process list complete (see the module doc) if it is a recorded job's of
    a version before :data:`PROCESSES_COMPLETE` or its samples hold a process it does not list;
    else ``meta`` as it is. ``samples``: the run's rows."""
    if not is_recorded(meta):
        return meta
    listed = {int(p["pid"]): p for p in meta.get("processes") or []}
    seen = _seen(samples)
    if version >= PROCESSES_COMPLETE and seen.keys() <= listed.keys():
        named = with_programs(meta.get("processes") or [])
        return meta if named is meta.get("processes") else meta | {"processes": named}
    for pid, row in seen.items():
        listed.setdefault(pid, row)
    methods = meta.get("start_methods") or {}
    # Older metas: one start method for the run's DataLoader workers, the most common seen.
    method = next(iter(methods)) if len(methods) == 1 else meta.get("start_method")
    root = next((p.get("command") for p in listed.values() if p.get("role") == MAIN), None)
    has_ranks = bool(meta.get("ranks"))
    entries = [_entry(pid, p, seen.get(pid, {}), method, has_ranks, root) for pid, p in listed.items()]
    lineage = with_nested_parents(with_parents(entries, meta))
    return meta | {"processes": with_programs(with_generations(with_loader_generations(lineage)))}


def with_programs(processes: list[dict]) -> list[dict]:
    """A process list with the programs a process ran beside its workers named as today's tree
    names them (:class:`memprobe.probe.tree.TreeRoles`): an exec'd child (kind
    ``exec``) of a process that had DataLoader, spawned or forked workers becomes ``program K``
    (the lowest index its earlier programs still alive at its start do not hold), no worker
    index, no generation; its parent's generations counted from the workers'. The workers keep
    their indices: the samples and the pages of that folder named them so. ``processes`` itself
    when there is none (today's lists)."""
    by_pid = {p["pid"]: p for p in processes}
    with_loaders = {
        o["pid"]
        for p in processes
        if p["kind"] in (DATALOADER, SPAWN, FORK) and (o := owner(p, by_pid)) is not None
    }
    programs = sorted(
        (
            p
            for p in processes
            if p["kind"] == EXEC and (o := owner(p, by_pid)) is not None and o["pid"] in with_loaders
        ),
        key=lambda p: (p["start_t"], p["pid"]),
    )
    if not programs:
        return processes
    out = {p["pid"]: dict(p) for p in processes}
    numbered: dict[int, list[tuple[int, dict]]] = {}  # owner pid -> (index, program) so far
    for p in programs:
        o = owner(p, by_pid)
        assert o is not None
        earlier = numbered.setdefault(o["pid"], [])
        index = lowest_free({k for k, q in earlier if _end(q) >= p["start_t"]})
        earlier.append((index, p))
        rank = o.get("rank")
        role = program_role(
            str(o["role"]), rank if isinstance(rank, int) else -1, o["kind"] in WORKER_KINDS, index
        )
        out[p["pid"]].update(kind=PROGRAM, role=role, worker=-1, generation=None, start_method=None)
    for pid in numbered:
        counted_from_zero([q for q in out.values() if (o := owner(q, out)) is not None and o["pid"] == pid])
    return [out[p["pid"]] for p in processes]


def _end(p: dict) -> float:
    return p["end_t"] if p["end_t"] is not None else p["last_t"]


def _entry(
    pid: int, p: dict, seen: dict, method: str | None, has_ranks: bool, root_command: str | None
) -> dict:
    """One process's facts; what the meta lacks derived from its role and the samples (its
    values were checked on load: numbers or null, :func:`memprobe.results.schema.check_meta`)."""
    role = str(p.get("role") or OTHER)
    worker = int(p["worker"]) if p.get("worker") is not None else -1
    kind = p.get("kind") or older_kind(role, worker, has_ranks, p.get("command"), root_command)
    start_method = p.get("start_method") or (method if kind == DATALOADER else None)
    forked = p.get("forked")
    if forked is None:
        forked = kind == FORK or (kind == DATALOADER and start_method == FORK)
    first_t = _or(p.get("first_t"), seen.get("first_t", 0.0))
    return {
        **p,
        "pid": pid,
        "ppid": _or(p.get("ppid"), None, int),
        "role": role,
        "kind": kind,
        "forked": bool(forked),
        "start_method": start_method,
        "rank": _or(p.get("rank"), -1, int),
        "worker": worker,
        "generation": _or(p.get("generation"), None, int),
        "start_t": _or(p.get("start_t"), first_t),
        "first_t": first_t,
        "last_t": _or(p.get("last_t"), seen.get("last_t", first_t)),
        "end_t": _or(p.get("end_t"), None),
        "threads_first_t": _or(p.get("threads_first_t"), None),
        "threads_last_t": _or(p.get("threads_last_t"), None),
    }


def _or(v: Any, default: Any, kind: Callable[[Any], Any] = float) -> Any:
    """``v`` (a number) as ``kind``, or ``default`` where it is null."""
    return default if v is None else kind(v)


def _seen(samples: pd.DataFrame) -> dict[int, dict]:
    """Per process the samples hold: its last role, worker index and rank, its first and last tick."""
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
    table = table.astype(object).where(table.notna(), None)  # a null worker index or rank: none
    return {int(pid): r for pid, r in table.to_dict("index").items()}


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


def with_parents(entries: list[dict], meta: dict) -> list[dict]:
    """Older metas have no ppid: a worker's parent is its rank's process, else the root."""
    root = meta.get("root_pid") or next((p["pid"] for p in entries if p["role"] == MAIN), None)
    ranks = {int(r): int(pid) for r, pid in (meta.get("ranks") or {}).items()}
    return [
        p
        if p["ppid"] is not None or p["kind"] not in WORKER_KINDS
        else {**p, "ppid": ranks.get(p["rank"], root)}
        for p in entries
    ]


def _under_rank(role: str, old: str, rank: int) -> str:
    """A role under a process that became ``rank K``: ``worker K.J`` (a spawned child's worker)
    and ``worker J`` (a launcher's) become ``rank K worker J``, ``forkserver`` ``rank K forkserver``."""
    if role.startswith(old + "."):
        return f"rank {rank} worker {role[len(old) + 1 :]}"
    return role if role.startswith("rank ") else f"rank {rank} {role}"


def with_nested_parents(entries: list[dict]) -> list[dict]:
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
    by_pid = {p["pid"]: p for p in entries}
    roots = {p["pid"] for p in entries if p["kind"] in (MAIN, LAUNCHER)}
    owners = {o["pid"] for q in entries if q["kind"] == DATALOADER and (o := owner(q, by_pid)) is not None}
    spawned = [p for p in entries if p["kind"] in WORKER_KINDS and p["pid"] in owners and p["ppid"] in roots]
    taken = {p["rank"] for p in entries if p["kind"] == RANK}
    promoted: dict[int, int] = {}
    for p in sorted(spawned, key=lambda p: (p["worker"] < 0, p["worker"], p["start_t"], p["pid"])):
        k = p["worker"] if p["worker"] >= 0 and p["worker"] not in taken else lowest_free(taken)
        promoted[p["pid"]] = k
        taken.add(k)
    for p in entries:
        if (
            p["kind"] == LAUNCHER
            and p["pid"] in owners
            and any(q["kind"] == RANK and q["ppid"] == p["pid"] for q in entries)
        ):
            promoted[p["pid"]] = lowest_free(taken)
            taken.add(promoted[p["pid"]])
    if not promoted:
        return entries
    # A main whose children all turned out ranks only launched them.
    launchers = {
        p["pid"]
        for p in entries
        if p["kind"] == MAIN
        and p["pid"] not in owners
        and any(by_pid[c]["ppid"] == p["pid"] for c in promoted)
    }

    def top(p: dict) -> dict | None:
        """The promoted process ``p`` descends from, if any."""
        seen = set()
        q = by_pid.get(p["ppid"]) if p["ppid"] is not None else None
        while p["kind"] != RANK and q is not None and q["pid"] not in seen and q["kind"] != RANK:
            if q["pid"] in promoted:
                return q
            seen.add(q["pid"])
            q = by_pid.get(q["ppid"]) if q["ppid"] is not None else None
        return None

    out = []
    for p in entries:
        if p["pid"] in promoted:
            k = promoted[p["pid"]]
            out.append(
                {**p, "kind": RANK, "forked": False, "start_method": None, "rank": k, "role": f"rank {k}"}
            )
        elif (t := top(p)) is not None:
            k = promoted[t["pid"]]
            out.append({**p, "rank": k, "role": _under_rank(p["role"], t["role"], k)})
        elif p["pid"] in launchers:
            out.append({**p, "kind": LAUNCHER, "role": LAUNCHER})
        else:
            out.append(p)
    return out
