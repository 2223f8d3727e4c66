"""The tree sampler's ledger: every process it saw, with the facts meta.json lists of it
(:class:`ProcessInfo`: its kind, parent, rank, worker index, generation, life, exact readings,
DataLoader thread workers), which the analysis takes as they are. Kept apart from the sampler's
ticks (what to read, within the budget); the sampler holds its lock around it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from memprobe.core.tree_rules import brief_commands, with_generations, with_loader_generations
from memprobe.core.vocabulary import OTHER, WORKER_KINDS
from memprobe.probe import procfs
from memprobe.probe.sampler import Row
from memprobe.probe.tree import TreeRoles

COMMAND_CHARS = 300


@dataclass
class ProcessInfo:
    """Static facts of one process of the tree, for meta.json ``processes``."""

    pid: int
    ppid: int | None
    role: str
    kind: str
    forked: bool
    start_method: str | None
    rank: int
    worker: int
    generation: int | None
    parent_role: str | None
    start_t: float | None
    first_t: float
    last_t: float
    end_t: float | None
    command: str
    first_pss_t: float | None = None
    last_pss_t: float | None = None
    exact_readings: int = 0
    # Its DataLoader thread workers (threads named as memprobe's or torch's thread workers name
    # them): when first and last seen, and the most at once. Their memory is the process's own.
    threads_first_t: float | None = None
    threads_last_t: float | None = None
    threads_max: int = 0

    def saw_threads(self, t: float, seen: tuple[int, float | None] | None) -> None:
        """A tick's count of its DataLoader thread workers (the tree sampler's reading of their
        names): when the first started (from its own start time, not when seen), when the last
        was seen, and the most at once."""
        if seen is None:
            return
        count, first = seen
        if first is not None and self.threads_first_t is None:
            self.threads_first_t = round(min(first, t), 4)
        if count:
            self.threads_first_t = t if self.threads_first_t is None else self.threads_first_t
            self.threads_last_t = t
            self.threads_max = max(self.threads_max, count)


class Ledger:
    """Every process of the tree seen so far, by pid (:class:`ProcessInfo`)."""

    def __init__(self) -> None:
        self.processes: dict[int, ProcessInfo] = {}

    def note(self, pid: int, t: float, row: Row, roles: TreeRoles, boot_at_t0: float) -> ProcessInfo:
        """The facts of process ``pid`` as of its row at ``t`` (s since the start), made at its
        first row, its latest classification by ``roles`` kept (a young process may still exec
        or be renamed)."""
        info = self.processes.get(pid)
        node = roles.nodes.get(pid)
        if info is None:
            # A forked child's command line is its parent's: not worth repeating.
            cmd = "" if node is not None and node.shares_parent else " ".join(procfs.read_cmdline(pid))
            start = roles.start_t(pid, boot_at_t0)
            info = self.processes[pid] = ProcessInfo(
                pid=pid,
                ppid=node.ppid if node else None,
                role=str(row["role"]),
                kind=OTHER,  # until the tree classifies it: one gone before that stays "other"
                forked=False,
                start_method=None,
                rank=-1,
                worker=-1,
                generation=None,
                parent_role=None,
                start_t=t if start is None else start,  # its start, else its first tick
                first_t=t,
                last_t=t,
                end_t=None,
                command=cmd[:COMMAND_CHARS],
            )
        if not row["missing"]:
            info.last_t = t
            if not info.command and node is not None and not node.shares_parent:  # it exec'd since
                info.command = " ".join(procfs.read_cmdline(pid))[:COMMAND_CHARS]
        classified(info, roles)
        return info

    def listed(self, roles: TreeRoles) -> list[dict]:
        """Every process, with every fact the analysis takes as it is (schema version 4), as
        ``roles`` classifies it last (a process that ended may have been renamed since its last
        row: a program exec'd before its parent's workers was a worker until they appeared): a
        command run briefly not a worker; DataLoader workers numbered as one generation that
        were two split (the next epoch's, started while the last one's lived); a worker whose
        parent the tree never saw has its generation among its parent's others
        (:mod:`memprobe.core.tree_rules`)."""
        for info in self.processes.values():
            classified(info, roles)
        listed = [asdict(p) for p in sorted(self.processes.values(), key=lambda p: (p.first_t, p.pid))]
        return with_generations(with_loader_generations(brief_commands(listed)))


def classified(info: ProcessInfo, roles: TreeRoles) -> None:
    """``info`` with the latest classification of its process by ``roles`` (a young process may
    still exec or be renamed; a program is renamed when its parent's workers appear), where the
    tree knows it."""
    node = roles.nodes.get(info.pid)
    if node is None:
        return
    info.ppid, info.role, info.kind, info.forked = node.ppid, node.role, node.kind, node.forked
    info.start_method, info.rank, info.worker = node.start_method, node.rank, node.worker
    info.generation, info.parent_role = node.generation, roles.parent_role(info.pid)


def most_workers(processes: list[dict]) -> int:
    """The most workers alive at once in a listed tree (:meth:`Ledger.listed`): each alive from
    its first row to its last. Counted on the final classification, not tick by tick: a program
    exec'd before its parent's workers was one of them until they appeared."""
    events = sorted(
        (t, end)
        for p in processes
        if p["kind"] in WORKER_KINDS
        for t, end in ((p["first_t"], 0), (p["last_t"], 1))
    )
    most = alive = 0
    for _, end in events:  # at one time, starts before ends: both rows were taken at that tick
        alive += -1 if end else 1
        most = max(most, alive)
    return most


def first_worker_reading(processes: list[dict]) -> float | None:
    """When a worker of the listed tree was first read exactly (a program beside them is none)."""
    return min(
        (p["first_pss_t"] for p in processes if p["kind"] in WORKER_KINDS and p["first_pss_t"] is not None),
        default=None,
    )
