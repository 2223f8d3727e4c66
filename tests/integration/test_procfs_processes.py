"""Reading /proc of real processes: vanished and zombie processes, process trees and groups, and
roles of helpers seen before and after exec (parsing alone is in tests/unit/test_procfs.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from memprobe.probe import procfs
from memprobe.probe.roles import RoleBook


def _vanished_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_vanished_pid_reads_as_none() -> None:
    pid = _vanished_pid()
    assert procfs.read_stat(pid) is None
    assert procfs.read_cheap(pid) is None
    assert procfs.read_pss(pid) is None
    assert procfs.read_children(pid) == []
    assert procfs.read_cmdline(pid) == []
    assert procfs.thread_ids(pid) == []


def test_zombie_reads_as_none_never_zero() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while (st := procfs.read_stat(pid)) is not None and st.state != "Z":
            assert time.monotonic() < deadline, "child never became a zombie"
            time.sleep(0.01)
        assert st is not None and st.state == "Z"  # still there: not reaped
        assert procfs.read_cheap(pid) is None
        assert procfs.read_pss(pid) is None
        assert pid not in procfs.processes_in_group(os.getpgrp())
    finally:
        os.waitpid(pid, 0)
    assert procfs.read_stat(pid) is None


def test_process_tree_and_group() -> None:
    # A child in its own process group that starts a grandchild.
    code = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)']); print(p.pid, flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, process_group=0)
    try:
        grandchild = int(child.stdout.readline())
        tree = procfs.process_tree(child.pid)
        assert tree[0] == child.pid and grandchild in tree
        assert sorted(procfs.processes_in_group(child.pid)) == sorted([child.pid, grandchild])
        assert os.getpid() not in procfs.processes_in_group(child.pid)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    deadline = time.monotonic() + 5
    while procfs.processes_in_group(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the grandchild is re-parented, then reaped
    assert procfs.processes_in_group(child.pid) == []


def test_left_group_finds_the_descendants_a_group_signal_misses() -> None:
    # A group leader with two children: one stays in its group, one leaves it (setsid).
    code = (
        "import subprocess, sys, time; sleep = [sys.executable, '-c', 'import time; time.sleep(60)']; "
        "a = subprocess.Popen(sleep); b = subprocess.Popen(sleep, start_new_session=True); "
        "print(a.pid, b.pid, flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, process_group=0)
    stays = escaped = None
    try:
        stays, escaped = map(int, child.stdout.readline().split())
        st = procfs.read_stat(escaped)
        assert st is not None
        assert procfs.left_group(child.pid) == {escaped: st.start_ticks}  # not the one that stayed
    finally:
        for pid in (escaped, stays):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()


def test_roles_from_cmdline() -> None:
    tracker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "multiprocessing.resource_tracker"]
    )
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "multiprocessing.forkserver"]
    )
    try:
        time.sleep(0.2)
        book = RoleBook(main_pid=os.getpid())
        assert book.role(tracker.pid, "python").name == "resource tracker"
        assert book.role(server.pid, "python").name == "forkserver"
        assert book.role(server.pid, "python").is_helper
    finally:
        for p in (tracker, server):
            p.kill()
            p.wait()


@pytest.mark.parametrize("cmdline_tag", ["", "multiprocessing.forkserver"])
def test_a_worker_seen_before_torch_renames_it_becomes_a_worker(cmdline_tag: str) -> None:
    """A fork worker first looks like its parent ('python -m memprobe.run.child'), a forkserver
    worker like the forkserver; once torch names it pt_data_worker it is a worker."""
    args = [sys.executable, "-c", "import time; time.sleep(30)"] + ([cmdline_tag] if cmdline_tag else [])
    proc = subprocess.Popen(args)
    try:
        time.sleep(0.2)
        book = RoleBook(main_pid=os.getpid())
        assert not book.role(proc.pid, "python").is_worker  # not renamed yet
        assert book.role(proc.pid, "pt_data_worker").name == "worker 0"
    finally:
        proc.kill()
        proc.wait()


def test_a_helper_sampled_before_exec_gets_its_role_after_exec() -> None:
    code = (
        "import os, sys, time; time.sleep(0.5); "
        "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', "
        "'multiprocessing.' + 'forkserver'])"
    )  # split: not in the cmdline before exec
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        book = RoleBook(main_pid=os.getpid())
        time.sleep(0.2)
        assert book.role(proc.pid, "python").name == "other"  # before exec: like its parent
        deadline = time.monotonic() + 10
        while "multiprocessing.forkserver" not in procfs.read_cmdline(proc.pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert book.role(proc.pid, "python").name == "forkserver"
    finally:
        proc.kill()
        proc.wait()


def test_same_memory_tells_a_shared_address_space_from_a_forked_copy() -> None:
    """kcmp(2) as memprobe.probe.tree asks it of a child that shows its parent's layout: a thread
    (a task in this very memory, as a vfork child is before its exec) shares it; a forked child
    has a copy; a process gone cannot be told."""
    import threading

    me = os.getpid()
    tid: list[int] = []
    done = threading.Event()
    thread = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), done.wait()))
    thread.start()
    try:
        while not tid:
            time.sleep(0.001)
        assert procfs.same_memory(tid[0], me) is True
    finally:
        done.set()
        thread.join()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover  (the forked child: waits to be read)
        os.read(r, 1)
        os._exit(0)
    try:
        assert procfs.same_memory(child, me) is False
    finally:
        os.write(w, b"x")
        os.waitpid(child, 0)
    assert procfs.same_memory(_vanished_pid(), me) is None
