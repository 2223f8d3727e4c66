"""Ending a run's process group never signals a group that may belong to another program.

A process group's id is its leader's pid. Once the leader is reaped and the group is empty, the
kernel may give that number to a new process that starts a group of its own; pid_max is 32768
on many machines (on this project's build machines too), and torch's threads each take a pid,
so numbers come round within minutes. A scenario run of one pytest-xdist worker was once killed
by SIGTERM from another worker's end_group this way. So end_group reaps the leader last: every
signal to the group is sent while the leader, alive or a zombie, still holds the id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from memprobe.probe import procfs
from memprobe.session import group as runner

# The leader exits at once; a member of its group ignores SIGTERM and lives on until SIGKILL
# (before: for 1.5 s, which a loaded machine could spend before end_group signalled the group).
LEADER_LEAVES_A_MEMBER = """
import os, signal, sys, time
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("member", os.getpid(), flush=True)
    time.sleep(600)
    os._exit(0)
time.sleep(0.3)
"""


@pytest.fixture
def group_signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Every os.killpg end_group makes: (signal, whether the group's leader still held its id)."""
    sent: list[tuple[int, bool]] = []
    real = os.killpg

    def spy(pgid: int, sig: int) -> None:
        sent.append((sig, os.path.exists(f"/proc/{pgid}")))  # a zombie has its /proc entry too
        real(pgid, sig)

    monkeypatch.setattr(runner.os, "killpg", spy)
    return sent


def _gone(pid: int, within_s: float = 2.0) -> bool:
    """Ended (a zombie counts: the subreaper, pytest, reaps it) within a moment of its SIGKILL."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        st = procfs.read_stat(pid)
        if st is None or st.state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def _start() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LEADER_LEAVES_A_MEMBER],
        stdout=subprocess.PIPE,
        text=True,
        **runner.OWN_PROCESS_GROUP,
    )
    assert proc.stdout is not None
    member = int(proc.stdout.readline().split()[1])
    return proc, member


def test_a_run_whose_leader_exited_is_ended_while_the_leader_holds_the_group_id(group_signals) -> None:
    proc, member = _start()
    # As the supervisor does when the run's event pipe closes: wait for the exit, not reaping it.
    assert runner.wait_exited(proc, 10)
    assert os.path.exists(f"/proc/{proc.pid}")  # a zombie, its pid (the group's id) still taken
    runner.end_group(proc, grace_s=0.5)
    assert group_signals and all(held for _, held in group_signals), group_signals
    assert signal.SIGKILL in [sig for sig, _ in group_signals]  # the member ignored SIGTERM
    assert proc.returncode == 0  # reaped at the end, with the leader's own exit status
    assert (
        _gone(member) and procfs.processes_in_group(proc.pid) == []
    )  # SIGKILL lands a moment after kill() returns


def test_a_group_whose_leader_was_reaped_elsewhere_is_signalled_only_while_it_has_members(
    group_signals,
) -> None:
    """``record`` reaps its command to learn its exit status: its members still hold the id."""
    proc, member = _start()
    proc.wait()
    runner.end_group(proc, grace_s=0.5)
    assert group_signals and _gone(member)
    proc2 = subprocess.Popen([sys.executable, "-c", "pass"], **runner.OWN_PROCESS_GROUP)
    proc2.wait()
    before = len(group_signals)
    runner.end_group(proc2, grace_s=0.5)  # reaped and empty: its id may be anyone's now
    assert len(group_signals) == before


def test_a_run_process_still_working_at_its_exit_is_waited_for_and_a_hung_one_is_not() -> None:
    """A run's process that frees a large heap at exit works past the grace on a busy machine
    (the CI's first run was ended by SIGTERM and marked failed after it had finished); one that
    uses no CPU is not waited for beyond the grace."""
    # 0.5 s of CPU: past the 0.2 s grace on any machine, and done within the 30 s limit with a
    # share of a core down to 2 % (1.5 s of CPU once missed it on a 2-core machine at load 22);
    # waited for once it computes, not while the interpreter starts (reading files, not CPU).
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time\nprint('computing', flush=True)\n"
                "end = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert busy.stdout is not None and busy.stdout.readline() == "computing\n"
        assert runner.wait_exiting(busy, 0.2, 30.0)  # past the grace, while it computes
        assert busy.wait() == 0
        t = time.monotonic()
        assert not runner.wait_exiting(idle, 0.5, 30.0)
        # Given up well short of the 30 s limit (the grace, and a second without CPU: an idle
        # process's CPU time does not depend on the machine's speed or load), and before the
        # process ended by itself.
        assert idle.poll() is None and time.monotonic() - t < 15.0
    finally:
        for p in (busy, idle):
            if p.poll() is None:
                p.kill()
                p.wait()
