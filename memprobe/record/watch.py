"""``memprobe watch PID``: follow a process that is already running, and its whole tree, until it
exits, a duration ends, or a stop signal; the process is never signalled. What is refused (init,
memprobe itself, a thread, a zombie, a process memprobe may not read) is said in one line
(:mod:`memprobe.record.unreadable`). The recording itself is :class:`memprobe.record.recording.Recording`.
"""

from __future__ import annotations

import os
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path

from memprobe.core.errors import UsageError
from memprobe.core.numbers import bounded
from memprobe.core.text import printable
from memprobe.core.verdict import VerdictSpec
from memprobe.core.vocabulary import signal_name
from memprobe.probe import procfs
from memprobe.probe.sampler import SamplerSettings
from memprobe.probe.tree import ProcfsReader
from memprobe.record.command import FORWARDED
from memprobe.record.mark_reader import MarkReader
from memprobe.record.marks import ENV as MARK_ENV
from memprobe.record.recording import Observer, Recording, RecordResult, command_name, safe_name
from memprobe.record.unreadable import unreadable
from memprobe.session.signals import StopSignals


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
    st = _watchable(pid)
    if duration is not None:
        bounded("--duration", duration, 0, above=True, unit="seconds")
    cmd = procfs.read_cmdline(pid)
    rec = Recording(
        out,
        "watch",
        command_name(cmd) if cmd else safe_name(st.comm),
        f"memprobe watch {pid}: " + " ".join(cmd),
        settings,
        verdict or VerdictSpec(),
        log,
    )
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
        + f" -> {printable(str(rec.out))}"
        + (f"; marks from {printable(str(path))}" if path else "")
    )
    with StopSignals(FORWARDED) as stop:
        status, ended = _follow(rec, pid, st.start_ticks, duration, stop, log)
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
    else:
        result.exit_code = 1 if status == "failed" or not result.saved else 0
    return result


def _watchable(pid: int) -> procfs.StatInfo:
    """The process ``pid`` as /proc/PID/stat has it, or a :class:`UsageError` saying why it
    cannot be watched: gone or a zombie, a thread (``/proc/TID`` exists for threads too),
    memprobe itself or one of its parents, or a process memprobe may not read."""
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
    return st


def _follow(
    rec: Recording,
    pid: int,
    start_ticks: int,
    duration: float | None,
    stop: StopSignals,
    log: Callable[[str], None],
) -> tuple[str, str]:
    """Follow the recording until the process ends, ``duration`` passes, a stop signal comes or
    the recording cannot be saved: (the run's status, how it ended)."""
    deadline = None if duration is None else rec.t0 + duration
    while True:
        now = time.monotonic()
        if stop.received:
            ended = signal_name(stop.received[0])
            log(f"memprobe: {ended}: stopping; saving what was sampled (a few seconds)")
            return "interrupted", ended
        if not _same_process(pid, start_ticks):
            return "ok", "exited"
        if deadline is not None and now >= deadline:
            return "ok", "duration"
        if rec.stopped is not None:  # a write error: nothing more can be saved
            return "failed", "error"
        rec.poll()
        wait = min(0.2, max(0.0, deadline - now)) if deadline is not None else 0.2
        fd = stop.fileno()
        if fd is None:
            time.sleep(wait)
        else:
            select.select([fd], [], [], wait)


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
