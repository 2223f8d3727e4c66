"""What `memprobe watch PID` / `memprobe top PID` say of a process whose memory they cannot read
(memprobe/record/unreadable.py): what it is and what would read it, for who memprobe runs as.
Before: "watch a process of your own user (or run memprobe as root)" in every case, to root too,
and for a kernel thread, which no one can watch."""

from __future__ import annotations

import pytest

from memprobe.probe import procfs
from memprobe.record import unreadable

KTHREAD = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 23 0 0 18446744073709551615 0 0"
PROCESS = "4242 (python) S 1 4242 4242 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 23 0 0 18446744073709551615 0 0"


def refusal(monkeypatch, stat: str, got: object, euid: int, ptrace: bool = True) -> str:
    monkeypatch.setattr(procfs, "read_pss_or_denied", lambda pid: got)
    monkeypatch.setattr(unreadable.os, "geteuid", lambda: euid)
    monkeypatch.setattr(unreadable, "_capable", lambda cap: ptrace)
    st = procfs.parse_stat(stat)
    return unreadable.unreadable(st.pid, st)


@pytest.mark.parametrize("euid", [0, 1000])
def test_a_kernel_thread_has_no_memory_to_watch_whoever_asks(monkeypatch, euid: int) -> None:
    said = refusal(monkeypatch, KTHREAD, None, euid)
    assert said.startswith("pid 2 (kthreadd) is a kernel thread: it has no memory of its own to watch")
    assert "root" not in said


def test_another_users_process_as_a_user_names_its_owner_and_root(monkeypatch) -> None:
    said = refusal(monkeypatch, PROCESS, procfs.Denied((0, 0)), euid=1000)
    assert "another user's process (uid 0); memprobe runs as uid 1000" in said
    assert said.endswith("watch a process of your own user, or run memprobe as root")


def test_an_own_process_that_is_not_dumpable_is_roots_to_read(monkeypatch) -> None:
    said = refusal(monkeypatch, PROCESS, procfs.Denied((1000, 1000)), euid=1000)
    assert "not dumpable" in said and said.endswith(
        "run memprobe as root (a process that is not dumpable is root's alone to read)"
    )
    assert "your own user" not in said


def test_root_refused_is_never_told_to_run_as_root(monkeypatch) -> None:
    without = refusal(monkeypatch, PROCESS, procfs.Denied((1000, 1000)), euid=0, ptrace=False)
    assert "memprobe runs as root without CAP_SYS_PTRACE" in without and "--cap-add SYS_PTRACE" in without
    with_it = refusal(monkeypatch, PROCESS, procfs.Denied((1000, 1000)), euid=0, ptrace=True)
    assert "refused to root too: a security module" in with_it
    assert all("run memprobe as root" not in s for s in (without, with_it))


def test_a_process_exiting_is_said_to_be(monkeypatch) -> None:
    said = refusal(monkeypatch, PROCESS, None, euid=0)
    assert (
        said
        == "cannot read /proc/4242/smaps_rollup: pid 4242 (python) is exiting (its memory is being freed)"
    )
