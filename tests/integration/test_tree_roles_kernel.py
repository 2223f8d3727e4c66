"""The structural sign memprobe.probe.tree classifies a tree by, on the real kernel (moved from
tests/unit/test_tree_roles.py, whose tests run on a fake /proc: this one forks and starts a process)."""

from __future__ import annotations

import os
import subprocess
import time

from memprobe.probe import procfs


def test_fork_shows_the_parents_layout_and_exec_a_new_one() -> None:
    """The structural sign the classification rests on, on the real kernel."""
    me = procfs.read_stat(os.getpid())
    assert me is not None and any(me.layout)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        time.sleep(5)
        os._exit(0)
    sleeper = subprocess.Popen(["sleep", "5"])
    try:
        deadline = time.monotonic() + 5
        while (
            (st := procfs.read_stat(sleeper.pid)) is not None
            and st.comm != "sleep"
            and time.monotonic() < deadline
        ):
            time.sleep(0.005)  # until it has exec'd
        child, execd = procfs.read_stat(pid), procfs.read_stat(sleeper.pid)
        assert child is not None and child.layout == me.layout
        assert execd is not None and execd.layout != me.layout
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        sleeper.kill()
        sleeper.wait()
