"""Reading /proc: stat and smaps_rollup parsing, this process's own figures, roles (processes that come
and go are in tests/integration/test_procfs_processes.py)."""

from __future__ import annotations

import errno
import os

import pytest

from memprobe.core import vocabulary
from memprobe.probe import procfs
from memprobe.probe.roles import RoleBook
from memprobe.probe.sampler import denied_reason

# A real /proc/PID/stat line, with a comm that holds spaces and a ')' (comm is at most 15
# characters in the kernel, but the parser must not care).
STAT = (
    "4242 (a) b (c)) S 17 4240 4240 0 -1 4194560 1234 0 5 0 300 50 0 0 20 0 7 0 "
    "98765 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
)

SMAPS_ROLLUP = """\
55d0c0a00000-7ffd4d1ff000 ---p 00000000 00:00 0                          [rollup]
Rss:              204800 kB
Pss:              102400 kB
Pss_Dirty:         90000 kB
Pss_Anon:          80000 kB
Pss_File:          20000 kB
Pss_Shmem:          2400 kB
Shared_Clean:      50000 kB
Shared_Dirty:      60000 kB
Private_Clean:     10000 kB
Private_Dirty:     84800 kB
Referenced:       204800 kB
Anonymous:        150000 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
Swap:                128 kB
SwapPss:              64 kB
Locked:                0 kB
"""


def test_parse_stat_with_spaces_and_parens_in_comm() -> None:
    st = procfs.parse_stat(STAT)
    assert st.pid == 4242
    assert st.comm == "a) b (c)"
    assert st.state == "S"
    assert (st.ppid, st.pgid) == (17, 4240)
    assert st.minflt == 1234 and st.majflt == 5
    assert st.cpu_s == pytest.approx(350 / procfs.CLOCK_TICKS)
    assert st.sys_cpu_s == pytest.approx(50 / procfs.CLOCK_TICKS)  # stime alone
    assert st.threads == 7
    assert st.start_ticks == 98765


def test_read_stat_of_this_process() -> None:
    st = procfs.read_stat(os.getpid())
    assert st is not None
    assert st.pid == os.getpid() and st.ppid == os.getppid() and st.pgid == os.getpgrp()
    assert st.state in "RS" and st.threads >= 1


def test_parse_smaps_rollup() -> None:
    s = procfs.parse_smaps_rollup(SMAPS_ROLLUP)
    kb = 1024
    assert s is not None
    assert s.rss == 204800 * kb and s.pss == 102400 * kb
    assert (s.pss_anon, s.pss_file, s.pss_shmem) == (80000 * kb, 20000 * kb, 2400 * kb)
    assert (s.shared_clean, s.shared_dirty) == (50000 * kb, 60000 * kb)
    assert (s.private_clean, s.private_dirty) == (10000 * kb, 84800 * kb)
    assert s.uss == 94800 * kb
    assert (s.swap, s.swap_pss) == (128 * kb, 64 * kb)


def test_parse_smaps_rollup_without_pss_is_none() -> None:
    assert procfs.parse_smaps_rollup("") is None
    assert procfs.parse_smaps_rollup("Rss: 12 kB\n") is None


def test_read_pss_of_this_process_is_consistent() -> None:
    s = procfs.read_pss(os.getpid())
    cheap = procfs.read_cheap(os.getpid())
    assert s is not None and cheap is not None
    assert 0 < s.uss <= s.pss <= s.rss
    assert cheap.rss > 0 and cheap.rss_anon + cheap.rss_file + cheap.rss_shmem == pytest.approx(
        cheap.rss, rel=0.01
    )


def test_roles_main_workers_and_helpers() -> None:
    book = RoleBook(main_pid=100)
    assert book.role(100, "python").name == "main"
    # torch names its workers pt_data_worker; provisional indices in order of appearance.
    assert book.role(201, "pt_data_worker").name == "worker 0"
    assert book.role(202, "pt_data_worker").name == "worker 1"
    # The loader's own list is authoritative.
    book.set_workers([202, 201])
    assert book.role(202, "pt_data_worker").name == "worker 0"
    assert book.role(201, "pt_data_worker").worker == 1
    assert book.role(201, "pt_data_worker").is_worker and not book.role(100, "x").is_worker


def test_system_figures() -> None:
    avail = procfs.mem_available()
    assert avail is not None and avail > 0
    shm = procfs.dev_shm_used()
    assert shm is None or shm >= 0


def test_a_refused_memory_map_is_told_from_a_process_that_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES/EPERM on smaps_rollup: another user's process (its owner from status); any other
    error, or nothing read: gone or exiting. Both read as "unreadable (process exiting?)" before."""
    real = procfs._read_or_errno
    for code in (errno.EACCES, errno.EPERM):
        monkeypatch.setattr(
            procfs,
            "_read_or_errno",
            lambda path, code=code: code if path.endswith("smaps_rollup") else real(path),
        )
        assert procfs.read_pss_or_denied(os.getpid()) == procfs.Denied((os.getuid(), os.geteuid()))
        assert procfs.read_pss(os.getpid()) is None
    for got in (errno.ENOENT, errno.ESRCH, ""):
        monkeypatch.setattr(procfs, "_read_or_errno", lambda path, got=got: got)
        assert procfs.read_pss_or_denied(os.getpid()) is None


def test_the_reason_of_a_refused_read_names_whose_process_it_is() -> None:
    setuid = denied_reason(procfs.Denied((1000, 0)), 1000)
    assert setuid == (
        "smaps_rollup: permission denied: another user's process (uid 0, started by uid 1000: a "
        "set-user-ID program); memprobe runs as uid 1000"
    )
    other = denied_reason(procfs.Denied((1234, 1234)), 1000)
    assert (
        other
        == "smaps_rollup: permission denied: another user's process (uid 1234); memprobe runs as uid 1000"
    )
    assert "not dumpable" in denied_reason(procfs.Denied((1000, 1000)), 1000)
    assert (
        denied_reason(procfs.Denied(None), 1000)
        == "smaps_rollup: permission denied (memprobe runs as uid 1000)"
    )
    for reason in (setuid, other):
        assert vocabulary.denied(reason) and not vocabulary.ended(reason)


def test_a_process_identity_names_this_process_and_no_other() -> None:
    """What a results folder's manifest says of its writer: the pid, its start time and the boot;
    a pid reused by a later process, another boot or no pid at all is not that writer."""
    me = procfs.process_identity(os.getpid())
    assert me["pid"] == os.getpid() and isinstance(me["start_ticks"], int) and me["boot_id"]
    assert procfs.still_running(me)
    assert not procfs.still_running({**me, "start_ticks": me["start_ticks"] + 1})  # the pid reused
    assert not procfs.still_running({**me, "boot_id": "another boot"})
    assert not procfs.still_running({**me, "pid": None}) and not procfs.still_running({})
