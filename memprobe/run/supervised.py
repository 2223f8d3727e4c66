"""A run's process tied to its supervisor: its process group ends when memprobe ends, however it
ends (SIGKILL included), and what a dataset started outside the group ends with it.

The run's process (run/child.py) and an import check's (run/import_check.py) call
:func:`end_with_supervisor` first; the supervisor (run/runner.py) names itself to them in
``SUPERVISOR_ENV``. Split from run/child.py, which builds and iterates the loader: this is
the process's life, not the run's work.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

from memprobe.probe import procfs

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
# Delivered by the kernel when the supervisor goes (see end_with_supervisor). A real-time signal
# nothing else here uses: SIGTERM keeps its meaning (the supervisor ending the group), and a
# dataset that installs its own SIGUSR1/SIGTERM handler cannot take this one over by accident.
SUPERVISOR_GONE = signal.SIGRTMIN + 1
SUPERVISOR_ENV = "MEMPROBE_SUPERVISOR_PID"  # the supervisor's pid, set by runner.py


def end_with_supervisor() -> None:
    """End this run's whole process group - workers, forkserver and its workers, the resource
    tracker, whatever a dataset started - when the supervisor ends, however it ends (SIGKILL
    included): they are in a group of their own, which no signal sent to memprobe reaches.

    The kernel signals this process when the supervisor thread that started it ends
    (PR_SET_PDEATHSIG); the handler runs as soon as the main thread runs Python again (waits in
    the DataLoader, on stdin and in sleep() are interrupted). If the supervisor was already gone
    before prctl() took effect, the parent is no longer the one named in the environment: end
    now."""
    expected = int(os.environ.get(SUPERVISOR_ENV) or 0)
    if not expected:
        return  # started by hand, not by memprobe: nothing to outlive
    signal.signal(SUPERVISOR_GONE, _supervisor_gone)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(SUPERVISOR_GONE), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        # A process that a dataset starts in a session of its own (setsid, start_new_session)
        # leaves the run's group; as a subreaper this process inherits it when its parent exits,
        # so it stays in the run's tree, where the sampler and the end of the run find it.
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError) as exc:
        os.write(2, f"memprobe.run.child: cannot follow the supervisor's end (prctl: {exc})\n".encode())
    if os.getppid() != expected:
        _supervisor_gone(int(SUPERVISOR_GONE), None)


def _supervisor_gone(signum: int, frame: object) -> None:
    os.write(2, b"memprobe.run.child: the supervisor is gone: ending this run's process group\n")
    if os.getpgrp() == os.getpid():  # only a group of our own: never the caller's
        end_escaped(signal.SIGKILL)
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(128 + signal.SIGKILL)


def end_escaped(sig: int = signal.SIGKILL) -> None:
    """Signal every descendant that left this run's process group (a dataset's ``setsid``
    child): the supervisor ends the group, and once this process is gone they would be
    re-parented to init, out of the run's reach."""
    if os.getpgrp() != os.getpid():
        return  # started by hand inside another group: the caller's processes are not ours
    for pid in procfs.left_group(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
