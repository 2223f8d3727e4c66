"""A job of several nodes: each node's ``memprobe record`` wrote its own results folder (one
machine each), and this puts them together as the nodes of one job, for ``memprobe report`` and
for the library::

    from memprobe.analysis.runs import analyse_all
    from memprobe.results.job import Job

    job = Job.load(["job/"], analyse=analyse_all)  # a job folder holding node folders, or several
    for node in job.nodes:
        print(node.label, node.problem or node.summary.verdict)

A node knows itself by ``meta["node"]`` (:func:`node_identity`, written by ``record``): its
host, its node rank (torchrun's ``--node-rank`` or the launcher's ``GROUP_RANK`` / ``NODE_RANK``,
else SLURM's ``SLURM_NODEID``), how many nodes the job has where the launcher says, and the
scheduler's variables (``SLURM_JOB_ID``, ``TORCHELASTIC_RUN_ID``, ...). A node whose folder is
missing or cannot be read is kept with its problem in words: the rest of the job is still
reported. Everything in a folder is data: strings are kept as written, for the page and the
terminal to escape.

Decisions (docs/your-job.md, "A job on several nodes"): a node folder inside a job folder that is
a symbolic link is not followed (:func:`linked_nodes`): memprobe finishes the folders it reports,
and a link would have it rewrite a folder elsewhere; the folder it points to is reported when
named on the command line. Folders whose scheduler or launcher names different jobs (SLURM job
ids 77 and 88) are not one job (:func:`not_one_job`). Folders that do not say their node rank (an
elastic torchrun job: ``--nnodes=2`` and no ``--node-rank``) are numbered by their global ranks
where those say it (:func:`ranks_order`), else reported by their folders' names, and no node
rank is called missing that one of them could be.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memprobe.core.errors import MemprobeError
from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import RANK
from memprobe.results.folder import ResultSet, ResultsFolder, is_results_folder
from memprobe.results.upgrade import RECORDED_KINDS, is_recorded

# The launcher's and the scheduler's variables a node's folder keeps, as they were set.
NODE_VARIABLES = (
    "GROUP_RANK",
    "NODE_RANK",
    "SLURM_NODEID",
    "SLURM_PROCID",
    "SLURM_JOB_ID",
    "SLURM_NNODES",
    "SLURMD_NODENAME",
    "TORCHELASTIC_RUN_ID",
)
MAX_VALUE = 200  # characters kept of one variable: a name, never a document
MAX_NODES = 100_000  # above any job's node count: a folder saying more is not believed
MAX_RANK = 10_000_000  # above any job's global rank: a folder saying more is not believed
# What names the job a node belongs to: two folders that say different values are two jobs.
JOB_VARIABLES = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
# torchrun's options that take no value (any other ``--opt`` without ``=`` takes the next word).
NO_VALUE = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}


def count(value: object) -> int | None:
    """A node rank or count as a launcher writes it (ASCII digits), else None."""
    if not isinstance(value, str) or not 0 < len(value) <= 9 or not (value.isascii() and value.isdigit()):
        return None
    return int(value)


def launcher_options(argv: Sequence[str]) -> dict[str, str]:
    """torchrun's own options in a command (``--nnodes=2 --node-rank 1 ...``), up to its script."""
    words = [str(a) for a in argv]
    start = next((i for i, a in enumerate(words) if any(a.endswith(n) for n in LAUNCHERS)), None)
    if start is None:
        return {}
    out: dict[str, str] = {}
    i = start + 1
    while i < len(words) and words[i].startswith("-"):
        name, eq, value = words[i].partition("=")
        if not eq and name not in NO_VALUE and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        out[name.lstrip("-").replace("-", "_")] = value
        i += 1
    return out


def node_identity(env: Mapping[str, str], argv: Sequence[str], host: str) -> dict[str, Any]:
    """What a node's folder says of its node (``meta["node"]``): ``host``, ``node_rank`` and
    ``nodes`` where the launcher or the scheduler gives them (None otherwise), and ``env``: the
    ``NODE_VARIABLES`` that were set."""
    opts = launcher_options(argv)
    seen = {k: str(env[k])[:MAX_VALUE] for k in NODE_VARIABLES if k in env}
    said = (opts.get("node_rank"), seen.get("GROUP_RANK"), seen.get("NODE_RANK"), seen.get("SLURM_NODEID"))
    rank = next((r for r in map(count, said) if r is not None), None)
    nnodes = opts.get("nnodes", "").rpartition(":")[2]  # torchrun's elastic "1:4": at most 4
    nodes = count(nnodes) if count(nnodes) is not None else count(seen.get("SLURM_NNODES"))
    return {"host": str(host)[:MAX_VALUE], "node_rank": rank, "nodes": nodes, "env": seen}


@dataclass
class JobNode:
    """One node of a job: its folder, what it says of its node, and its runs (None: not read,
    ``problem`` says why)."""

    folder: Path
    identity: dict = field(default_factory=dict)
    results: ResultSet | None = None
    analysed: list | None = None  # memprobe.analysis.runs.Analysed per run, where the caller analysed
    problem: str | None = None  # why the node is not (fully) reported
    twin: bool = False  # another folder names the same node: its label names its folder too
    ranked: int | None = None  # its node rank told by its global ranks (the folder said none)

    @property
    def said_rank(self) -> int | None:
        """The node rank its folder says (its launcher's or scheduler's), else None."""
        return whole(self.identity.get("node_rank"), MAX_NODES - 1)

    @property
    def node_rank(self) -> int | None:
        """Its node rank: as its folder says, else as its global ranks tell (:func:`ranks_order`)."""
        said = self.said_rank
        return said if said is not None else self.ranked

    @property
    def ranks(self) -> list[int]:
        """The global ranks its recording saw (its processes of kind rank), in order."""
        found = self.meta.get("processes")
        procs = found if isinstance(found, list) else []
        return sorted(
            {
                r
                for p in procs
                if isinstance(p, dict) and p.get("kind") == RANK
                for r in [whole(p.get("rank"), MAX_RANK)]
                if r is not None
            }
        )

    @property
    def node_count(self) -> int | None:
        """How many nodes the job has, as this node's launcher or scheduler said."""
        n = whole(self.identity.get("nodes"), MAX_NODES)
        return n if n else None

    @property
    def host(self) -> str | None:
        h = self.identity.get("host")
        return h if isinstance(h, str) and h else None

    @property
    def label(self) -> str:
        """'node 1 (gpu-07)', else the folder's name."""
        name = f"node {self.node_rank}" if self.node_rank is not None else f"folder {self.folder.name}"
        where = ", ".join(w for w in (self.host, f"folder {self.folder.name}" if self.twin else None) if w)
        return f"{name} ({where})" if where else name

    @property
    def meta(self) -> dict:
        return self.results.metas[0] if self.results is not None and self.results.metas else {}

    @property
    def summary(self) -> RunSummary | None:
        return self.analysed[0].summary if self.analysed else None

    @property
    def started(self) -> float | None:
        """The wall-clock time its command started (seconds since the epoch)."""
        t = self.meta.get("started")
        if not isinstance(t, int | float) or isinstance(t, bool):
            t = (self.results.manifest if self.results is not None else {}).get("started")
        return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None


@dataclass
class Job:
    """The nodes of one job, in node-rank order, and the node ranks no folder holds."""

    nodes: list[JobNode]
    missing: list[int]  # node ranks below the job's node count that no folder answers for
    # Nodes of the job's node count no folder answers for, where which ones cannot be told (some
    # folders do not say their node rank: any of them could be one of those ranks).
    unaccounted: int = 0

    @property
    def read(self) -> list[JobNode]:
        """The nodes whose runs were read."""
        return [n for n in self.nodes if n.results is not None and n.results.metas]

    @property
    def start(self) -> float | None:
        """The earliest start among the nodes: where the job's wall-clock axis begins."""
        times = [n.started for n in self.read if n.started is not None]
        return min(times) if times else None

    def offset(self, node: JobNode) -> float:
        """Seconds from the job's start to this node's start."""
        return (node.started - self.start) if node.started is not None and self.start is not None else 0.0

    @classmethod
    def load(
        cls,
        paths: Sequence[str | Path],
        analyse: Callable[[ResultSet], list] | None = None,
        ended: Collection[Path] = (),
    ) -> Job:
        """The nodes in ``paths``: each a node's results folder, or a job folder holding one per
        node (``job/node0``, ``job/node1``). ``analyse`` (e.g. ``memprobe.analysis.runs.analyse_all``)
        is run over each node read. ``ended``: folders whose memprobe was killed and that were
        left as they were (read-only, or the page written elsewhere), read as finishing would
        leave them (:meth:`memprobe.results.folder.ResultsFolder.load_as_ended`). A symbolic link
        inside a job folder is a node named with its problem, never read (:func:`linked_nodes`)."""
        nodes = [load_node(f, analyse, as_ended=f in ended) for f in node_folders(paths)]
        nodes += [JobNode(f, problem=linked_problem(f)) for f in linked_nodes(paths)]
        for node, rank in ranks_order(nodes):
            node.ranked = rank
        nodes.sort(key=lambda n: (n.node_rank is None, n.node_rank or 0, n.folder.name))
        expected = max((n.node_count or 0 for n in nodes if n.results is not None), default=0)
        have = {n.node_rank for n in nodes}
        ranks = [n.node_rank for n in nodes if n.node_rank is not None]
        for n in nodes:  # two folders saying the same node (a launcher without --node-rank): told apart
            if n.node_rank is not None and ranks.count(n.node_rank) > 1:
                n.problem = n.problem or f"another folder says it is node {n.node_rank} too"
                n.twin = True
        missing = [k for k in range(expected) if k not in have]
        unranked = sum(1 for n in nodes if n.node_rank is None)
        if unranked:  # a folder that does not say its node rank may be any missing one
            return cls(nodes, [], max(0, len(missing) - unranked))
        return cls(nodes, missing)

    @property
    def node_count(self) -> int:
        """The job's node count: the largest any node's folder said, else the folders there are."""
        return max((n.node_count or 0 for n in self.read), default=0) or len(self.nodes)

    def lost(self) -> list[str]:
        """The job's nodes that no folder answers for, in words: each missing node rank, or how
        many nodes are not accounted for where which ones cannot be told."""
        out = [f"node {k}: no folder for it (the job has {self.node_count} nodes)" for k in self.missing]
        if self.unaccounted:
            n = self.unaccounted
            out.append(
                f"{n} of the job's {self.node_count} nodes {'has' if n == 1 else 'have'} no folder "
                "(which cannot be told: some folders do not say their node rank)"
            )
        return out


def ranks_order(nodes: Sequence[JobNode]) -> list[tuple[JobNode, int]]:
    """The node ranks that folders which do not say theirs hold by their global ranks, where
    every folder read says none (null) (an elastic torchrun job started without ``--node-rank``, whose
    rendezvous numbered the nodes): torchrun gives node k the global ranks after those of nodes
    0 to k-1. Told only where no doubt is left: two folders or more (a launcher that numbers each
    node's ranks from 0 would make any one folder node 0), each node's ranks whole runs, none held twice,
    and either together 0 to N-1 (node k: the k-th lowest), or every node the same number c of
    them from a multiple of c (node k: ranks k*c to k*c+c-1, a node lost in between). Else none."""
    read = [n for n in nodes if n.results is not None and n.meta]
    if len(read) < 2 or any(n.identity.get("node_rank") is not None for n in read):
        return []  # one folder alone, or a folder says a node rank (one not believed too)
    held = [(n, n.ranks) for n in read]
    if any(not r or r != list(range(r[0], r[0] + len(r))) for _, r in held):
        return []
    every = sorted(r for _, ranks in held for r in ranks)
    if len(set(every)) != len(every):
        return []
    if every == list(range(len(every))):
        return [(n, k) for k, (n, _) in enumerate(sorted(held, key=lambda h: h[1][0]))]
    sizes = {len(r) for _, r in held}
    if len(sizes) == 1:
        (c,) = sizes
        if all(r[0] % c == 0 for _, r in held):
            return [(n, r[0] // c) for n, r in held]
    return []


def whole(value: object, top: int) -> int | None:
    """A whole number from 0 to ``top`` as a folder holds it (JSON), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= top else None


def node_folders(paths: Sequence[str | Path]) -> list[Path]:
    """Every node folder ``paths`` name: a results folder as it is (a link the user named is
    followed), a job folder's subfolders (a subfolder without manifest.json is a node that never
    wrote one; one that is a symbolic link is no node folder: :func:`linked_nodes`), a path that
    is not there as itself (a missing node)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and not is_results_folder(p):
            out += [d for d in _entries(p) if not d.is_symlink() and d.is_dir()]
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def linked_nodes(paths: Sequence[str | Path]) -> list[Path]:
    """The symbolic links to folders (or that lead nowhere) inside the job folders ``paths``
    name: never followed. memprobe finishes and rewrites the folders it reports (a node whose
    memprobe was killed is marked and gathered); through a link it would rewrite a folder
    outside the one named. The folder a link points to is reported when named itself."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and not is_results_folder(p):
            out += [d for d in _entries(p) if d.is_symlink() and (d.is_dir() or not d.exists())]
    return list(dict.fromkeys(out))


def linked_problem(link: Path) -> str:
    """Why a node folder that is a symbolic link is not reported, and how to report it."""
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return (
        f"a symbolic link (to {target}), not followed: memprobe would finish and rewrite the folder "
        "it leads to; name that folder on the command line to report it"
    )


def _entries(folder: Path) -> list[Path]:
    """A job folder's entries (hidden ones left out), in name order; none if it cannot be listed."""
    try:
        return sorted(d for d in folder.iterdir() if not d.name.startswith("."))
    except OSError:
        return []


def not_one_job(folders: Sequence[Path], *, named: bool = False) -> str | None:
    """Why the results folders found in one folder are not the nodes of one job, in words (None:
    they are). A job folder holds the folders of one recorded command, one per node; a folder of
    separate results (``reports/`` after several ``memprobe run`` sessions, or records of
    different commands) is not one: a ``run`` session is never a node, and recorded folders are
    a job when their launcher or scheduler names the nodes or they all recorded one command.
    Folders whose scheduler or launcher names different jobs (``SLURM_JOB_ID``,
    ``TORCHELASTIC_RUN_ID``, torchrun's ``--rdzv-id``: 77 on one, 88 on another) are two jobs,
    whatever else they say, also where the user ``named`` them one by one (otherwise named
    folders are taken as the user's job, a ``run`` session among them a node named with its
    problem). Reads only each folder's manifest and first run record; a folder that cannot be
    read is a node whose problem the job page names."""
    commands: dict[str, list[str]] = {}
    scenarios: list[str] = []
    jobs: dict[str, dict[str, list[str]]] = {}  # an identifier's values, and the folders saying each
    identified = False
    for folder in folders:
        if not is_results_folder(folder):
            continue
        try:
            results = ResultsFolder.open(folder)
        except (MemprobeError, OSError, ValueError):
            continue
        try:
            metas = results.metas()
        except (MemprobeError, OSError, ValueError):  # its kind is the manifest's
            metas = []
        if not (is_recorded(metas[0]) if metas else results.manifest.get("kind") in RECORDED_KINDS):
            scenarios.append(folder.name)
            continue
        meta = metas[0] if metas else {}
        found = meta.get("node")
        node: dict = found if isinstance(found, dict) else {}
        identified = (
            identified
            or any(node.get(k) is not None for k in ("node_rank", "nodes"))
            or bool(node.get("env"))
        )
        command = meta.get("command")
        commands.setdefault(repr(command) if command else folder.name, []).append(folder.name)
        for key, value in job_identifiers(node, command).items():
            jobs.setdefault(key, {}).setdefault(value, []).append(folder.name)
    for key, values in jobs.items():
        if len(values) > 1:
            said = ", ".join(
                f"{value[:40]} ({', '.join(names[:3])}{' ...' if len(names) > 3 else ''})"
                for value, names in list(values.items())[:4]
            )
            return f"they belong to different jobs, {key} {said}: report each job's folders on their own"
    if named:
        return None
    if scenarios:
        more = " ..." if len(scenarios) > 5 else ""
        return (
            f"{', '.join(scenarios[:5])}{more}: written by 'memprobe run' or profile(), not a node of a job"
        )
    if len(commands) > 1 and not identified:
        return "they recorded different commands and no launcher or scheduler named them as nodes"
    return None


def job_identifiers(node: dict, command: object) -> dict[str, str]:
    """What names the job a node's folder belongs to: its scheduler's and launcher's job ids
    (:data:`JOB_VARIABLES`) and torchrun's ``--rdzv-id``, those set, as text."""
    found = node.get("env")
    env: dict = found if isinstance(found, dict) else {}
    ids = {k: env.get(k) for k in JOB_VARIABLES}
    if isinstance(command, list):
        ids["torchrun --rdzv-id"] = launcher_options(command).get("rdzv_id")
    return {k: v for k, v in ids.items() if isinstance(v, str) and v}


def load_node(
    folder: Path, analyse: Callable[[ResultSet], list] | None, *, as_ended: bool = False
) -> JobNode:
    """One node's folder read, or the reason it cannot be (never an exception). ``as_ended``:
    a folder whose memprobe was killed, left as it was, read as finishing would leave it."""
    if not folder.is_dir():
        return JobNode(folder, problem="no such folder")
    if not is_results_folder(folder):
        return JobNode(
            folder, problem="no manifest.json: memprobe never finished starting there, or the folder was lost"
        )
    try:
        opened = ResultsFolder.open(folder)
        results = opened.load_as_ended() if as_ended else opened.load()
    except (MemprobeError, OSError, ValueError) as e:
        return JobNode(folder, problem=f"could not be read: {e}")
    meta = results.metas[0] if results.metas else {}
    found = meta.get("node")
    identity: dict = found if isinstance(found, dict) else {}
    node = JobNode(folder, identity, results)
    if not results.metas:
        node.problem = "no run was recorded there"
        return node
    if not is_recorded(meta):  # a `memprobe run` session: no node of a job
        node.results = None
        node.problem = f"not a recorded job (written by 'memprobe {meta.get('kind') or 'run'}')"
        return node
    status = meta.get("status")
    if status not in ("ok", None):
        node.problem = f"its recording ended {status}: reported up to then"
    if analyse is not None:
        node.analysed = analyse(results)
    return node
