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

The recording itself (writer, sampler, marks, the run's meta, the finish) is
:class:`memprobe.record.recording.Recording`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from memprobe.cli.flags import bounded
from memprobe.core.errors import MemprobeError, ResultsWriteError, UsageError
from memprobe.core.text import printable
from memprobe.core.vocabulary import shell_exit_code, signal_name
from memprobe.probe import procfs
from memprobe.probe.sampler import SamplerSettings
from memprobe.probe.tree import ProcfsReader
from memprobe.record.marks import ENV as MARK_ENV
from memprobe.record.recording import (
    MarkReader,
    Observer,
    Recording,
    RecordResult,
    command_name,
    safe_name,
)
from memprobe.record.unreadable import unreadable
from memprobe.run.ending import OWN_PROCESS_GROUP, end_group
from memprobe.run.runner import StopSignals
from memprobe.run.scenario import VerdictSpec

LEFTOVER_GRACE_S = 3.0  # what the command left in its process group has this long to exit by itself
# The exact round taken when a stop signal arrives, before it is forwarded: long enough for
# ~50 processes of 700 MB on a loaded machine, short enough not to keep a user waiting.
SIGNAL_ROUND_S = 1.5


class CommandNotFound(MemprobeError):
    exit_code = 127


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
    observer: Observer | None = None,
) -> RecordResult:
    """Run ``command`` with inherited stdin/stdout/stderr, sample its whole process tree until
    it exits, save and summarize (``observer``: a live view, ``memprobe record --live``). ``exit_code`` is the command's (128+N if killed by signal N;
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
    rec = Recording(
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
    rec.observer = observer
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


def _wait(proc: subprocess.Popen, rec: Recording, tty: int | None) -> None:
    """Wait for the command to exit, tailing marks; follow job control when it has the terminal.
    The command is not reaped here (``WNOWAIT``): until _drain_group reaps it, its pid, the id of
    its process group, cannot be given to another process (see memprobe.run.ending.end_group)."""
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
                _suspend_with(proc, tty, rec.observer)
            continue
        rec.poll()
        return


def _suspend_with(proc: subprocess.Popen, tty: int, observer: Observer | None = None) -> None:
    """The command was stopped (Ctrl-Z): take the terminal back (a live view's screen too) and
    stop memprobe too, so the shell sees the job stopped; on resume, hand them back if in the foreground."""
    _set_foreground(tty, os.getpgrp())
    if observer is not None:
        observer.suspend()
    os.kill(os.getpid(), signal.SIGSTOP)
    try:
        if os.tcgetpgrp(tty) == os.getpgrp():
            _set_foreground(tty, proc.pid)
            if observer is not None:
                observer.resume()
    except OSError:
        pass
    _killpg(proc.pid, signal.SIGCONT)


def _drain_group(proc: subprocess.Popen, rec: Recording) -> tuple[list[int], list[dict]]:
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
    observer: Observer | None = None,
) -> RecordResult:
    """Sample the running process ``pid`` and its whole tree until it exits or ``duration``
    seconds pass; the process is never signalled. SIGINT, SIGTERM and SIGHUP stop the watch the
    way they stop ``run`` and ``record``: what was sampled is saved, the report written, and
    ``exit_code`` is 128 + the first signal's number. ``observer``: a live view of the recording
    (``memprobe top``)."""
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
    if not isinstance(procfs.read_pss_or_denied(pid), procfs.PssSample):
        raise UsageError(unreadable(pid, st))
    if duration is not None:
        bounded("--duration", duration, 0, above=True, unit="seconds")
    cmd = procfs.read_cmdline(pid)
    name = command_name(cmd) if cmd else safe_name(st.comm)
    rec = Recording(
        out,
        "watch",
        name,
        f"memprobe watch {pid}: " + " ".join(cmd),
        settings,
        verdict or VerdictSpec(),
        log,
    )
    out = rec.out
    rec.observer = observer
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
