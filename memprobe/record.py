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

The meta is shaped for :func:`memprobe.analysis.summarize`: ``spec.mode`` is the workers' start
method as seen from outside (fork, spawn, forkserver), or ``record``/``watch`` when no worker
appeared; ``spec.workers`` is the most workers alive at once; ``milestones.warm`` is the first
exact reading of a worker (or the first exact reading), ``milestones.first_mark`` the first mark,
``milestones.done`` the last mark (or the end);
``processes`` holds the facts of every process seen (:class:`~memprobe.probe.tree_sampler.ProcessInfo`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
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

from memprobe.errors import MemprobeError, UsageError
from memprobe.probe import procfs
from memprobe.probe.sampler import Row, SamplerSettings
from memprobe.probe.tree import ProcfsReader
from memprobe.probe.tree_sampler import TreeSampler
from memprobe.results import ResultsFolder, RunWriter
from memprobe.runner import OWN_PROCESS_GROUP, end_group, environment
from memprobe.scenario import VerdictSpec
from memprobe.session import finalize
from memprobe.vocabulary import shell_exit_code, signal_name

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


class _Recording:
    """The part shared by record and watch: writer, sampler, marks, meta and the final save."""

    def __init__(
        self,
        out: Path | None,
        kind: str,
        name: str,
        description: str,
        settings: SamplerSettings | None,
        verdict: VerdictSpec,
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
        self.run_id = name
        self.run_dir = self.out / "runs" / self.run_id
        self.writer = RunWriter(self.run_dir)
        self.settings = settings or DEFAULT_SETTINGS
        self.verdict = verdict
        self.started_wall = time.time()
        self.t0 = time.monotonic()
        self.sampler: TreeSampler | None = None
        self.marks: MarkReader | None = None
        self.info: dict = {}
        self._next_save = -math.inf

    def start_sampling(self, root: int, pgid: int | None) -> None:
        self.root = root
        self.sampler = TreeSampler(root, self.writer.append, self.settings, t0=self.t0, pgid=pgid)
        self.sampler.start()

    def poll_marks(self) -> None:
        if self.marks is not None:
            self.writer.append("progress", self.marks.poll())

    def poll(self) -> None:
        """Tail the marks; every CHECKPOINT_S or so, save the run's meta as it stands."""
        self.poll_marks()
        now = time.monotonic()
        if self.sampler is not None and now >= self._next_save:
            self.writer.write_meta(self._meta("running", None, None))
            took = time.monotonic() - now
            self._next_save = now + max(CHECKPOINT_S, CHECKPOINT_SPACING * took)

    def finish(
        self, *, status: str, exit_code: int | None, error: dict | None, final_pss: bool, render: bool
    ) -> RecordResult:
        assert self.sampler is not None
        self.sampler.stop(final_pss=final_pss)
        self.poll_marks()
        meta = self._meta(status, exit_code, error)
        self.writer.write_meta(meta)
        self.writer.close()
        session = finalize(
            self.folder, "interrupted" if status == "interrupted" else "complete", render=render
        )
        # The per-process table is the analysis's (summarize() of a record/watch run).
        processes = list(getattr(session.summaries[0], "processes", None) or []) if session.summaries else []
        return RecordResult(self.out, session.summaries, session.report, 0, status, processes, self.kind)

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
    command ran alone (memprobe takes the terminal back when it ends or stops)."""
    if not command:
        raise UsageError("no command given: memprobe record [-o DIR] -- COMMAND [ARGS...]")
    if shutil.which(command[0]) is None:
        raise CommandNotFound(f"{command[0]}: command not found (or not executable)")
    name = command_name(command)
    rec = _Recording(
        out, "record", name, "memprobe record: " + " ".join(command), settings, verdict or VerdictSpec()
    )
    out = rec.out
    mark_path = rec.run_dir / "marks.txt"
    mark_path.touch()
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
        if len(got) == 1 and rec.sampler is not None:
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
            rec.writer.close()
            raise MemprobeError(f"{command[0]}: cannot run: {exc.strerror or exc}") from exc
        forward_pending()  # a signal that arrived before the command existed
        rec.start_sampling(proc.pid, pgid=proc.pid)
        log(f"memprobe: recording {' '.join(command)} (pid {proc.pid}) -> {out}")
        _wait(proc, rec, tty)
        if tty is not None:
            _set_foreground(tty, os.getpgrp())
        left = _drain_group(proc, rec)
        if left:
            log(
                f"memprobe: ended {len(left)} process(es) the command left behind: {', '.join(map(str, left))}"
            )
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
    return result


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
        rec.poll_marks()
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


def _drain_group(proc: subprocess.Popen, rec: _Recording) -> list[int]:
    """Give what the command left in its process group a moment to exit by itself, then end it;
    reap the command last (its exit status is ``proc.returncode`` then). The command unreaped,
    what is in its group is what it left, not a later program's group that took the same id."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = procfs.processes_in_group(proc.pid)
    while left and time.monotonic() < deadline:
        rec.poll_marks()
        time.sleep(0.1)
        left = procfs.processes_in_group(proc.pid)
    if left:
        end_group(proc)
    else:
        proc.wait()
    return left


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
    seconds pass (Ctrl-C: stop and save); the process is never signalled."""
    st = procfs.read_stat(pid)
    if st is None or st.state in ("Z", "X"):
        raise UsageError(f"no running process with pid {pid}")
    if pid == os.getpid() or pid in _ancestors(os.getpid()):
        raise UsageError(f"pid {pid} is memprobe itself or one of its parents")
    if procfs.read_pss(pid) is None:
        raise UsageError(
            f"cannot read /proc/{pid}/smaps_rollup: watch a process of your own user "
            "(or run memprobe as root)"
        )
    if duration is not None and duration <= 0:
        raise UsageError("--duration must be positive")
    cmd = procfs.read_cmdline(pid)
    name = command_name(cmd) if cmd else _safe(st.comm)
    rec = _Recording(
        out, "watch", name, f"memprobe watch {pid}: " + " ".join(cmd), settings, verdict or VerdictSpec()
    )
    out = rec.out
    rec.info = {"command": cmd, "pid": pid}
    env_marks = (ProcfsReader().environ(pid) or {}).get(MARK_ENV)
    path = marks_file or (Path(env_marks) if env_marks else None)
    if path is not None:
        rec.marks = MarkReader(path, rec.t0, from_end=True)
    rec.start_sampling(pid, pgid=None)
    log(
        f"memprobe: watching pid {pid} ({' '.join(cmd)[:80]})"
        + (f" for {duration:g} s" if duration else " until it exits")
        + f" -> {out}"
        + (f"; marks from {path}" if path else "")
    )
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
            rec.poll()
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
