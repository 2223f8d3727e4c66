"""Profile a user's own command (``memprobe record``) or a running process (``memprobe watch``):
the command's life cycle.

``record`` starts the command in its own process group (handing it the terminal when memprobe
has it), forwards stop signals to that group, waits for it, ends what it leaves behind, and
saves; ``watch`` follows a running process until it exits, a duration ends, or Ctrl-C. What
happens to the process tree meanwhile (classification, exact readings where memory moves) is
:mod:`memprobe.probe.tree` and :mod:`memprobe.probe.tree_sampler`.

* exact readings at the end: on SIGINT/SIGTERM/SIGHUP, ``record`` asks the sampler for a full
  exact round (bounded by ``SIGNAL_ROUND_S``) *before* forwarding the signal, so every live
  process has a reading taken just before the command reacts; ``watch`` takes one when it stops.
* marks: ``record`` sets ``MEMPROBE_MARK_FILE`` for the command; :func:`memprobe.mark`
  appends ``<monotonic s> <n> <pid>`` lines to it, which become the progress table (items/s).
  ``watch`` reads the file named by ``--marks``, or by the process's own ``MEMPROBE_MARK_FILE``.

The meta is shaped for the recorded-job analysis (:mod:`memprobe.record.summary`): ``spec.mode`` is the workers' start
method as seen from outside (fork, spawn, forkserver), or ``record``/``watch`` when no worker
appeared; ``spec.workers`` is the most workers alive at once; ``milestones.warm`` is the first
exact reading of a worker (or the first exact reading), ``milestones.first_mark`` the first mark,
``milestones.done`` the last mark (or the end);
``processes`` holds the facts of every process seen (:class:`~memprobe.probe.tree_sampler.ProcessInfo`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from memprobe.cli.flags import bounded
from memprobe.core.errors import MemprobeError, ResultsWriteError, UsageError
from memprobe.core.text import printable
from memprobe.core.vocabulary import shell_exit_code, signal_name
from memprobe.probe import procfs
from memprobe.probe.sampler import Row, SamplerSettings
from memprobe.probe.tree import ProcfsReader
from memprobe.probe.tree_sampler import TreeSampler
from memprobe.results.folder import ResultsFolder, RunWriter
from memprobe.run.runner import (
    OWN_PROCESS_GROUP,
    ResultsFolderGone,
    StopSignals,
    end_group,
    environment,
    folder_identity,
)
from memprobe.run.scenario import VerdictSpec
from memprobe.run.session import finalize

MARK_ENV = "MEMPROBE_MARK_FILE"
LEFTOVER_GRACE_S = 3.0
# A recorded job runs for minutes or hours and items/s come from marks, not from the cheap tier:
# 5 cheap rounds a second, and 1 % of a core for the whole sampler (both tiers).
DEFAULT_SETTINGS = SamplerSettings(interval_s=0.2, pss_cpu_budget=0.01)
# The exact round taken when a stop signal arrives, before it is forwarded: long enough for
# ~50 processes of 700 MB on a loaded machine, short enough not to keep a user waiting.
SIGNAL_ROUND_S = 1.5
# The run's meta is saved this often while recording (status "running"): a memprobe killed
# outright (SIGKILL, the OOM killer) leaves a run that `memprobe report DIR` finishes from what
# was sampled. Without it the folder held the samples but no run record, and the report was empty.
# Less often where a save takes longer (a job that started thousands of workers over its epochs
# has as many entries in its process list): saving takes at most 1/CHECKPOINT_SPACING of the time.
CHECKPOINT_S = 2.0
CHECKPOINT_SPACING = 200


class CommandNotFound(MemprobeError):
    exit_code = 127


# -- marks ------------------------------------------------------------------------------------


class MarkReader:
    """Tails a mark file: ``<monotonic s> <n> <pid>`` lines, a torn last line kept for later."""

    def __init__(self, path: Path, t0: float, *, from_end: bool = False) -> None:
        self.path = path
        self.t0 = t0
        self.offset = 0
        if from_end:
            with contextlib.suppress(OSError):
                self.offset = path.stat().st_size
        self._buf = b""
        self.items = 0
        self.batches = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.ignored = 0  # lines that are not marks (written by something else than memprobe.mark)
        self.first_ignored: str | None = None

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
                mono, n = math.nan, -1
            if not (math.isfinite(mono) and n >= 0):  # NaN would become a time no table can join on
                if line.strip():
                    self.ignored += 1
                    if self.first_ignored is None:
                        self.first_ignored = printable(line[:80].decode("utf-8", "replace"))
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

    def note(self) -> str | None:
        """What was ignored, in words (for the terminal), or None."""
        if not self.ignored:
            return None
        return (
            f"memprobe: {printable(str(self.path))}: {self.ignored:,} line(s) ignored that are not marks "
            f"('<monotonic seconds> <items> <pid>', as memprobe.mark() writes them), the first: "
            f"'{self.first_ignored}'; items/s count the {self.batches:,} marks read"
        )


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
            return _safe(argv[i + 1].rsplit(".", 1)[-1])
        if base.endswith(".py"):
            return _safe(base[:-3])
        if i == 0 and not _WRAPPERS.match(base):
            return _safe(base)
    return _safe(os.path.basename(argv[0])) if argv else "command"


def _safe(name: str) -> str:
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


class _Recording:
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

    def start_sampling(self, root: int, pgid: int | None) -> None:
        self.root = root
        self.sampler = TreeSampler(root, self._sink, self.settings, t0=self.t0, pgid=pgid)
        self.sampler.start()

    def _sink(self, table: str, rows: list[Row]) -> None:
        self.writer.append(table, rows)  # a ResultsWriteError ends the sampler; poll() tells
        if table == "samples" and rows:
            self.saved_t = float(rows[-1]["t"])

    def poll_marks(self) -> None:
        if self.marks is not None and self.stopped is None:
            self.writer.append("progress", self.marks.poll())

    def poll(self) -> None:
        """Tail the marks; every CHECKPOINT_S or so, save the run's meta as it stands. A write
        that fails, a results folder that is gone or a sampler that died stop the sampling
        (:meth:`stop_sampling`); nothing here raises."""
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
                self.writer.write_meta(self._meta("running", None, None))
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
        self.stopped_t = round(time.monotonic() - self.t0, 3)
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
        meta = self._meta(status, exit_code, error)
        if self.stopped is not None:
            meta["sampling_stopped"] = {"t": self.stopped_t, "reason": self.stopped}
        try:
            self.writer.write_meta(meta)
            self.writer.close()
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

    def _meta(self, status: str, exit_code: int | None, error: dict | None) -> dict:
        s = self.sampler
        assert s is not None
        elapsed = time.monotonic() - self.t0
        m = self.marks
        milestones: dict[str, float] = {}
        warm = s.first_worker_pss_t if s.first_worker_pss_t is not None else s.first_pss_t
        if warm is not None:
            milestones["warm"] = warm
        if m is not None and m.first_t is not None and m.last_t is not None:  # set together
            milestones["first_mark"] = m.first_t
            milestones["done"] = max(m.last_t, warm or 0.0)
        elif s.last_t is not None:
            milestones["done"] = s.last_t
        methods = s.roles.start_methods
        mode = methods.most_common(1)[0][0] if methods else self.kind
        spec = {
            "run_id": self.run_id,
            "backend": self.name,
            "mode": mode,
            "workers": s.max_workers,
            "workload": self.kind,
            "verdict": asdict(self.verdict),
            "expect": None,
            "timeout_s": None,
            "sampling": asdict(self.settings),
            **self.info,
        }
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
            "dataset_info": {},
            "root_pid": self.root,
            "ranks": {str(r): pid for pid, r in sorted(s.roles.ranks.items(), key=lambda x: x[1])},
            "start_methods": dict(methods),
            "processes": s.process_list(),
            # Still running when the command ended: they left its process group (setsid, ...).
            "outlived": self.outlived,
            "spec": spec,
        }


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


def record(
    command: list[str],
    out: Path | None = None,
    *,
    settings: SamplerSettings | None = None,
    verdict: VerdictSpec | None = None,
    render: bool = True,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> RecordResult:
    """Run ``command`` with inherited stdin/stdout/stderr, sample its whole process tree until
    it exits, save and summarize. ``exit_code`` is the command's (128+N if killed by signal N;
    128+N too if memprobe itself got signal N, which it forwards to the command's group).

    The command runs in its own process group; when memprobe has the terminal, that group is
    made the terminal's foreground group, so Ctrl-C, Ctrl-Z and reading stdin behave as if the
    command ran alone (memprobe takes the terminal back when it ends or stops).

    memprobe's own trouble (a full disk, the results folder deleted) stops the sampling, never
    the command: it runs to its end and its exit code passes through; ``notes`` say what was
    kept. What the command leaves in its process group is ended after LEFTOVER_GRACE_S; what
    left the group (``setsid``, ``start_new_session=True``, a shell's job control) is not, as a
    shell would not end it: it is named in ``outlived`` and in the meta."""
    if not command:
        raise UsageError("no command given: memprobe record [-o DIR] -- COMMAND [ARGS...]")
    if shutil.which(command[0]) is None:
        raise CommandNotFound(f"{printable(command[0])}: command not found (or not executable)")
    name = command_name(command)
    existed = out is not None and out.exists()
    rec = _Recording(
        out,
        "record",
        name,
        "memprobe record: " + " ".join(command),
        settings,
        verdict or VerdictSpec(),
        log,
    )
    out = rec.out
    mark_path = rec.run_dir / "marks.txt"
    try:
        mark_path.touch()
    except OSError as exc:  # the command has not started: a plain error (a full disk)
        rec.writer.close()
        raise ResultsWriteError(mark_path, exc) from None
    rec.marks = MarkReader(mark_path, rec.t0)
    rec.info = {"command": command}
    env = {**os.environ, MARK_ENV: str(mark_path.resolve())}
    tty = _foreground_tty()
    got: list[int] = []
    sent = [0]  # how many of ``got`` went to the command's group
    proc: subprocess.Popen | None = None

    def forward(signum: int, frame: object) -> None:
        got.append(signum)
        if proc is None:
            return
        if len(got) == 1 and rec.sampler is not None and rec.stopped is None:
            # Every live process's last exact reading, taken before the command reacts to the
            # signal (workers exit at once on it). A second signal meanwhile is forwarded at once.
            rec.sampler.request_pss(wait_s=SIGNAL_ROUND_S)
        forward_pending()

    def forward_pending() -> None:
        # Not once the command is reaped: its group's id may be another program's by then.
        while proc is not None and proc.returncode is None and sent[0] < len(got):
            i = sent[0]
            sent[0] += 1
            n = sum(1 for s in got[: i + 1] if s == signal.SIGINT) if got[i] == signal.SIGINT else 1
            _killpg(proc.pid, got[i] if n == 1 else (signal.SIGTERM if n == 2 else signal.SIGKILL))

    old = _install(forward)
    try:
        try:
            if tty is None:
                proc = subprocess.Popen(command, env=env, **OWN_PROCESS_GROUP)
            else:
                # The terminal's foreground group must be set in the child, before exec; only os calls.
                proc = subprocess.Popen(command, env=env, preexec_fn=_child_setup(tty))  # noqa: PLW1509
        except OSError as exc:
            # Nothing ran, nothing was recorded: the folder goes (an empty one given with -o stays).
            rec.writer.close()
            _remove(rec.out, keep_folder=existed)
            refused = CannotRun(f"{printable(command[0])}: cannot run: {_cannot_run(command[0], exc)}")
            refused.exit_code = 127 if exc.errno == errno.ENOENT else 126  # as bash says them
            raise refused from None
        forward_pending()  # a signal that arrived before the command existed
        rec.start_sampling(proc.pid, pgid=proc.pid)
        log(f"memprobe: recording {printable(' '.join(command))} (pid {proc.pid}) -> {printable(str(out))}")
        _wait(proc, rec, tty)
        if tty is not None:
            _set_foreground(tty, os.getpgrp())
        left, outlived = _drain_group(proc, rec)
        if left:
            log(
                f"memprobe: ended {len(left)} process(es) the command left behind: {', '.join(map(str, left))}"
            )
        if outlived:
            rec.outlived = outlived
            log(_outlived_words(outlived))
    except BaseException:
        if proc is not None:
            if tty is not None:
                _set_foreground(tty, os.getpgrp())
            end_group(proc)
        if rec.sampler is not None:
            rec.sampler.stop(final_pss=False)
        rec.writer.close()
        raise
    finally:
        _restore(old)
    code = proc.returncode
    exit_code = shell_exit_code(code)
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
        how = f"was killed by {_signal_words(-code)}" if code < 0 else f"exited with code {code}"
        error = {"type": "CommandExited", "message": f"the command {how}"}
    result = rec.finish(status=status, exit_code=code, error=error, final_pss=False, render=render)
    result.exit_code = exit_code
    result.outlived = rec.outlived
    return result


class CannotRun(MemprobeError):
    """The command exists but cannot be executed (126), or its ``#!`` interpreter does not (127)."""

    exit_code = 126


def _cannot_run(program: str, exc: OSError) -> str:
    """Why exec failed, in words: a script whose ``#!`` interpreter does not exist fails with
    ENOENT although the script itself does."""
    path = shutil.which(program)
    if exc.errno == errno.ENOENT and path:
        with contextlib.suppress(OSError), open(path, "rb") as f:
            first = f.readline(256)
            if first.startswith(b"#!"):
                words = first[2:].split()
                interpreter = os.fsdecode(words[0]) if words else ""
                return f"its interpreter {printable(interpreter)!r} (the #! line) does not exist"
    return printable(exc.strerror or str(exc))


def _remove(folder: Path, *, keep_folder: bool) -> None:
    """Remove a results folder memprobe has just created and that holds nothing recorded."""
    if keep_folder:
        for child in folder.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)


def _outlived_words(outlived: list[dict]) -> str:
    pids = " ".join(str(p["pid"]) for p in outlived)
    listed = "; ".join(f"pid {p['pid']}: {printable(p['command'] or p['comm'])}" for p in outlived)
    return (
        f"memprobe: {len(outlived)} process(es) the command started still run: {listed}. They left "
        "its process group (setsid, start_new_session=True, a shell's job control), as a daemon "
        f"does; memprobe does not end them, as a shell would not (to end them: kill {pids})"
    )


def _signal_words(number: int) -> str:
    """'signal SIGTERM', 'signal 34'."""
    name = signal_name(number)
    return name if name.startswith("signal ") else f"signal {name}"


def _wait(proc: subprocess.Popen, rec: _Recording, tty: int | None) -> None:
    """Wait for the command to exit, tailing marks; follow job control when it has the terminal.
    The command is not reaped here (``WNOWAIT``): until _drain_group reaps it, its pid, the id of
    its process group, cannot be given to another process (see runner.end_group)."""
    while True:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already
            return
        if info is None:
            rec.poll()
            time.sleep(0.2)
            continue
        if info.si_code == os.CLD_STOPPED:
            os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WNOHANG)  # take the stop, leave the exit
            if tty is not None:
                _suspend_with(proc, tty)
            continue
        rec.poll()
        return


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


def _drain_group(proc: subprocess.Popen, rec: _Recording) -> tuple[list[int], list[dict]]:
    """Give what the command left in its process group, and the processes of its tree that
    left the group, a moment to exit by themselves; then end what is left in the group and
    reap the command last (its exit status is ``proc.returncode`` then). The command unreaped,
    what is in its group is what it left, not a later program's group that took the same id.
    Returns the group's leftovers (ended) and those outside the group still running (not)."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = procfs.processes_in_group(proc.pid)
    outside = rec.outside_group(proc.pid)
    while (left or outside) and time.monotonic() < deadline:
        rec.poll()
        time.sleep(0.1)
        left = procfs.processes_in_group(proc.pid)
        outside = rec.outside_group(proc.pid)
    if left:
        end_group(proc)
    else:
        proc.wait()
    return left, outside


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# What signal.signal returns and takes back.
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _install(handler: Callable) -> dict[int, _Handler]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in FORWARDED}


def _restore(old: dict[int, _Handler]) -> None:
    for s, h in old.items():
        signal.signal(s, h)


# -- watch ------------------------------------------------------------------------------------


def watch(
    pid: int,
    out: Path | None = None,
    *,
    duration: float | None = None,
    marks_file: Path | None = None,
    settings: SamplerSettings | None = None,
    verdict: VerdictSpec | None = None,
    render: bool = True,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> RecordResult:
    """Sample the running process ``pid`` and its whole tree until it exits or ``duration``
    seconds pass; the process is never signalled. SIGINT, SIGTERM and SIGHUP stop the watch the
    way they stop ``run`` and ``record``: what was sampled is saved, the report written, and
    ``exit_code`` is 128 + the first signal's number."""
    st = procfs.read_stat(pid)
    if st is None or st.state in ("Z", "X"):
        raise UsageError(f"no running process with pid {pid}")
    tgid = _thread_group(pid)
    if tgid is not None and tgid != pid:
        owner = printable(" ".join(procfs.read_cmdline(tgid)) or st.comm)[:80]
        raise UsageError(
            f"{pid} is a thread of process {tgid} ({owner}), not a process: memprobe watch {tgid}"
        )
    if pid == os.getpid() or pid in _ancestors(os.getpid()):
        raise UsageError(f"pid {pid} is memprobe itself or one of its parents")
    if procfs.read_pss(pid) is None:
        raise UsageError(
            f"cannot read /proc/{pid}/smaps_rollup: watch a process of your own user "
            "(or run memprobe as root)"
        )
    if duration is not None:
        bounded("--duration", duration, 0, above=True, unit="seconds")
    cmd = procfs.read_cmdline(pid)
    name = command_name(cmd) if cmd else _safe(st.comm)
    rec = _Recording(
        out,
        "watch",
        name,
        f"memprobe watch {pid}: " + " ".join(cmd),
        settings,
        verdict or VerdictSpec(),
        log,
    )
    out = rec.out
    rec.info = {"command": cmd, "pid": pid}
    env_marks = (ProcfsReader().environ(pid) or {}).get(MARK_ENV)
    path = marks_file or (Path(env_marks) if env_marks else None)
    if path is not None:
        rec.marks = MarkReader(path, rec.t0, from_end=True)
    # A group leader's group holds what left its tree without leaving the group (a child that
    # forked and exited: an orphan, re-parented to init): the sampler finds them there too.
    rec.start_sampling(pid, pgid=pid if st.pgid == pid else None)
    log(
        f"memprobe: watching pid {pid} ({printable(' '.join(cmd))[:80]})"
        + (f" for {duration:g} s" if duration else " until it exits")
        + f" -> {printable(str(out))}"
        + (f"; marks from {printable(str(path))}" if path else "")
    )
    status, ended = "ok", "exited"
    deadline = None if duration is None else rec.t0 + duration
    with StopSignals(FORWARDED) as stop:
        while True:
            now = time.monotonic()
            if stop.received:
                status, ended = "interrupted", signal_name(stop.received[0])
                log(f"memprobe: {ended}: stopping; saving what was sampled (a few seconds)")
                break
            if not _same_process(pid, st.start_ticks):
                break
            if deadline is not None and now >= deadline:
                ended = "duration"
                break
            if rec.stopped is not None:  # a write error: nothing more can be saved
                status, ended = "failed", "error"
                break
            rec.poll()
            wait = min(0.2, max(0.0, deadline - now)) if deadline is not None else 0.2
            fd = stop.fileno()
            if fd is None:
                time.sleep(wait)
            else:
                select.select([fd], [], [], wait)
        rec.info["ended"] = ended
        result = rec.finish(
            status=status,
            exit_code=None,
            error=None,
            final_pss=ended not in ("exited", "error"),
            render=render,
            signals=[signal_name(s) for s in stop.received],
        )
    if stop.received:
        result.exit_code = 128 + stop.received[0]
    elif status == "failed" or not result.saved:
        result.exit_code = 1
    else:
        result.exit_code = 0
    return result


def _thread_group(pid: int) -> int | None:
    """The process a task id belongs to (its ``Tgid``): ``pid`` itself for a process, another
    for a thread (``/proc/TID`` exists for threads too, unlisted)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


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
