"""One recording of a job (``record`` or ``watch``) while it runs and at its end
(:class:`Recording`): the results folder and its writer, the sampler, the job's marks
(:class:`~memprobe.record.mark_reader.MarkReader`), the checkpoints of the run's meta, memprobe's own trouble (a write that
fails, the folder gone: sampling stops, the job runs on), and the finish: the meta saved, the
folder summarized and its report written (:class:`RecordResult`). The command's life cycle
around it is :mod:`memprobe.record.command`.

The run's meta (:meth:`Recording.meta`) states what the recorded-job analysis
(:mod:`memprobe.analysis.recorded`) needs: ``milestones.warm`` is the first exact reading of a
worker (or the first exact reading), ``milestones.first_mark`` the first mark,
``milestones.done`` the last mark (or the end); ``start_methods`` counts the workers' start
methods as seen from outside; ``processes`` holds the facts of every process seen
(:class:`~memprobe.probe.ledger.ProcessInfo`).
"""

from __future__ import annotations

import math
import os
import platform
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from memprobe.core.errors import ResultsFolderGone, ResultsWriteError
from memprobe.core.text import printable
from memprobe.core.verdict import VerdictSpec
from memprobe.probe import cgroup, procfs
from memprobe.probe.ledger import first_worker_reading, most_workers
from memprobe.probe.sampler import Row, SamplerSettings
from memprobe.probe.tree_sampler import TreeSampler
from memprobe.record.copies import CopiedStructures
from memprobe.record.mark_reader import MarkReader
from memprobe.results.files import RunWriter, folder_identity
from memprobe.results.folder import ResultsFolder
from memprobe.results.job import node_identity
from memprobe.session.finish import finalize
from memprobe.session.identity import environment, writer_identity

# A recorded job runs for minutes or hours and items/s come from marks, not from the cheap tier:
# 5 cheap rounds a second, and 1 % of a core for the whole sampler (both tiers).
DEFAULT_SETTINGS = SamplerSettings(interval_s=0.2, pss_cpu_budget=0.01)
# The run's meta is saved this often while recording (status "running"): a memprobe killed
# outright (SIGKILL, the OOM killer) leaves a run that `memprobe report DIR` finishes from what
# was sampled. Without it the folder held the samples but no run record, and the report was empty.
# Less often where a save takes longer (a job that started thousands of workers over its epochs
# has as many entries in its process list): saving takes at most 1/CHECKPOINT_SPACING of the time.
CHECKPOINT_S = 2.0
CHECKPOINT_SPACING = 200


# -- naming -----------------------------------------------------------------------------------

_WRAPPERS = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|torchrun|accelerate|deepspeed|uv|poetry|pipenv|conda|"
    r"env|nohup|time|nice|taskset|numactl|srun|mpirun)$"
)


def command_name(argv: list[str]) -> str:
    """A short name for a command: the script's stem for ``python train.py``, the module for
    ``python -m pkg.train``, else the program's name."""
    for i, arg in enumerate(argv):
        base = os.path.basename(arg)
        if arg == "-m" and i + 1 < len(argv):
            return safe_name(argv[i + 1].rsplit(".", 1)[-1])
        if base.endswith(".py"):
            return safe_name(base[:-3])
        if i == 0 and not _WRAPPERS.match(base):
            return safe_name(base)
    return safe_name(os.path.basename(argv[0])) if argv else "command"


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:40] or "command"


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
    # What the user must know besides the table: lines that were not marks, sampling stopped by
    # a write error and what was kept, processes that outlived the command.
    notes: list[str] = field(default_factory=list)
    outlived: list[dict] = field(default_factory=list)  # pid, command: still running at the end
    saved: bool = True  # False: the results could not be finished (notes say what was kept)


class Observer(Protocol):
    """What follows a recording as it runs (``memprobe top``'s live view,
    :mod:`memprobe.cli.top`): the sampler's rows as they are written (from the sampler's thread),
    each poll of the recording (from the main thread, every 0.2 s or so), and its end. It must
    not raise: memprobe's own trouble never stops the sampling."""

    def rows(self, table: str, rows: list[Row]) -> None: ...

    def poll(self, recording: Recording) -> None: ...

    def suspend(self) -> None: ...  # the job and memprobe are stopped (Ctrl-Z): the terminal given back

    def resume(self) -> None: ...  # in the foreground again (fg)

    def close(self) -> None: ...


class Recording:
    """The part shared by record and watch: writer, sampler, marks, meta and the final save.

    memprobe's own trouble never reaches the job it observes: a write that fails (a full disk,
    the results folder deleted or moved) or a sampler that dies stops the sampling, once, with a
    message; the job runs on (``record`` waits for it and passes its exit code through) and the
    end says exactly what was kept (:meth:`finish`)."""

    def __init__(
        self,
        out: Path | None,
        kind: str,
        name: str,
        description: str,
        settings: SamplerSettings | None,
        verdict: VerdictSpec,
        log: Callable[[str], None],
    ) -> None:
        self.folder = ResultsFolder.create(
            out,
            kind=kind,
            name=f"{kind}-{name}",
            description=description,
            environment=environment(),
            runs=[name],
            writer=writer_identity(),
        )
        self.out, self.kind, self.name = self.folder.root, kind, name
        self.identity = folder_identity(self.out)
        self.run_id = name
        self.run_dir = self.out / "runs" / self.run_id
        self.writer = RunWriter(self.run_dir)
        self.settings = settings or DEFAULT_SETTINGS
        self.verdict = verdict
        self.log = log
        self.started_wall = time.time()
        self.t0 = time.monotonic()
        self.sampler: TreeSampler | None = None
        self.marks: MarkReader | None = None
        self.copies: CopiedStructures | None = None  # which structures workers copied (mark_dataset)
        self.info: dict = {}
        self._next_save = -math.inf
        # Sampling stopped before the end (a write error, the folder gone, the sampler's own
        # error): why, when, and what was saved until then.
        self.stopped: str | None = None
        self.stopped_t: float | None = None
        self.folder_gone = False
        self.saved_t: float | None = None  # the latest tick whose sample rows were written
        self.outlived: list[dict] = []  # processes of the tree still running when the command ended
        self.meta_saved_t: float | None = None  # when the run's meta was last saved
        self.observer: Observer | None = None  # a live view (memprobe top, record --live)

    def start_sampling(self, root: int, pgid: int | None) -> None:
        self.root = root
        self.sampler = TreeSampler(root, self._sink, self.settings, t0=self.t0, pgid=pgid)
        self.sampler.start()

    def _sink(self, table: str, rows: list[Row]) -> None:
        self.writer.append(table, rows)  # a ResultsWriteError ends the sampler; poll() tells
        if table == "samples" and rows:
            self.saved_t = float(rows[-1]["t"])
        if self.observer is not None:
            self.observer.rows(table, rows)

    def poll_marks(self) -> None:
        if self.marks is not None and self.stopped is None:
            self.writer.append("progress", self.marks.poll())
            if self.copies is None:
                self.copies = CopiedStructures(self.marks.path, getattr(self, "root", None))
            self.copies.poll()

    def poll(self) -> None:
        """Tail the marks; every CHECKPOINT_S or so, save the run's meta as it stands. A write
        that fails, a results folder that is gone or a sampler that died stop the sampling
        (:meth:`stop_sampling`); nothing here raises."""
        if self.observer is not None:
            self.observer.poll(self)
        if self.stopped is not None:
            return
        try:
            if folder_identity(self.out) != self.identity:
                self.folder_gone = True
                raise ResultsFolderGone(self.out)
            self.poll_marks()
            if self.sampler is not None and self.sampler.error is not None:
                raise self.sampler.error
            now = time.monotonic()
            if self.sampler is not None and now >= self._next_save:
                self.writer.write_meta(self.meta("running", None, None))
                self.meta_saved_t = round(now - self.t0, 1)
                took = time.monotonic() - now
                self._next_save = now + max(CHECKPOINT_S, CHECKPOINT_SPACING * took)
        except Exception as exc:  # noqa: BLE001  (memprobe's trouble never reaches the job)
            self.stop_sampling(exc)

    def stop_sampling(self, exc: BaseException) -> None:
        """Sampling ends here, once, with one line saying why; the job is not touched."""
        if self.stopped is not None:
            return
        self.stopped = why = self._why(exc)
        if self.sampler is not None:
            self.sampler.stop(final_pss=False)  # its last round (if it still runs) comes before this
        # To the samples' precision (their t has 4 decimals): at 3, a sample taken 0.04 ms
        # before the stop (2.0271 s) read as after it (2.027 s).
        self.stopped_t = round(time.monotonic() - self.t0, 4)
        self.writer.close()
        goes_on = (
            "the command runs on; memprobe waits for it and exits with its exit code"
            if self.kind == "record"
            else "the watched process was not touched"
        )
        self.log(f"memprobe: {why}: sampling stopped at {self.stopped_t:.1f} s; {goes_on}")

    def _why(self, exc: BaseException) -> str:
        if isinstance(exc, ResultsFolderGone) or folder_identity(self.out) != self.identity:
            self.folder_gone = True
            return f"the results folder {printable(str(self.out))} was deleted or moved"
        if isinstance(exc, ResultsWriteError):
            return f"cannot write {printable(str(exc.path))}: {os.strerror(exc.errno or 0)}"
        return f"the sampler failed: {printable(repr(exc))}"

    def outside_group(self, pgid: int) -> list[dict]:
        """Processes the sampler has seen in the tree (the command excepted) that still run,
        outside the process group ``pgid``: pid, comm, command line and role."""
        s = self.sampler
        if s is None:
            return []
        out = []
        for p in s.process_list():
            pid = p["pid"]
            node = s.roles.nodes.get(pid)
            st = procfs.read_stat(pid)
            if (
                pid != self.root
                and node is not None
                and st is not None
                and st.state not in ("Z", "X")
                and st.start_ticks == node.start_ticks
                and st.pgid != pgid
            ):
                command = " ".join(procfs.read_cmdline(pid))
                out.append({"pid": pid, "comm": st.comm, "command": command, "role": p["role"]})
        return out

    def _outside_tree(self) -> str | None:
        """The processes first seen outside the tree (found in the job's process group, their
        parent gone: a daemon's double fork, an orphan), in words, or None."""
        s = self.sampler
        if s is None:
            return None
        procs = s.process_list()
        seen = {p["pid"] for p in procs}
        outside = [p for p in procs if p["pid"] != self.root and p["ppid"] not in seen]
        if not outside:
            return None
        listed = ", ".join(
            f"pid {p['pid']} ({printable(p['command'] or p['role'])[:60]})" for p in outside[:5]
        )
        more = f" and {len(outside) - 5} more" if len(outside) > 5 else ""
        return (
            f"memprobe: {len(outside)} process(es) found outside the process tree of pid {self.root}, "
            f"in its process group (their parent had exited: a daemon's double fork, an orphan), "
            f"measured as part of the job: {listed}{more}"
        )

    def kept(self) -> str:
        """What a stopped recording left on disk, in words."""
        if self.folder_gone:
            return (
                "nothing could be saved; if it was moved, what was sampled until then is where it "
                "went, and `memprobe report` on it there finishes it"
            )
        upto = f"the samples until {self.saved_t:.1f} s" if self.saved_t is not None else "no samples"
        meta = (
            f"the run's record as saved at {self.meta_saved_t:.1f} s"
            if self.meta_saved_t is not None
            else "no run record"
        )
        return (
            f"kept in {printable(str(self.out))}: {upto} and {meta}; free some space and run "
            f"`memprobe report {printable(str(self.out))}` to finish the folder and write its report"
        )

    def finish(
        self,
        *,
        status: str,
        exit_code: int | None,
        error: dict | None,
        final_pss: bool,
        render: bool,
        signals: list[str] | None = None,
    ) -> RecordResult:
        """Save the run and finish the folder (summary, report). When sampling stopped early or
        saving fails now, the result says what was kept instead of raising."""
        assert self.sampler is not None
        if self.observer is not None:  # the live view ends: what follows is said on the terminal
            self.observer.close()
        notes = [n for n in (self.marks.note() if self.marks else None, self._outside_tree()) if n]
        if self.stopped is None:
            self.sampler.stop(final_pss=final_pss)
            try:
                self.poll_marks()
            except ResultsWriteError as exc:
                self.stop_sampling(exc)
        if self.folder_gone:
            notes.append(f"memprobe: {self.stopped}; {self.kept()}")
            return RecordResult(self.out, [], None, 0, status, [], self.kind, notes, saved=False)
        meta = self.meta(status, exit_code, error)
        if self.stopped is not None:
            meta["sampling_stopped"] = {"t": self.stopped_t, "reason": self.stopped}
        try:
            self.writer.write_meta(meta)
            self.writer.close()
            if self.copies is not None:
                self.copies.discard()  # the maps' table is in the meta now
            session = finalize(
                self.folder,
                "interrupted" if status == "interrupted" else "complete",
                render=render,
                **({"signals": signals} if signals else {}),
            )
        except ResultsWriteError as exc:
            self.writer.close()
            why = self.stopped or self._why(exc)
            notes.append(f"memprobe: {why}; the results could not be finished; {self.kept()}")
            return RecordResult(self.out, [], None, 0, status, [], self.kind, notes, saved=False)
        if self.stopped is not None:
            notes.append(
                f"memprobe: {self.stopped}: sampling stopped at {self.stopped_t:.1f} s; "
                f"the results cover the job until then"
            )
        # The per-process table is the analysis's (summarize() of a record/watch run).
        processes = list(getattr(session.summaries[0], "processes", None) or []) if session.summaries else []
        return RecordResult(
            self.out, session.summaries, session.report, 0, status, processes, self.kind, notes
        )

    def meta(self, status: str, exit_code: int | None, error: dict | None) -> dict:
        """The run's record (meta.json) as it stands: saved every checkpoint and at the end."""
        s = self.sampler
        assert s is not None
        elapsed = time.monotonic() - self.t0
        m = self.marks
        milestones: dict[str, float] = {}
        processes = s.process_list()  # as the tree classifies them last (a program is no worker)
        first_worker = first_worker_reading(processes)
        warm = first_worker if first_worker is not None else s.first_pss_t
        if warm is not None:
            milestones["warm"] = warm
        if m is not None and m.first_t is not None and m.last_t is not None:  # set together
            milestones["first_mark"] = m.first_t
            milestones["done"] = max(m.last_t, warm or 0.0)
        elif s.last_t is not None:
            milestones["done"] = s.last_t
        methods = s.roles.start_methods
        return {
            "run_id": self.run_id,
            "index": 0,
            "kind": self.kind,
            "status": status,
            "error": error,
            "items": m.items if m else 0,
            "batches": m.batches if m else 0,
            "milestones": milestones,
            "marks_recorded": bool(m and m.batches),
            "started": self.started_wall,
            "elapsed_s": round(elapsed, 3),
            "exit_code": exit_code,
            "sampler": s.stats(elapsed),
            "dataset_info": self.copies.info() if self.copies is not None else {},
            "root_pid": self.root,
            "ranks": {str(r): pid for pid, r in sorted(s.roles.ranks.items(), key=lambda x: x[1])},
            "start_methods": dict(methods),
            "processes": processes,
            # Still running when the command ended: they left its process group (setsid, ...).
            "outlived": self.outlived,
            # What the analysis needs (memprobe.analysis.recorded): the workers' most common start
            # method as seen from outside (None: no worker appeared), the most alive at once,
            # and the verdict's threshold; then how it was sampled, and the command (record:
            # its argv; watch: the process's command line, its pid, how the watch ended).
            "start_method": methods.most_common(1)[0][0] if methods else None,
            "max_workers": most_workers(processes),
            "verdict": asdict(self.verdict),
            "sampling": asdict(self.settings),
            **self.cgroup_meta(),
            # Which node of a multi-node job this is (memprobe.results.job): host, node rank, scheduler ids.
            "node": node_identity(os.environ, self.info.get("command") or [], platform.node()),
            **self.info,
        }

    def cgroup_meta(self) -> dict:
        """The job's memory cgroup now (the sampler's: where the job moved into another as it
        started, that one), with its charge and OOM kills as the job started or entered it, and
        when that was (``since_t``: 0 from the start)."""
        entered = self.sampler.cgroup if self.sampler is not None else None
        if entered is None:
            return {}
        now = cgroup.read(entered.where).to_dict()
        start = entered.at_entry.to_dict()
        others = self.sampler.cgroup_others if self.sampler is not None else None
        mb = lambda b: round(b / 2**20, 1)  # noqa: E731
        return {
            "cgroup": now
            | {
                "usage_at_start_mb": start["usage_mb"],
                "oom_kills_at_start": start["oom_kills"],
                "since_t": entered.t,
            }
            | (
                {
                    # Its other processes at their largest reading (cgroup.others; None: not read).
                    "others": {
                        "processes": others.processes,
                        "rss_mb": mb(others.rss_bytes),
                        "largest": [
                            {"name": name, "pid": pid, "rss_mb": mb(rss)} for name, pid, rss in others.largest
                        ],
                    }
                }
                if others is not None
                else {}
            )
        }
