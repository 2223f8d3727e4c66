"""Profile a user's own command (``memprobe record``): the command's life cycle. (A process
already running: ``memprobe watch``, :mod:`memprobe.record.watch`.)

``record`` starts the command in its own process group (handing it the terminal when memprobe
has it), forwards stop signals to that group, waits for it, ends what it leaves behind, and
saves. What happens to the process tree meanwhile (classification, exact readings where memory moves) is
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

from memprobe.core.errors import MemprobeError, ResultsWriteError, UsageError
from memprobe.core.text import printable
from memprobe.core.verdict import VerdictSpec
from memprobe.core.vocabulary import shell_exit_code, signal_name
from memprobe.probe import procfs
from memprobe.probe.sampler import SamplerSettings
from memprobe.record.mark_reader import MarkReader
from memprobe.record.marks import ENV as MARK_ENV
from memprobe.record.recording import (
    Observer,
    Recording,
    RecordResult,
    command_name,
)
from memprobe.session.group import OWN_PROCESS_GROUP, end_group

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
    rec, existed = _recording(command, out, settings, verdict, log, observer)
    env = {**os.environ, MARK_ENV: str((rec.run_dir / "marks.txt").resolve())}
    tty = _foreground_tty()
    forwarder = _Forwarder(rec)
    old = _install(forwarder.forward)
    proc: subprocess.Popen | None = None
    try:
        proc = _start(command, env, tty, rec, existed)
        forwarder.proc = proc
        forwarder.pending()  # a signal that arrived before the command existed
        rec.start_sampling(proc.pid, pgid=proc.pid)
        log(
            f"memprobe: recording {printable(' '.join(command))} (pid {proc.pid}) -> {printable(str(rec.out))}"
        )
        _wait(proc, rec, tty)
        if tty is not None:
            _set_foreground(tty, os.getpgrp())
        _leftovers(proc, rec, log)
    except BaseException:
        _abandon(proc, rec, tty)
        raise
    finally:
        _restore(old)
    code = proc.returncode
    assert code is not None  # reaped by _drain_group
    status, exit_code, error = _ending(code, forwarder.got)
    result = rec.finish(status=status, exit_code=code, error=error, final_pss=False, render=render)
    result.exit_code = exit_code
    result.outlived = rec.outlived
    return result


def _recording(
    command: list[str],
    out: Path | None,
    settings: SamplerSettings | None,
    verdict: VerdictSpec | None,
    log: Callable[[str], None],
    observer: Observer | None,
) -> tuple[Recording, bool]:
    """The recording of ``command``, its folder made and its mark file ready, before the
    command starts (a command that is not found, or a full disk, stops it here); and whether
    the folder existed before (an empty one given with ``-o``)."""
    if not command:
        raise UsageError("no command given: memprobe record [-o DIR] -- COMMAND [ARGS...]")
    if shutil.which(command[0]) is None:
        raise CommandNotFound(f"{printable(command[0])}: command not found (or not executable)")
    existed = out is not None and out.exists()
    rec = Recording(
        out,
        "record",
        command_name(command),
        "memprobe record: " + " ".join(command),
        settings,
        verdict or VerdictSpec(),
        log,
    )
    mark_path = rec.run_dir / "marks.txt"
    try:
        mark_path.touch()
    except OSError as exc:  # the command has not started: a plain error (a full disk)
        rec.writer.close()
        raise ResultsWriteError(mark_path, exc) from None
    rec.marks = MarkReader(mark_path, rec.t0)
    rec.info = {"command": command}
    rec.observer = observer
    return rec, existed


class _Forwarder:
    """Stop signals sent to memprobe, forwarded to the command's process group the Ctrl-C way:
    the first as it came (after a full exact round, taken before the command reacts: its workers
    exit at once on it), a second SIGINT as SIGTERM, a third as SIGKILL; never once the command
    is reaped (its group's id may be another program's by then)."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        self.got: list[int] = []
        self.sent = 0  # how many of ``got`` went to the command's group
        self.proc: subprocess.Popen | None = None

    def forward(self, signum: int, frame: object) -> None:
        self.got.append(signum)
        if self.proc is None:
            return
        if len(self.got) == 1 and self.rec.sampler is not None and self.rec.stopped is None:
            self.rec.sampler.request_pss(wait_s=SIGNAL_ROUND_S)  # a second signal is forwarded at once
        self.pending()

    def pending(self) -> None:
        while self.proc is not None and self.proc.returncode is None and self.sent < len(self.got):
            i = self.sent
            self.sent += 1
            got = self.got
            n = sum(1 for s in got[: i + 1] if s == signal.SIGINT) if got[i] == signal.SIGINT else 1
            _killpg(self.proc.pid, got[i] if n == 1 else (signal.SIGTERM if n == 2 else signal.SIGKILL))


def _start(command: list[str], env: dict, tty: int | None, rec: Recording, existed: bool) -> subprocess.Popen:
    """The command started in a process group of its own (given the terminal where memprobe has
    it); one that cannot be executed leaves no folder behind (an empty one given with -o stays)."""
    try:
        if tty is None:
            return subprocess.Popen(command, env=env, **OWN_PROCESS_GROUP)
        # The terminal's foreground group must be set in the child, before exec; only os calls.
        return subprocess.Popen(command, env=env, preexec_fn=_child_setup(tty))  # noqa: PLW1509
    except OSError as exc:
        rec.writer.close()
        _remove(rec.out, keep_folder=existed)
        refused = CannotRun(f"{printable(command[0])}: cannot run: {_cannot_run(command[0], exc)}")
        refused.exit_code = 127 if exc.errno == errno.ENOENT else 126  # as bash says them
        raise refused from None


def _leftovers(proc: subprocess.Popen, rec: Recording, log: Callable[[str], None]) -> None:
    """What the command left in its process group ended (after a grace), what left the group
    and still runs named, never ended."""
    left, outlived = _drain_group(proc, rec)
    if left:
        log(f"memprobe: ended {len(left)} process(es) the command left behind: {', '.join(map(str, left))}")
    if outlived:
        rec.outlived = outlived
        log(_outlived_words(outlived))


def _abandon(proc: subprocess.Popen | None, rec: Recording, tty: int | None) -> None:
    """memprobe itself stops short (an exception): the terminal given back, the command's group
    ended, the sampling stopped and the writer closed."""
    if proc is not None:
        if tty is not None:
            _set_foreground(tty, os.getpgrp())
        end_group(proc)
    if rec.sampler is not None:
        rec.sampler.stop(final_pss=False)
    rec.writer.close()


def _ending(code: int, got: list[int]) -> tuple[str, int, dict | None]:
    """The run's status, memprobe's exit code and the error, from the command's exit status and
    the stop signals memprobe got: the command's code (128+N if killed by signal N), 128+N if
    memprobe got signal N."""
    exit_code = shell_exit_code(code)
    if got:
        status, exit_code = "interrupted", 128 + got[0]
    elif code == -signal.SIGINT:
        status = "interrupted"
    else:
        status = "ok" if code == 0 else "failed"
    error = None
    if code != 0:
        how = f"was killed by {_signal_words(-code)}" if code < 0 else f"exited with code {code}"
        error = {"type": "CommandExited", "message": f"the command {how}"}
    return status, exit_code, error


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
    its process group, cannot be given to another process (see memprobe.session.group.end_group)."""
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
