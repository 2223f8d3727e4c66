"""Classify every process of a tree memprobe did not start (``record``, ``watch``) by structure.

Names (``comm``, command lines) are only labels; what a process *is* comes from how it relates
to its parent:

* the root is ``main``, or ``launcher`` when its children are ranks (torchrun), or a rank
  itself when it runs DataLoader workers beside the ranks it started (Lightning's DDP re-runs
  the script for ranks 1.. and trains as rank 0);
* a **rank** is a direct child of the root whose environment has ``RANK`` (or ``LOCAL_RANK``)
  different from the root's; when environments cannot be read, the children of a root whose
  command line is a known launcher are ranks in order of appearance; a worker of the root that
  runs DataLoader workers of its own is a rank too (``torch.multiprocessing.spawn``'s ranks
  carry no RANK), numbered as it was started;
* a **worker** is any other child of main, a rank or a worker (nested: ``worker K.J``). Its kind:
  ``dataloader`` (comm ``pt_data_worker``, or ``pt_multiprocess`` for torch's upcoming
  ``pt_multiprocess_data_worker`` cut to 15 characters by the kernel), ``fork`` (it shows its
  parent's address-space layout: forked and not exec'd, so it shares the parent's pages),
  ``spawn`` (an exec'd Python multiprocessing child, or a forkserver's child) or ``exec`` (any
  other program); an ``exec`` child that ended within a second is listed afterwards
  as a ``command`` its parent ran, not a worker (:func:`memprobe.core.tree_rules.brief_commands`);
* a **program** (``program K``) is an ``exec`` child of a process that has, or later gets,
  DataLoader, spawned or forked workers (:meth:`TreeRoles._beside_loaders`): W&B's wandb-core,
  started by a trainer's logger before the fit forks its DataLoader workers, a compiler. It takes
  no worker index and starts no generation; one seen before its parent's workers was a worker
  until they appeared, and is renamed then (the meta lists the final classification). A parent
  whose children are all exec'd programs (``subprocess`` workers) keeps them as its workers;
* **helpers**: multiprocessing's ``forkserver`` and ``resource tracker``. A forkserver's
  children are workers of the forkserver's parent.

Workers are numbered per parent: a new worker takes the lowest index not held by a live worker
of that parent (siblings that appear together in order of start time, then pid), so each
epoch's fresh workers (``persistent_workers=False``) are ``worker 0..N-1`` again and each rank
numbers its own. A parent's workers form *generations*: a new one starts when a worker appears
while none of that parent's previous workers is alive, or when forked DataLoader workers start
a second after every live one (the next iterator, started before the last one's workers exit).

Over 500 lines because :class:`TreeRoles` (about 390 of them) is one state machine: a process's
kind, rank, index and generation are decided together from the same families and can change as
later processes appear (a worker promoted to a rank renames everything below it), so its methods
read and write one shared state that a split would have to pass across modules.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from memprobe.core import vocabulary
from memprobe.core.tree_rules import lowest_free
from memprobe.core.vocabulary import (
    DATALOADER,
    EXEC,
    FORK,
    FORKSERVER,
    HELPER_KINDS,
    LAUNCHER,
    MAIN,
    OTHER,
    PROGRAM,
    RANK,
    RESOURCE_TRACKER,
    SPAWN,
    WORKER_KINDS,
    program_role,
)
from memprobe.probe import procfs
from memprobe.probe.roles import Role, RoleBook

# torch names a DataLoader worker process with prctl(PR_SET_NAME): "pt_data_worker" today;
# its development branch uses "pt_multiprocess_data_worker", which the kernel cuts to 15 bytes.
DATALOADER_COMMS = ("pt_data_worker", "pt_multiprocess")
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "torch/distributed/run.py")
# A child younger than this may still exec (fork then exec takes milliseconds, a Python
# subprocess with preexec_fn somewhat more) or be renamed, so its kind is looked at again.
SETTLE_AGE_S = 1.0
# DataLoader workers that start this long after every live worker of their parent are the next
# iterator's (see TreeRoles._next_loader); one DataLoader forks all of its workers in one loop.
GENERATION_GAP_S = 1.0
_HZ = procfs.CLOCK_TICKS


class ProcReader(Protocol):
    """What classification reads about a process (fakes stand in for /proc in unit tests)."""

    def stat(self, pid: int) -> procfs.StatInfo | None: ...
    def cmdline(self, pid: int) -> list[str]: ...
    def environ(self, pid: int) -> dict[str, str] | None: ...
    def children(self, pid: int) -> list[int]: ...
    def uptime_s(self) -> float: ...
    def same_memory(self, pid: int, other: int) -> bool | None: ...


class ProcfsReader:
    """The real /proc."""

    def stat(self, pid: int) -> procfs.StatInfo | None:
        return procfs.read_stat(pid)

    def cmdline(self, pid: int) -> list[str]:
        return procfs.read_cmdline(pid)

    def environ(self, pid: int) -> dict[str, str] | None:
        text = procfs.read_text(f"/proc/{pid}/environ")
        if text is None:
            return None
        return dict(item.split("=", 1) for item in text.split("\0") if "=" in item)

    def children(self, pid: int) -> list[int]:
        return procfs.read_children(pid)

    def uptime_s(self) -> float:
        # /proc/PID/stat's starttime counts from boot on the boot-time clock.
        return time.clock_gettime(time.CLOCK_BOOTTIME)

    def same_memory(self, pid: int, other: int) -> bool | None:
        return procfs.same_memory(pid, other)


@dataclass
class Node:
    """What memprobe knows about one process of the tree."""

    pid: int
    ppid: int
    kind: str
    role: str
    rank: int = -1
    worker: int = -1
    generation: int | None = None
    owner: int | None = None  # the parent the worker (or program) is numbered under (a forkserver's parent)
    program: int = -1  # its index among the programs its owner runs beside its workers
    shares_parent: bool = False  # forked without exec: its pages are its parent's at first
    start_method: str | None = None
    start_ticks: int = 0
    settled: bool = False

    @property
    def forked(self) -> bool:
        """Shares the pages of the process that started the job's work (not a forkserver's)."""
        return self.shares_parent and self.start_method == FORK

    @property
    def is_worker(self) -> bool:
        return self.kind in WORKER_KINDS


@dataclass
class _Family:
    """The workers one parent numbers: index per live worker, generation counter."""

    live: dict[int, int]  # worker pid -> index
    generation: int = -1


# The environment variables that name a process's rank, first found first: torchrun sets both,
# Lightning's DDP LOCAL_RANK alone for the ranks it re-runs.
RANK_VARIABLES = ("RANK", "LOCAL_RANK")
# Above any job's ranks, and what a Parquet int32 column holds: anything larger is no rank.
MAX_RANK = 2**31 - 1


def parse_rank(value: object) -> int | None:
    """A rank from an environment value, as launchers write one (``str(int)``): ASCII digits
    only, at most ``MAX_RANK``; ``None`` (not a rank) for anything else. Python's ``int()``
    would take ``" 2"``, ``"1_0"`` and digits of other scripts (Arabic-Indic three: 3), and an
    unbounded number made the results' Parquet overflow (``RANK=99999999999999999999``)."""
    if not isinstance(value, str) or not 0 < len(value) <= len(str(MAX_RANK)):
        return None
    if not (value.isascii() and value.isdigit()):
        return None
    rank = int(value)
    return rank if rank <= MAX_RANK else None


def env_rank(env: dict[str, str] | None) -> int | None:
    """The rank a process's environment names (:func:`parse_rank` of the first of
    ``RANK_VARIABLES`` it holds), or ``None``."""
    if not env:
        return None
    name = next((n for n in RANK_VARIABLES if n in env), None)
    return None if name is None else parse_rank(env[name])


class TreeRoles(RoleBook):
    """Roles, kinds, ranks and worker generations for a tree memprobe did not build."""

    def __init__(self, main_pid: int, reader: ProcReader | None = None) -> None:
        super().__init__(main_pid)
        self.reader: ProcReader = reader or ProcfsReader()
        self.nodes: dict[int, Node] = {}
        self.ranks: dict[int, int] = {}  # rank process pid -> rank
        self.start_methods: Counter[str] = Counter()
        self._families: dict[int, _Family] = {}
        self._with_loaders: set[int] = set()  # owners with forked, spawned or DataLoader workers
        self._programs: dict[int, dict[int, int]] = {}  # owner pid -> {program pid: its index}
        self._layouts: dict[int, tuple[int, int, int]] = {}
        self._root_rank = env_rank(self.reader.environ(main_pid))
        self._root_cmd = " ".join(self.reader.cmdline(main_pid))
        self._launcher_cmd = any(name in self._root_cmd for name in LAUNCHERS)
        self._next_rank = 0
        st = self.reader.stat(main_pid)
        kind = LAUNCHER if self._launcher_cmd else MAIN
        self.nodes[main_pid] = Node(
            main_pid, st.ppid if st else 0, kind, kind, settled=True, start_ticks=st.start_ticks if st else 0
        )
        if st is not None:
            self._layouts[main_pid] = st.layout

    # -- public --------------------------------------------------------------------------
    def role(self, pid: int, comm: str, ppid: int | None = None) -> Role:
        node = self.classify(pid, comm)
        if node is None:
            return Role(OTHER)
        return Role(node.role, node.worker)

    def classify(self, pid: int, comm: str | None = None) -> Node | None:
        """The node of ``pid``: classified on first sight, looked at again until it is
        ``SETTLE_AGE_S`` old; ``None`` when it is gone before it could be classified."""
        node = self.nodes.get(pid)
        if node is not None and comm in DATALOADER_COMMS and node.kind != DATALOADER and node.is_worker:
            node.kind = DATALOADER  # renamed by torch after its start: a DataLoader worker from now on
            if node.owner in self.nodes:
                self._beside_loaders(self.nodes[node.owner])
                self._promote(self.nodes[node.owner])
        if node is not None and node.settled:
            return node
        st = self.reader.stat(pid)
        if st is None:
            return node
        if node is not None and node.start_ticks != st.start_ticks:
            node = None  # the pid was reused
        if node is None:
            node = self._classify_new(st)
        else:
            self._reclassify(node, st)
        if node is not None and not self._young(node):
            node.settled = True
            if node.kind == FORK and node.owner in self.nodes:  # a fork, not a child about to exec
                self._beside_loaders(self.nodes[node.owner])
        return node

    def rank_of(self, pid: int) -> int:
        node = self.classify(pid)
        return -1 if node is None else node.rank

    def rank_or_none(self, pid: int) -> int:
        """The rank of ``pid`` as last known, without reading /proc (rows of vanished processes)."""
        node = self.nodes.get(pid)
        return -1 if node is None else node.rank

    def share_groups(self) -> dict[int, int]:
        """pid -> a representative of its fork-connected family: processes that may share pages
        (parent and children joined by fork without exec, transitively). An exec'd process
        starts with pages of its own and shares only with its own forked children."""
        head = {pid: pid for pid in self.nodes}

        def find(p: int) -> int:
            while head[p] != p:
                head[p] = head[head[p]]
                p = head[p]
            return p

        for node in self.nodes.values():
            if node.shares_parent and node.ppid in head:
                head[find(node.pid)] = find(node.ppid)
        return {pid: find(pid) for pid in self.nodes}

    def start_t(self, pid: int, boot_at_t0: float) -> float | None:
        """The process's own start on the run's clock (seconds since the clock's zero, given as
        CLOCK_BOOTTIME then)."""
        node = self.nodes.get(pid)
        if node is None or not node.start_ticks:
            return None
        return run_clock(node.start_ticks, boot_at_t0)

    def parent_role(self, pid: int) -> str | None:
        node = self.nodes.get(pid)
        if node is None or pid == self.main_pid:
            return None
        parent = self.nodes.get(node.owner if node.owner is not None else node.ppid)
        return None if parent is None else parent.role

    # -- classification ------------------------------------------------------------------
    def _young(self, node: Node) -> bool:
        return self.reader.uptime_s() - node.start_ticks / _HZ < SETTLE_AGE_S

    def _classify_new(self, st: procfs.StatInfo) -> Node | None:
        parent = self.nodes.get(st.ppid)
        if parent is None and st.ppid not in (0, 1) and self._below_root(st.ppid):
            pst = self.reader.stat(st.ppid)
            parent = self._classify_new(pst) if pst is not None else None
        node = self._make_node(st, parent)
        if node.is_worker and parent is not None:
            self._number_newcomers(parent)
        return node

    def _make_node(self, st: procfs.StatInfo, parent: Node | None) -> Node:
        node = Node(st.pid, st.ppid, EXEC, OTHER, start_ticks=st.start_ticks)
        self.nodes[st.pid] = node
        self._layouts[st.pid] = st.layout
        self._resolve(node, st, parent)
        return node

    def _reclassify(self, node: Node, st: procfs.StatInfo) -> None:
        if st.state in ("Z", "X") or not any(st.layout):
            # Exiting (its address space is gone: no layout, no command line) or hidden: that
            # says nothing of how it started. Judged again, a forked worker that ended within
            # its first second became an exec'd one ("start-up +88 MB", its copy not growth).
            return
        self._layouts[node.pid] = st.layout  # a new one if it exec'd since
        was_worker, method = node.is_worker, node.start_method
        parent = self.nodes.get(node.ppid)
        self._resolve(node, st, parent)
        if node.worker >= 0 and node.is_worker and node.start_method != method:
            self._count_method(method, -1)  # e.g. a fork that exec'd: no longer a fork worker
            self._count_method(node.start_method, +1)
        owner = self._owner(parent)
        beside = node.kind == EXEC and owner is not None and owner.pid in self._with_loaders
        if (was_worker or node.worker >= 0) and (beside or not node.is_worker):
            self._release(node)
        if beside and owner is not None:
            self._make_program(node, owner)  # e.g. a fork that exec'd a program beside the workers
        elif node.is_worker and node.worker < 0 and parent is not None:
            self._number_newcomers(parent)
        elif node.kind in (DATALOADER, SPAWN) and node.owner in self.nodes:
            self._beside_loaders(self.nodes[node.owner])  # e.g. a fork that exec'd a spawned worker

    def _below_root(self, pid: int) -> bool:
        p, hops = pid, 0
        while p not in (0, 1) and hops < 64:
            if p == self.main_pid or p in self.nodes:
                return True
            st = self.reader.stat(p)
            if st is None:
                return False
            p, hops = st.ppid, hops + 1
        return False

    def _resolve(self, node: Node, st: procfs.StatInfo, parent: Node | None) -> None:
        """Kind, rank and (for ranks and helpers) role of a non-root process, from its relation
        to its parent; workers are numbered by the caller."""
        cmd = " ".join(self.reader.cmdline(node.pid))
        node.shares_parent = parent is not None and self._same_layout(node.pid, parent.pid, cmd)
        helper = self._helper_kind(cmd, parent)
        rank = parent.rank if parent is not None else -1
        if helper is None and parent is not None and parent.pid == self.main_pid:
            child = self._child_rank(st, cmd)
            if child >= 0:
                self._make_rank(node, child)
                return
        node.rank = rank
        if helper is not None:
            prefix = f"rank {rank} " if rank >= 0 else ""
            node.kind, node.role = helper, prefix + helper
            return
        node.kind = self._worker_kind(node, st, cmd, parent)
        node.start_method = self._start_method(node, parent)

    def _make_rank(self, node: Node, rank: int) -> None:
        if node.worker >= 0:
            self._release(node)
        if node.program >= 0:
            self._programs.get(node.owner if node.owner is not None else -1, {}).pop(node.pid, None)
            node.program, node.owner = -1, None
        node.kind, node.rank, node.role, node.start_method = RANK, rank, f"rank {rank}", None
        self.ranks[node.pid] = rank
        self._rename_below(node)
        root = self.nodes[self.main_pid]
        if root.kind == MAIN and self._runs_loaders(root):
            self._root_as_rank()
        elif root.kind == MAIN:
            root.kind = root.role = LAUNCHER

    # -- ranks that do not say so ----------------------------------------------------------
    def _runs_loaders(self, node: Node) -> bool:
        """Whether ``node`` has DataLoader workers of its own (a rank's mark, whatever its name)."""
        return any(
            n.owner == node.pid and n.kind == DATALOADER and n.worker >= 0 for n in self.nodes.values()
        )

    def _promote(self, owner: Node) -> None:
        """``owner`` runs DataLoader workers: where the tree says it is a rank, make it one.

        * the root, beside children that are ranks: Lightning's DDP (``strategy="ddp"``) re-runs
          the script for ranks 1.. with ``LOCAL_RANK`` in their environment and trains as rank 0
          itself; it is no launcher that only builds;
        * a worker of the root (not a DataLoader worker): ``torch.multiprocessing.spawn(train,
          nprocs=N)`` starts ranks with no RANK in their environment, numbered in the order
          they start (the index ``spawn`` passes them)."""
        # The structure first: looking for DataLoader workers walks every node, and a job that
        # starts thousands of workers over its epochs numbers a batch of them every epoch.
        if owner.pid == self.main_pid:
            if owner.kind == LAUNCHER and self.ranks and self._runs_loaders(owner):
                self._root_as_rank()
        elif (
            owner.is_worker
            and owner.kind != DATALOADER
            and owner.owner == self.main_pid
            and self._runs_loaders(owner)
        ):
            taken = set(self.ranks.values())
            rank = owner.worker if owner.worker not in taken else lowest_free(taken)
            owner.settled = True  # its environment would say "worker" again: keep what it is
            self._make_rank(owner, rank)

    def _root_as_rank(self) -> None:
        """The root trains as a rank beside the ranks it started: its own rank (from its
        environment, else the lowest one its children do not hold)."""
        root = self.nodes[self.main_pid]
        taken = set(self.ranks.values())
        rank = self._root_rank if self._root_rank is not None else lowest_free(taken)
        root.kind, root.rank, root.role = RANK, rank, f"rank {rank}"
        self.ranks[root.pid] = rank
        self._rename_below(root)

    def _rename_below(self, top: Node) -> None:
        """The rank and role of everything ``top`` started, once ``top`` became a rank:
        ``rank K worker J``, ``rank K forkserver``, nested workers after their owner."""
        for n in self.nodes.values():
            if n.pid == top.pid or n.kind == RANK or not (n.ppid == top.pid or n.owner == top.pid):
                continue
            n.rank = top.rank
            if n.kind in HELPER_KINDS:
                n.role = f"rank {top.rank} {n.kind}"
            elif n.worker >= 0 and n.owner is not None:
                n.role = self._worker_role(self.nodes.get(n.owner, top), n.worker)
            elif n.kind == PROGRAM and n.owner is not None:
                n.role = self._program_role(self.nodes.get(n.owner, top), n.program)
            self._rename_below(n)

    def _same_layout(self, pid: int, parent: int, cmd: str) -> bool:
        if self._layouts.get(pid) != self._layouts.get(parent):
            self._refresh_layout(parent)  # read again only when they differ: the usual fork matches
        mine, theirs = self._layouts.get(pid), self._layouts.get(parent)
        if mine and theirs and any(mine) and any(theirs):
            # A child between vfork and exec runs in its parent's very memory, not a copy: the
            # helper it is about to become is no fork worker (PyPI's CUDA torch runs
            # `ldconfig -p` so at import; seen once before its exec, it was "worker 0 (fork)").
            return mine == theirs and not self.reader.same_memory(pid, parent)
        # The kernel hides the layout of another user's process: the command line is the next
        # best sign (a forked child keeps its parent's).
        return bool(cmd) and cmd == " ".join(self.reader.cmdline(parent))

    def _refresh_layout(self, pid: int) -> None:
        """The layout of ``pid`` as it is now, when it shows one: a parent settled long ago was
        read once, and the root as soon as it had exec'd, when the kernel may not have set every
        field of its new layout yet (start_brk 0): every child it forked then looked exec'd."""
        node, st = self.nodes.get(pid), self.reader.stat(pid)
        if node is not None and st is not None and st.start_ticks == node.start_ticks and any(st.layout):
            self._layouts[pid] = st.layout

    @staticmethod
    def _helper_kind(cmd: str, parent: Node | None) -> str | None:
        if vocabulary.is_resource_tracker(cmd):
            return RESOURCE_TRACKER
        # A forkserver's own children inherit its command line: they are workers.
        if "multiprocessing.forkserver" in cmd and not (parent is not None and parent.kind == FORKSERVER):
            return FORKSERVER
        return None

    @staticmethod
    def _worker_kind(node: Node, st: procfs.StatInfo, cmd: str, parent: Node | None) -> str:
        if st.comm in DATALOADER_COMMS or node.kind == DATALOADER:
            return DATALOADER
        if parent is not None and parent.kind == FORKSERVER:
            return SPAWN
        if node.shares_parent:
            return FORK
        if "multiprocessing.spawn" in cmd or "--multiprocessing-fork" in cmd:
            return SPAWN
        return EXEC

    @staticmethod
    def _start_method(node: Node, parent: Node | None) -> str | None:
        if parent is not None and parent.kind == FORKSERVER:
            return FORKSERVER
        if node.shares_parent:
            return FORK
        return SPAWN if node.kind in (SPAWN, DATALOADER) else None

    def _child_rank(self, st: procfs.StatInfo, cmd: str) -> int:
        """The rank of a direct child of the root, or -1. A child that has not exec'd yet still
        carries its parent's environment: it is looked at again until it is settled."""
        if st.comm in DATALOADER_COMMS:
            return -1
        env = self.reader.environ(st.pid)
        rank = env_rank(env)
        if rank is not None and rank != self._root_rank:
            return rank
        if (
            env is None
            and self._launcher_cmd
            and cmd
            and "multiprocessing." not in cmd
            and cmd != self._root_cmd
        ):
            rank, self._next_rank = self._next_rank, self._next_rank + 1  # in order of appearance
            return rank
        return -1

    # -- numbering -----------------------------------------------------------------------
    def _owner(self, parent: Node | None) -> Node | None:
        """The parent a worker is numbered under: a forkserver's parent for its children."""
        while parent is not None and parent.kind in HELPER_KINDS:
            parent = self.nodes.get(parent.ppid)
        return parent

    def _number_newcomers(self, parent: Node) -> None:
        """Number every unnumbered worker child of ``parent`` (classifying the children not seen
        yet), in order of start then pid, so that workers started together are numbered the
        same way whichever the sampler reaches first."""
        owner = self._owner(parent)
        if owner is None:
            return
        for pid in self.reader.children(parent.pid):
            if pid not in self.nodes:
                st = self.reader.stat(pid)
                if st is not None and st.state not in ("Z", "X"):
                    self._make_node(st, parent)
        new = sorted(
            (
                n
                for n in self.nodes.values()
                if n.ppid == parent.pid and n.is_worker and n.worker < 0 and n.pid != self.main_pid
            ),
            key=lambda n: (n.start_ticks, n.pid),
        )
        if owner.kind == PROGRAM:  # what a program starts is part of it (wandb-core's wandb-symon)
            for node in new:
                self._make_program(node, owner)
            return
        if any(n.kind in (DATALOADER, SPAWN) for n in new):
            self._beside_loaders(owner)
        if owner.pid in self._with_loaders:
            for node in (n for n in new if n.kind == EXEC):
                self._make_program(node, owner)
            new = [n for n in new if n.is_worker]
        if not new:
            return
        family = self._families.setdefault(owner.pid, _Family({}))
        for old in [p for p in family.live if not self._alive(p)]:
            del family.live[old]  # its index is free for the next generation
        if not family.live or self._next_loader(family, new):
            family.live.clear()  # the previous generation's indices are free, even while it ends
            family.generation += 1
        for node in new:
            index = next(i for i in range(len(family.live) + 1) if i not in family.live.values())
            family.live[node.pid] = index
            node.worker, node.generation, node.owner = index, family.generation, owner.pid
            node.role = self._worker_role(owner, index)
            self._count_method(node.start_method, +1)
        self._promote(owner)

    def _next_loader(self, family: _Family, new: list[Node]) -> bool:
        """Whether DataLoader workers appearing while the family's earlier ones still live are a
        new generation: torch starts a DataLoader's workers together and never replaces one, so
        workers started ``GENERATION_GAP_S`` after every live one belong to a new iterator.
        Lightning creates the next epoch's iterator before the last one's workers have exited:
        they overlapped by half a second, and epoch 2's workers were "worker 2" and "worker 0".
        Forked workers only: a spawn or forkserver DataLoader starts its workers one after the
        other, each as soon as the last one has read its copy of the dataset (10 s apart for
        Lightning's ``ddp_spawn`` over a 400 MB list)."""
        if not all(n.kind == DATALOADER and n.forked for n in new):
            return False
        live = [self.nodes.get(pid) for pid in family.live]
        if not live or any(n is None or n.kind != DATALOADER or not n.forked for n in live):
            return False
        newest = max(n.start_ticks for n in live if n is not None)
        return min(n.start_ticks for n in new) - newest >= GENERATION_GAP_S * _HZ

    # -- programs beside the workers ---------------------------------------------------------
    def _beside_loaders(self, owner: Node) -> None:
        """``owner`` has DataLoader, spawned or (settled) forked workers: the programs it exec'd
        are programs from now on, those it exec'd before too. wandb-core, started by a trainer's
        logger before the fit forks its workers, was "worker 0" until then: it leaves its
        owner's workers, the live ones are numbered from 0 again in their order, and the
        generations counted from the workers' own (a generation of programs alone is none)."""
        if owner.pid in self._with_loaders:
            return
        self._with_loaders.add(owner.pid)
        programs = sorted(
            (n for n in self.nodes.values() if n.owner == owner.pid and n.kind == EXEC),
            key=lambda n: (n.start_ticks, n.pid),
        )
        family = self._families.get(owner.pid)
        held = family is not None and any(n.pid in family.live for n in programs)
        for node in programs:
            self._release(node)
            self._make_program(node, owner)
        if family is None or not programs:
            return
        if held:
            for index, pid in enumerate(sorted(family.live, key=family.live.__getitem__)):
                family.live[pid] = index
                self.nodes[pid].worker, self.nodes[pid].role = index, self._worker_role(owner, index)
        mine = [
            n
            for n in self.nodes.values()
            if n.owner == owner.pid and n.is_worker and n.generation is not None
        ]
        dense = {g: k for k, g in enumerate(sorted({n.generation for n in mine if n.generation is not None}))}
        for n in mine:
            n.generation = dense[n.generation] if n.generation is not None else None
        family.generation = dense.get(family.generation, len(dense) - 1)

    def _make_program(self, node: Node, owner: Node) -> None:
        """``node`` a program ``owner`` runs beside its workers: the lowest index none of its
        live programs holds (kept while it lives)."""
        live = self._programs.setdefault(owner.pid, {})
        if node.pid not in live:
            for old in [p for p in live if not self._alive(p)]:
                del live[old]
            live[node.pid] = lowest_free(set(live.values()))
        node.kind, node.owner, node.program = PROGRAM, owner.pid, live[node.pid]
        node.worker, node.generation, node.start_method = -1, None, None
        node.role = self._program_role(owner, node.program)
        # What it started while it was taken for a worker is part of it too, named after it.
        for child in [n for n in self.nodes.values() if n.owner == node.pid and n.pid != node.pid]:
            if child.is_worker:
                self._release(child)
            if child.is_worker or child.kind == PROGRAM:
                self._make_program(child, node)

    @staticmethod
    def _program_role(owner: Node, index: int) -> str:
        if owner.kind == PROGRAM:
            return f"{owner.role}.{index}"  # a program's own children: "program 0.0"
        return program_role(owner.role, owner.rank, owner.kind in WORKER_KINDS, index)

    @staticmethod
    def _worker_role(owner: Node, index: int) -> str:
        if owner.kind in WORKER_KINDS:
            return f"{owner.role}.{index}"  # a worker's own workers: "worker 0.1"
        prefix = f"rank {owner.rank} " if owner.rank >= 0 else ""
        return f"{prefix}worker {index}"

    def _release(self, node: Node) -> None:
        """``node`` turned out not to be a worker (it exec'd a helper, or is a rank)."""
        family = self._families.get(node.owner if node.owner is not None else -1)
        if family is not None:
            family.live.pop(node.pid, None)
        if node.worker >= 0:
            self._count_method(node.start_method, -1)
        node.worker, node.generation, node.owner = -1, None, None

    def _count_method(self, method: str | None, step: int) -> None:
        if method is None:
            return
        self.start_methods[method] += step
        if self.start_methods[method] <= 0:
            del self.start_methods[method]

    def _alive(self, pid: int) -> bool:
        st = self.reader.stat(pid)
        node = self.nodes.get(pid)
        return (
            st is not None
            and st.state not in ("Z", "X")
            and (node is None or st.start_ticks == node.start_ticks)
        )


def run_clock(start_ticks: int, boot_at_t0: float) -> float:
    """A /proc start time (clock ticks since boot: a process's or a thread's) on the run's clock,
    given CLOCK_BOOTTIME at the clock's zero (:func:`boot_clock_offset` plus its t0)."""
    return start_ticks / _HZ - boot_at_t0


def boot_clock_offset() -> float:
    """CLOCK_BOOTTIME minus CLOCK_MONOTONIC now: turns /proc start times into monotonic ones."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
