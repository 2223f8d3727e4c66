"""Profile a user's own command (``memprobe record``) or a running process (``memprobe watch``).

The same outside-in sampling as ``memprobe run``, on a process tree memprobe did not build:

* roles: a process whose comm is ``pt_data_worker`` is a DataLoader worker. Workers are indexed
  per *generation*: when a worker appears, it takes the lowest index not held by a live worker
  of the same parent (siblings that appear together are ordered by start time, then pid), so
  each epoch's fresh workers (``persistent_workers=False``) are ``worker 0..N-1`` again, and
  each rank's workers are numbered on their own.
* ranks: a direct child of the root whose environment has ``RANK`` (or ``LOCAL_RANK``) set to
  something other than the root's own value is a rank process (torchrun, torch.distributed.run);
  every process below it belongs to that rank ("rank 1", "rank 1 worker 0"). When environments
  cannot be read, the children of a root whose command line is a known launcher are ranks in
  order of appearance.
* marks: ``record`` sets ``MEMPROBE_MARK_FILE`` for the command; :func:`memprobe.mark`
  appends ``<monotonic s> <n> <pid>`` lines to it, which become the progress table (items/s).
  ``watch`` reads the file named by ``--marks``, or by the process's own ``MEMPROBE_MARK_FILE``.

A run is summarized by :func:`memprobe.analysis.summarize` unchanged; its meta is shaped for it:
``spec.mode`` is the workers' start method as seen from outside (fork, spawn, forkserver), or
``record``/``watch`` when no worker appeared; ``spec.workers`` is the most workers alive at once;
``marks.warm`` is the first PSS round with a worker alive (or the first PSS round), ``marks.done``
the last mark (or the end), so each worker's growth is its USS at its last PSS sample minus its
first, over its lifetime.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from memprobe.errors import MemprobeError, UsageError
from memprobe.probe import procfs
from memprobe.runner import environment
from memprobe.probe.roles import MAIN, TORCH_WORKER_COMM, Role, RoleBook
from memprobe.probe.sampler import Row, Sampler, SamplerSettings, Sink
from memprobe.scenario import VerdictSpec

MARK_ENV = "MEMPROBE_MARK_FILE"
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "torch/distributed/run.py")
LEFTOVER_GRACE_S = 3.0
# A recorded job runs for minutes or hours and items/s come from marks, not from the cheap tier:
# 5 cheap rounds a second leave more of the CPU budget for PSS rounds.
DEFAULT_SETTINGS = SamplerSettings(interval_s=0.2)
_OTHER_RECHECK_S = 1.0


class CommandNotFound(MemprobeError):
    exit_code = 127


# -- roles ------------------------------------------------------------------------------------

def _env(pid: int) -> dict[str, str] | None:
    text = procfs._read(f"/proc/{pid}/environ")
    if text is None:
        return None
    return dict(item.split("=", 1) for item in text.split("\0") if "=" in item)


def _env_rank(env: dict[str, str] | None) -> str | None:
    if not env:
        return None
    return env.get("RANK", env.get("LOCAL_RANK"))


class TreeRoles(RoleBook):
    """Roles for a tree memprobe did not start: worker generations and ranks (see the module doc)."""

    def __init__(self, main_pid: int) -> None:
        super().__init__(main_pid)
        self._roles: dict[int, Role] = {}  # settled
        self._recheck: dict[int, tuple[float, Role]] = {}  # unsettled, re-resolved after a while
        self._ppid: dict[int, int] = {}
        self._rank: dict[int, int] = {}  # settled ranks (pid -> rank, -1 for none)
        self._generations: dict[int, dict[int, int]] = {}  # parent pid -> {worker pid: index}
        self.ranks: dict[int, int] = {}  # rank process pid -> rank
        self.start_methods: Counter[str] = Counter()
        self._root_rank = _env_rank(_env(main_pid))
        cmd = " ".join(procfs.read_cmdline(main_pid))
        self._launcher = any(name in cmd for name in LAUNCHERS)
        self._next_rank = 0

    # -- public --------------------------------------------------------------------------
    def role(self, pid: int, comm: str, ppid: int | None = None) -> Role:
        if pid == self.main_pid:
            return Role(MAIN)
        if pid in self._roles:
            return self._roles[pid]
        ppid = self._parent(pid)
        held = self._recheck.get(pid)
        if (held is not None and comm != TORCH_WORKER_COMM and ppid != self.main_pid
                and time.monotonic() < held[0]):
            return held[1]
        rank = self.rank_of(pid)
        prefix = f"rank {rank} " if rank >= 0 else ""
        if comm == TORCH_WORKER_COMM and ppid is not None:
            self._assign_generation(ppid, pid, prefix)
            return self._roles[pid]
        if ppid == self.main_pid and pid in self.ranks:
            return self._settle(pid, Role(f"rank {rank}"))
        cmd = " ".join(procfs.read_cmdline(pid))
        if "multiprocessing.resource_tracker" in cmd:
            return self._settle(pid, Role(prefix + "resource tracker"))
        if "multiprocessing.forkserver" in cmd and comm != TORCH_WORKER_COMM:
            # The forkserver itself (its forked workers are renamed pt_data_worker by torch).
            role = Role(prefix + "forkserver")
        elif "multiprocessing.spawn" in cmd or "--multiprocessing-fork" in cmd:
            role = Role(prefix + "spawn (starting)")
        else:
            role = Role(prefix + "other")
        # Not settled: a forked process may still be renamed or exec, a child may become a rank.
        self._recheck[pid] = (time.monotonic() + _OTHER_RECHECK_S, role)
        return role

    def rank_of(self, pid: int) -> int:
        """The rank ``pid`` belongs to: that of the root's child it descends from; -1 for none
        (the root itself, a process not below the root, or a rank not known yet)."""
        if pid in self._rank:
            return self._rank[pid]
        chain: list[int] = []
        p: int | None = pid
        while p != self.main_pid:
            if p is None or p <= 1 or len(chain) > 64:
                return -1  # not below the root (e.g. an orphan found by the group scan)
            if p in self._rank:
                break
            chain.append(p)
            p = self._parent(p)
        if p in self._rank:
            rank = self._rank[p]
        elif chain:
            rank = self._child_rank(chain[-1])
            if chain[-1] not in self._rank:
                return rank  # not decided yet
        else:
            return -1
        for q in chain:
            self._rank[q] = rank
        return rank

    def rank_or_none(self, pid: int) -> int:
        """The settled rank of ``pid`` without reading /proc (for rows of vanished processes)."""
        return self._rank.get(pid, -1)

    # -- internals -----------------------------------------------------------------------
    def _settle(self, pid: int, role: Role) -> Role:
        self._roles[pid] = role
        self._recheck.pop(pid, None)
        return role

    def _parent(self, pid: int) -> int | None:
        if pid not in self._ppid:
            st = procfs.read_stat(pid)
            if st is None:
                return None
            self._ppid[pid] = st.ppid
        return self._ppid[pid]

    def _child_rank(self, child: int) -> int:
        """Rank of a direct child of the root; settled once known. 'Not a rank' is only settled
        for a worker: a child that has not exec'd yet still carries its parent's environment."""
        st = procfs.read_stat(child)
        if st is None:
            return -1
        if st.comm == TORCH_WORKER_COMM:
            self._rank[child] = -1
            return -1
        env = _env(child)
        value = _env_rank(env)
        rank = -1
        if value is not None and value != self._root_rank:
            try:
                rank = int(value)
            except ValueError:
                pass
        elif env is None and self._launcher:  # environment unreadable: ranks in order of appearance
            cmd = " ".join(procfs.read_cmdline(child))
            if cmd and "multiprocessing." not in cmd and cmd != " ".join(procfs.read_cmdline(self.main_pid)):
                rank, self._next_rank = self._next_rank, self._next_rank + 1
        if rank >= 0:
            self._rank[child] = rank
            self.ranks[child] = rank
        return rank

    def _assign_generation(self, parent: int, pid: int, prefix: str) -> None:
        gen = self._generations.setdefault(parent, {})
        for old in [p for p in gen if not _alive(p)]:
            del gen[old]  # its index is free for the next generation
        taken = set(gen.values())
        newcomers = {pid}
        for sib in procfs.read_children(parent):
            if sib not in gen and sib not in self._roles:
                st = procfs.read_stat(sib)
                if st is not None and st.comm == TORCH_WORKER_COMM:
                    newcomers.add(sib)
        starts = {p: (st.start_ticks if (st := procfs.read_stat(p)) else 0, p) for p in newcomers}
        method = _start_method(parent, pid)
        for p in sorted(newcomers, key=starts.__getitem__):
            index = next(i for i in range(len(taken) + 1) if i not in taken)
            taken.add(index)
            gen[p] = index
            self.start_methods[method] += 1
            self._settle(p, Role(f"{prefix}worker {index}", index))


def _alive(pid: int) -> bool:
    st = procfs.read_stat(pid)
    return st is not None and st.state not in ("Z", "X")


def _start_method(parent: int, worker: int) -> str:
    """fork, spawn or forkserver, from the worker's (inherited or exec'd) command line."""
    cmd = " ".join(procfs.read_cmdline(worker)) or " ".join(procfs.read_cmdline(parent))
    if "multiprocessing.forkserver" in cmd:
        return "forkserver"
    if "multiprocessing.spawn" in cmd or "--multiprocessing-fork" in cmd:
        return "spawn"
    return "fork"


# -- sampler ----------------------------------------------------------------------------------

@dataclass
class ProcessInfo:
    pid: int
    role: str
    rank: int
    worker: int
    first_t: float
    last_t: float
    command: str
    first_pss_t: float | None = None
    last_pss_t: float | None = None


class TreeSampler(Sampler):
    """A :class:`Sampler` with :class:`TreeRoles`, a ``rank`` column, and bookkeeping for the
    meta: the first PSS round with a worker alive, the most workers alive at once, and every
    process seen.

    Workers of a recorded job can be short-lived (one generation per epoch), and the CPU budget
    may space PSS rounds seconds apart. So a round that finds a new process (a worker is forked
    as a copy of its parent and renamed ``pt_data_worker`` a moment later) takes PSS at once,
    which gives each worker a sample at its birth; and each worker gets a PSS round at ages 1, 2,
    4 and 8 s unless one was taken in the last half second: a few rounds per generation that
    make each worker's lifetime growth measurable whatever the budget."""

    FORCE_AGES = (1.0, 2.0, 4.0, 8.0)
    RECENT_S = 0.5

    def __init__(self, root: int, sink: Sink, settings: SamplerSettings | None = None, *,
                 t0: float, pgid: int | None = None) -> None:
        super().__init__(root, self._tap, settings, t0=t0, pgid=pgid)
        self.roles = TreeRoles(root)
        self._out = sink
        self._known: set[int] = set()
        self._born: dict[int, float] = {}  # worker pid -> tick first seen as a worker
        self._last_pss: dict[int, float] = {}
        self._next_force: dict[int, int] = {}  # worker pid -> index into FORCE_AGES
        self.first_pss_t: float | None = None
        self.first_worker_pss_t: float | None = None
        self.last_t: float | None = None
        self.max_workers = 0
        self.processes: dict[int, ProcessInfo] = {}
        self._lock = threading.Lock()

    def _discover(self, tick: float) -> list[int]:
        pids = super()._discover(tick)
        new = [p for p in pids if p not in self._known]
        if new and self._known:
            self._pss_now.set()  # read before this round decides on PSS
        self._known.update(new)
        return pids

    def _sample(self, pid: int, tick: float, with_pss: bool) -> Row | None:
        row = super()._sample(pid, tick, with_pss)
        if row is None:
            return row
        if row["tier"] == "pss":
            self._last_pss[pid] = tick
        if int(row["worker"]) < 0:
            return row
        if pid not in self._born:
            self._born[pid] = tick
            self._next_force[pid] = 0
            if pid not in self._last_pss:
                self._pss_now.set()
            return row
        k = self._next_force[pid]
        if k < len(self.FORCE_AGES) and tick - self._born[pid] >= self.FORCE_AGES[k]:
            self._next_force[pid] = k + 1
            if self._last_pss.get(pid, -1.0) < tick - self.RECENT_S:
                self._pss_now.set()
        return row

    def _tap(self, table: str, rows: list[Row]) -> None:
        if table == "samples" and rows:
            self._note(rows)
        self._out(table, rows)

    def _note(self, rows: list[Row]) -> None:
        t = float(rows[0]["t"])
        self.last_t = t
        live_workers = 0
        any_pss = worker_pss = False
        with self._lock:
            for r in rows:
                pid = int(r["pid"])
                r["rank"] = self.roles.rank_or_none(pid) if r["missing"] else self.roles.rank_of(pid)
                if r["missing"]:
                    continue
                pss = r["tier"] == "pss"
                any_pss |= pss
                if int(r["worker"]) >= 0:
                    live_workers += 1
                    worker_pss |= pss
                info = self.processes.get(pid)
                if info is None:
                    # A worker's command line is its parent's (fork) or multiprocessing's (spawn).
                    cmd = "" if int(r["worker"]) >= 0 else " ".join(procfs.read_cmdline(pid))[:300]
                    info = self.processes[pid] = ProcessInfo(pid, str(r["role"]), int(r["rank"]), int(r["worker"]),
                                                             t, t, cmd)
                info.role, info.rank, info.worker, info.last_t = str(r["role"]), int(r["rank"]), int(r["worker"]), t
                if pss:
                    info.first_pss_t = t if info.first_pss_t is None else info.first_pss_t
                    info.last_pss_t = t
        self.max_workers = max(self.max_workers, live_workers)
        if any_pss and self.first_pss_t is None:
            self.first_pss_t = t
        if worker_pss and self.first_worker_pss_t is None:
            self.first_worker_pss_t = t

    def process_list(self) -> list[dict]:
        with self._lock:
            return [asdict(p) for p in sorted(self.processes.values(), key=lambda p: p.first_t)]


# -- marks ------------------------------------------------------------------------------------

class MarkReader:
    """Tails a mark file: ``<monotonic s> <n> <pid>`` lines, a torn last line kept for later."""

    def __init__(self, path: Path, t0: float, *, from_end: bool = False) -> None:
        self.path = path
        self.t0 = t0
        self.offset = 0
        if from_end:
            try:
                self.offset = path.stat().st_size
            except OSError:
                pass
        self._buf = b""
        self.items = 0
        self.batches = 0
        self.first_t: float | None = None
        self.last_t: float | None = None

    def poll(self) -> list[Row]:
        """New marks as one cumulative progress row (or none)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        self.offset += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        seen = False
        for line in lines:
            parts = line.split()
            try:
                mono, n = float(parts[0]), int(parts[1])
            except (IndexError, ValueError):
                continue
            t = round(mono - self.t0, 4)
            self.items += n
            self.batches += 1
            self.first_t = t if self.first_t is None else self.first_t
            self.last_t = t if self.last_t is None else max(self.last_t, t)
            seen = True
        if not seen:
            return []
        return [{"t": self.last_t, "items": self.items, "batches": self.batches, "epoch": None}]


# -- naming -----------------------------------------------------------------------------------

_WRAPPERS = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|torchrun|accelerate|deepspeed|uv|poetry|pipenv|conda|"
                       r"env|nohup|time|nice|taskset|numactl|srun|mpirun)$")


def command_name(argv: list[str]) -> str:
    """A short name for a command: the script's stem for ``python train.py``, the module for
    ``python -m pkg.train``, else the program's name."""
    for i, arg in enumerate(argv):
        base = os.path.basename(arg)
        if arg == "-m" and i + 1 < len(argv):
            return _safe(argv[i + 1].rsplit(".", 1)[-1])
        if base.endswith(".py"):
            return _safe(base[:-3])
        if i == 0 and not _WRAPPERS.match(base):
            return _safe(base)
    return _safe(os.path.basename(argv[0])) if argv else "command"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:40] or "command"


def default_out_dir(kind: str, name: str, base: Path = Path("reports")) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return base / f"{kind}-{name}-{stamp}"


# -- the recording ----------------------------------------------------------------------------

@dataclass
class RecordResult:
    root: Path
    summaries: list
    report: Path | None
    exit_code: int
    status: str
    processes: list[dict] = field(default_factory=list)  # per process: role, rank, USS growth
    kind: str = "record"  # record | watch


class _Recording:
    """The part shared by record and watch: writer, sampler, marks, meta and the final save."""

    def __init__(self, out: Path, kind: str, name: str, description: str,
                 settings: SamplerSettings | None, verdict: VerdictSpec) -> None:
        from memprobe.results import SCHEMA_VERSION, RunWriter, write_json_atomic

        if (out / "manifest.json").exists():
            raise UsageError(f"{out} already holds results; choose another folder with -o")
        self.out, self.kind, self.name = out, kind, name
        self.run_id = name
        self.run_dir = out / "runs" / self.run_id
        out.mkdir(parents=True, exist_ok=True)
        self.writer = RunWriter(self.run_dir)
        self.settings = settings or DEFAULT_SETTINGS
        self.verdict = verdict
        self.started_wall = time.time()
        self.t0 = time.monotonic()
        self.manifest = {"schema_version": SCHEMA_VERSION, "scenario": f"{kind}-{name}", "kind": kind,
                         "scenario_path": None, "description": description, "status": "running",
                         "started": self.started_wall, "finished": None, "environment": None,
                         "runs": [self.run_id]}
        write_json_atomic(out / "manifest.json", self.manifest)
        self.sampler: TreeSampler | None = None
        self.marks: MarkReader | None = None
        self.info: dict = {}

    def start_sampling(self, root: int, pgid: int | None) -> None:
        self.root = root
        self.sampler = TreeSampler(root, self.writer.append, self.settings, t0=self.t0, pgid=pgid)
        self.sampler.start()

    def poll_marks(self) -> None:
        if self.marks is not None:
            self.writer.append("progress", self.marks.poll())

    def finish(self, *, status: str, exit_code: int | None, error: dict | None, final_pss: bool,
               render: bool) -> RecordResult:
        from memprobe.session import finalize

        assert self.sampler is not None
        self.sampler.stop(final_pss=final_pss)
        self.poll_marks()
        meta = self._meta(status, exit_code, error)
        self.writer.write_meta(meta)
        self.writer.close()
        self.manifest.update(status="interrupted" if status == "interrupted" else "complete",
                             finished=time.time(), environment=environment())
        session = finalize(self.out, self.manifest, render=False, interrupted=status == "interrupted")
        processes = self._per_process()
        self._add_to_summary(processes)
        report = None
        if render:
            try:
                from memprobe.report import write_report
            except ImportError:  # the report module is optional here: results and summary are saved
                write_report = None
            if write_report is not None:
                report = write_report(self.out)
        return RecordResult(self.out, session.summaries, report, 0, status, processes, self.kind)

    def _meta(self, status: str, exit_code: int | None, error: dict | None) -> dict:
        s = self.sampler
        assert s is not None
        elapsed = time.monotonic() - self.t0
        m = self.marks
        marks: dict[str, float] = {}
        warm = s.first_worker_pss_t if s.first_worker_pss_t is not None else s.first_pss_t
        if warm is not None:
            marks["warm"] = warm
        if m is not None and m.last_t is not None:
            marks["first_mark"] = m.first_t
            marks["done"] = max(m.last_t, warm or 0.0)
        elif s.last_t is not None:
            marks["done"] = s.last_t
        methods = s.roles.start_methods
        mode = methods.most_common(1)[0][0] if methods else self.kind
        spec = {"run_id": self.run_id, "backend": self.name, "mode": mode, "workers": s.max_workers,
                "workload": self.kind, "verdict": asdict(self.verdict), "expect": None,
                "timeout_s": None, "sampling": asdict(self.settings), **self.info}
        costs_p, costs_c = s.pss_round_costs, s.cheap_round_costs
        sampler = {"cpu_s": round(s.cpu_s, 4), "pss_rounds": len(costs_p), "cheap_rounds": len(costs_c),
                   "pss_round_mean_s": round(sum(costs_p) / len(costs_p), 6) if costs_p else None,
                   "cheap_round_mean_s": round(sum(costs_c) / len(costs_c), 6) if costs_c else None}
        if s.error is not None:
            sampler["error"] = repr(s.error)
        return {"run_id": self.run_id, "index": 0, "kind": self.kind, "status": status, "error": error,
                "items": m.items if m else 0, "batches": m.batches if m else 0, "marks": marks,
                "marks_recorded": bool(m and m.batches), "started": self.started_wall,
                "elapsed_s": round(elapsed, 3), "exit_code": exit_code, "sampler": sampler,
                "dataset_info": {}, "root_pid": self.root,
                "ranks": {str(r): pid for pid, r in sorted(s.roles.ranks.items(), key=lambda x: x[1])},
                "start_methods": dict(methods), "processes": s.process_list(), "spec": spec}

    def _per_process(self) -> list[dict]:
        """USS at each process's first and last PSS sample (its lifetime), grouped by rank."""
        from memprobe.analysis import per_process_growth
        from memprobe.results import ResultSet

        results = ResultSet.load(self.out)
        samples = results.run_table("samples", self.run_id)
        if samples.empty:
            return []
        g = per_process_growth(samples, float("-inf"), float("inf"))
        # The same samples per_process_growth measures: a worker's from when it was one.
        w = samples[samples["tier"] == "pss"]
        w = w[(w["worker"] >= 0) | ~w["pid"].isin(w.loc[w["worker"] >= 0, "pid"].unique())]
        span = w.groupby("pid")["t"].agg(["min", "max"])
        info = {p["pid"]: p for p in (self.sampler.process_list() if self.sampler else [])}
        rows = []
        for r in g.to_dict("records"):
            pid = int(r["pid"])
            first, last = ((float(span.at[pid, "min"]), float(span.at[pid, "max"])) if pid in span.index
                           else (None, None))
            rows.append({"pid": pid, "role": r["role"], "rank": info.get(pid, {}).get("rank", -1),
                         "worker": int(r["worker"]), "first_t": first, "last_t": last,
                         "pss_samples": int(r["samples"]), "uss_start_mb": round(float(r["uss_start_mb"]), 3),
                         "uss_end_mb": round(float(r["uss_end_mb"]), 3), "growth_mb": round(float(r["growth_mb"]), 3)})
        rows.sort(key=_process_order)
        return rows

    def _add_to_summary(self, processes: list[dict]) -> None:
        import json

        from memprobe.results import write_json_atomic

        path = self.out / "summary.json"
        data = json.loads(path.read_text())
        for run in data.get("runs", []):
            if run.get("run_id") == self.run_id:
                run["processes"] = processes
        write_json_atomic(path, data)


def _process_order(row: dict) -> tuple:
    """main first; then per rank (none first): the rank process, its workers by start, the rest."""
    if row["worker"] >= 0:
        kind = 1
    else:
        kind = 0 if row["role"] in (MAIN, f"rank {row['rank']}") else 2
    first = row["first_t"] if row["first_t"] is not None else 0.0
    return (row["role"] != MAIN, row["rank"], kind, first, row["pid"])


# -- terminal and signals ---------------------------------------------------------------------

def _foreground_tty() -> int | None:
    """fd 0 when it is a terminal whose foreground group is ours, so the command can have it."""
    try:
        if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
            return 0
    except OSError:
        pass
    return None


def _set_foreground(fd: int, pgid: int) -> None:
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        os.tcsetpgrp(fd, pgid)
    except OSError:
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _child_setup(tty: int | None) -> Callable[[], None]:
    def setup() -> None:
        os.setpgid(0, 0)
        if tty is not None:
            _set_foreground(tty, os.getpgrp())
    return setup


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# -- record -----------------------------------------------------------------------------------

def record(command: list[str], out: Path | None = None, *, settings: SamplerSettings | None = None,
           verdict: VerdictSpec | None = None, render: bool = True,
           log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)) -> RecordResult:
    """Run ``command`` with inherited stdin/stdout/stderr, sample its whole process tree until
    it exits, save and summarize. ``exit_code`` is the command's (128+N if killed by signal N;
    128+N too if memprobe itself got signal N, which it forwards to the command's group).

    The command runs in its own process group; when memprobe has the terminal, that group is
    made the terminal's foreground group, so Ctrl-C, Ctrl-Z and reading stdin behave as if the
    command ran alone (memprobe takes the terminal back when it ends or stops)."""
    if not command:
        raise UsageError("no command given: memprobe record [-o DIR] -- COMMAND [ARGS...]")
    if shutil.which(command[0]) is None:
        raise CommandNotFound(f"{command[0]}: command not found (or not executable)")
    name = command_name(command)
    out = out or default_out_dir("record", name)
    rec = _Recording(out, "record", name, "memprobe record: " + " ".join(command), settings,
                     verdict or VerdictSpec())
    mark_path = rec.run_dir / "marks.txt"
    mark_path.touch()
    rec.marks = MarkReader(mark_path, rec.t0)
    rec.info = {"command": command}
    env = {**os.environ, MARK_ENV: str(mark_path.resolve())}
    tty = _foreground_tty()
    got: list[int] = []
    proc: subprocess.Popen | None = None

    def forward(signum: int, frame: object) -> None:
        got.append(signum)
        if proc is None:
            return
        n = sum(1 for s in got if s == signal.SIGINT) if signum == signal.SIGINT else 1
        sig = signum if n == 1 else (signal.SIGTERM if n == 2 else signal.SIGKILL)
        _killpg(proc.pid, sig)

    old = _install(forward)
    try:
        try:
            if tty is None:
                proc = subprocess.Popen(command, env=env, process_group=0)
            else:
                proc = subprocess.Popen(command, env=env, preexec_fn=_child_setup(tty))
        except OSError as exc:
            rec.writer.close()
            raise MemprobeError(f"{command[0]}: cannot run: {exc.strerror or exc}") from exc
        if got:  # a signal arrived before the command existed
            _killpg(proc.pid, got[0])
        rec.start_sampling(proc.pid, pgid=proc.pid)
        log(f"memprobe: recording {' '.join(command)} (pid {proc.pid}) -> {out}")
        _wait(proc, rec, tty)
        if tty is not None:
            _set_foreground(tty, os.getpgrp())
        left = _drain_group(proc, rec)
        if left:
            log(f"memprobe: ended {len(left)} process(es) the command left behind: {', '.join(map(str, left))}")
    except BaseException:
        if proc is not None:
            if tty is not None:
                _set_foreground(tty, os.getpgrp())
            from memprobe.runner import end_group

            end_group(proc)
        if rec.sampler is not None:
            rec.sampler.stop(final_pss=False)
        rec.writer.close()
        raise
    finally:
        _restore(old)
    code = proc.returncode
    exit_code = 128 - code if code < 0 else code
    error = None
    if got:
        status = "interrupted"
        exit_code = 128 + got[0]
    elif code == -signal.SIGINT:
        status = "interrupted"
    elif code == 0:
        status = "ok"
    else:
        status = "failed"
    if code != 0:
        how = f"was killed by signal {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
        error = {"type": "CommandExited", "message": f"the command {how}"}
    result = rec.finish(status=status, exit_code=code, error=error, final_pss=False, render=render)
    result.exit_code = exit_code
    return result


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal has no name
        return str(number)


def _wait(proc: subprocess.Popen, rec: _Recording, tty: int | None) -> int:
    """Wait for the command, tailing marks; follow job control when it has the terminal."""
    while True:
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG | os.WUNTRACED)
        except ChildProcessError:
            proc.returncode = proc.returncode if proc.returncode is not None else 0
            return proc.returncode
        if pid == 0:
            rec.poll_marks()
            time.sleep(0.2)
            continue
        if os.WIFSTOPPED(status):
            if tty is not None:
                _suspend_with(proc, tty)
            continue
        proc.returncode = os.waitstatus_to_exitcode(status)
        rec.poll_marks()
        return proc.returncode


def _suspend_with(proc: subprocess.Popen, tty: int) -> None:
    """The command was stopped (Ctrl-Z): take the terminal back and stop memprobe too, so the
    shell sees the job stopped; on resume, hand the terminal back if in the foreground."""
    _set_foreground(tty, os.getpgrp())
    os.kill(os.getpid(), signal.SIGSTOP)
    try:
        if os.tcgetpgrp(tty) == os.getpgrp():
            _set_foreground(tty, proc.pid)
    except OSError:
        pass
    _killpg(proc.pid, signal.SIGCONT)


def _drain_group(proc: subprocess.Popen, rec: _Recording) -> list[int]:
    """Give what the command left in its process group a moment to exit by itself, then end it."""
    from memprobe.runner import end_group

    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = procfs.processes_in_group(proc.pid)
    while left and time.monotonic() < deadline:
        rec.poll_marks()
        time.sleep(0.1)
        left = procfs.processes_in_group(proc.pid)
    if left:
        end_group(proc)
    return left


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _install(handler: Callable) -> dict[int, object]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in FORWARDED}


def _restore(old: dict[int, object]) -> None:
    for s, h in old.items():
        signal.signal(s, h)


# -- watch ------------------------------------------------------------------------------------

def watch(pid: int, out: Path | None = None, *, duration: float | None = None, marks_file: Path | None = None,
          settings: SamplerSettings | None = None, verdict: VerdictSpec | None = None, render: bool = True,
          log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)) -> RecordResult:
    """Sample the running process ``pid`` and its whole tree until it exits or ``duration``
    seconds pass (Ctrl-C: stop and save); the process is never signalled."""
    st = procfs.read_stat(pid)
    if st is None or st.state in ("Z", "X"):
        raise UsageError(f"no running process with pid {pid}")
    if pid == os.getpid() or pid in _ancestors(os.getpid()):
        raise UsageError(f"pid {pid} is memprobe itself or one of its parents")
    if procfs.read_pss(pid) is None:
        raise UsageError(f"cannot read /proc/{pid}/smaps_rollup: watch a process of your own user "
                         "(or run memprobe as root)")
    if duration is not None and duration <= 0:
        raise UsageError("--duration must be positive")
    cmd = procfs.read_cmdline(pid)
    name = command_name(cmd) if cmd else _safe(st.comm)
    out = out or default_out_dir("watch", name)
    rec = _Recording(out, "watch", name, f"memprobe watch {pid}: " + " ".join(cmd), settings,
                     verdict or VerdictSpec())
    rec.info = {"command": cmd, "pid": pid}
    env_marks = (_env(pid) or {}).get(MARK_ENV)
    path = marks_file or (Path(env_marks) if env_marks else None)
    if path is not None:
        rec.marks = MarkReader(path, rec.t0, from_end=True)
    rec.start_sampling(pid, pgid=None)
    log(f"memprobe: watching pid {pid} ({' '.join(cmd)[:80]})"
        + (f" for {duration:g} s" if duration else " until it exits") + f" -> {out}"
        + (f"; marks from {path}" if path else ""))
    status, ended = "ok", "exited"
    deadline = None if duration is None else rec.t0 + duration
    try:
        while True:
            now = time.monotonic()
            if not _same_process(pid, st.start_ticks):
                break
            if deadline is not None and now >= deadline:
                ended = "duration"
                break
            rec.poll_marks()
            time.sleep(min(0.2, max(0.0, deadline - now)) if deadline is not None else 0.2)
    except KeyboardInterrupt:
        status, ended = "interrupted", "interrupted"
    rec.info["ended"] = ended
    result = rec.finish(status=status, exit_code=None, error=None, final_pss=ended != "exited", render=render)
    result.exit_code = 130 if status == "interrupted" else 0
    return result


def _same_process(pid: int, start_ticks: int) -> bool:
    st = procfs.read_stat(pid)
    return st is not None and st.state not in ("Z", "X") and st.start_ticks == start_ticks


def _ancestors(pid: int) -> set[int]:
    out: set[int] = set()
    while pid > 1 and len(out) < 256:
        st = procfs.read_stat(pid)
        if st is None:
            break
        pid = st.ppid
        out.add(pid)
    return out
