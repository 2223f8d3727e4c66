"""A run's processes started in a process group of their own and ended together, leaving none.

:func:`end_group` ends the child, everything in its group, and the descendants that left the
group for a session of their own; :func:`exited`, :func:`wait_exited` and :func:`wait_exiting`
wait for the child without reaping it (its pid, the group's id, stays ours until then). Used by
the run's supervisor (:mod:`memprobe.run.runner`) and by ``memprobe record``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any

from memprobe.probe import procfs

# Popen arguments that start a child in a process group of its own: Popen's process_group is
# new in Python 3.11; on 3.10 the child calls setpgid(0, 0) itself, before exec.
OWN_PROCESS_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)


def end_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """End the child and everything in its process group, and the descendants that left the
    group for a session of their own (setsid); leave no process behind.

    The child is reaped last. Until then its pid, which is the group's id, cannot be given to a
    new process, so the group's signals reach this run's processes only. Reaped first, its id
    can be taken by any process that starts a group of its own once the group is empty: with
    pid_max at 32768 (the kernel's default, and this project's build machines) and torch's
    threads each taking a pid, ids come round within minutes, and a test run once SIGTERMed a
    scenario run of another pytest-xdist worker this way. Should a caller have reaped the child
    already, the group is signalled only while it has members, which hold its id."""
    pgid = proc.pid
    held = proc.returncode is None  # not reaped: the group's id is ours until proc.wait() below
    escaped = _EscapedDescendants(pgid)
    if not exited(proc):
        escaped.signal(signal.SIGTERM)
        _signal_group(pgid, signal.SIGTERM)
        wait_exited(proc, grace_s)
    deadline = time.monotonic() + grace_s
    while (procfs.processes_in_group(pgid) or escaped.alive()) and time.monotonic() < deadline:
        escaped.signal(signal.SIGTERM)
        _signal_group(pgid, signal.SIGTERM)
        time.sleep(0.05)
    escaped.signal(signal.SIGKILL)
    if held or procfs.processes_in_group(pgid):
        _signal_group(pgid, signal.SIGKILL)
    proc.wait()
    if proc.stdin:
        proc.stdin.close()


def exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it (see end_group)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere
        return True


def wait_exited(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the child to exit, without reaping it; whether it did."""
    deadline = time.monotonic() + timeout_s
    while not exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def wait_exiting(proc: subprocess.Popen, grace_s: float, busy_s: float) -> bool:
    """Wait for the child to exit (without reaping it) up to ``grace_s``, and on up to ``busy_s``
    while it uses CPU: a process tearing down a large heap is working, a hung one is not."""
    start = time.monotonic()
    if wait_exited(proc, grace_s):
        return True
    last = procfs.read_stat(proc.pid)
    while time.monotonic() - start < busy_s:
        if wait_exited(proc, 1.0):
            return True
        now = procfs.read_stat(proc.pid)
        if now is None or last is None or now.cpu_s <= last.cpu_s:
            return exited(proc)  # no CPU used in the last second: not exiting by itself
        last = now
    return exited(proc)


class _EscapedDescendants:
    """Descendants of the run's process outside its group (a dataset's ``setsid`` child): the
    group's signal misses them. Collected while the run's process lives (it is their subreaper,
    see ``memprobe.run.supervised.end_with_supervisor``), each remembered with its start time so
    that a reused pid is never signalled."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.known: dict[int, int] = {}
        self.collect()

    def collect(self) -> None:
        for pid, start in procfs.left_group(self.root).items():
            self.known.setdefault(pid, start)

    def alive(self) -> list[int]:
        self.collect()
        out = []
        for pid, start in self.known.items():
            st = procfs.read_stat(pid)
            if st is not None and st.start_ticks == start and st.state not in ("Z", "X"):
                out.append(pid)
        return out

    def signal(self, sig: int) -> None:
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
