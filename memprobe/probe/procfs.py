"""Read one process's memory and CPU figures from /proc, from the outside.

Two tiers, because they cost very different amounts:

* cheap (``stat`` + ``status``, ~10 µs): RSS and its anon/file/shmem parts, CPU time,
  minor faults, thread count, state.
* pss (``smaps_rollup``): PSS and its parts, USS, shared/private clean/dirty, swap. The kernel
  walks the page tables for this read, so it costs ~40 ns per resident 4 KiB page, and forked
  workers inherit their parent's pages. The sampler budgets it.

A process that vanished, or is a zombie (whose /proc files read as zeros), yields ``None``
so that callers record a *missing* sample rather than a drop to zero.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
KB = 1024
MB = 1024 * 1024

_STATUS_KEYS = {"RssAnon": "rss_anon", "RssFile": "rss_file", "RssShmem": "rss_shmem", "VmRSS": "rss"}
_ROLLUP_KEYS = {
    "Rss": "rss",
    "Pss": "pss",
    "Pss_Anon": "pss_anon",
    "Pss_File": "pss_file",
    "Pss_Shmem": "pss_shmem",
    "Shared_Clean": "shared_clean",
    "Shared_Dirty": "shared_dirty",
    "Private_Clean": "private_clean",
    "Private_Dirty": "private_dirty",
    "Swap": "swap",
    "SwapPss": "swap_pss",
    "AnonHugePages": "anon_huge",
}


PF_KTHREAD = 0x00200000  # include/linux/sched.h: the task is a kernel thread


@dataclass(frozen=True)
class StatInfo:
    """Fields of /proc/PID/stat that the sampler needs."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    minflt: int
    majflt: int
    cpu_s: float
    threads: int
    start_ticks: int
    sys_cpu_s: float = 0.0  # the kernel-mode part of cpu_s (stime): page faults are handled there
    rss_pages: int = 0  # field 24: the same counters as status VmRSS, in pages
    # (start_code, start_stack, start_brk): fixed for an address space and randomized at every
    # exec, so a child that shows its parent's layout was forked and has not exec'd (it shares
    # the parent's pages). Zeros when the kernel hides them (another user's process).
    layout: tuple[int, int, int] = (0, 0, 0)
    flags: int = 0  # field 9: the kernel's PF_* flags of the task

    @property
    def kernel_thread(self) -> bool:
        """A kernel thread (kthreadd and its children): no user address space, nothing to read."""
        return bool(self.flags & PF_KTHREAD)


@dataclass(frozen=True)
class CheapSample:
    """The cheap tier: stat + status. Sizes in bytes."""

    stat: StatInfo
    rss: int
    rss_anon: int
    rss_file: int
    rss_shmem: int


@dataclass(frozen=True)
class PssSample:
    """The smaps_rollup tier. Sizes in bytes; ``uss`` is Private_Clean + Private_Dirty."""

    rss: int
    pss: int
    pss_anon: int
    pss_file: int
    pss_shmem: int
    shared_clean: int
    shared_dirty: int
    private_clean: int
    private_dirty: int
    swap: int
    swap_pss: int
    anon_huge: int = 0  # AnonHugePages: a fault there makes 2 MiB private, not 4 KiB

    @property
    def uss(self) -> int:
        return self.private_clean + self.private_dirty


def read_text(path: str, errors: str = "replace") -> str | None:
    """The text of a /proc (or /sys) file, or None when it cannot be read (gone, not ours).
    ``errors="surrogateescape"`` for a file that names paths (/proc/PID/cgroup, mountinfo): a
    byte that is not UTF-8 is kept as :func:`os.fsdecode` keeps it, so the path opens again."""
    text = _read_or_errno(path, errors)
    return text if isinstance(text, str) else None


def _read_or_errno(path: str, errors: str = "replace") -> str | int:
    """The file's text, or the errno that stopped the read."""
    # os.open/os.read rather than open(): no buffered file object, half the cost per read
    # (~10 vs ~22 µs for /proc/PID/stat), and the sampler does a few of these per process per tick.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:  # gone, or not ours to read
        return e.errno or 0
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors)
    except OSError as e:
        # ESRCH and friends: the process went away between open and read.
        return e.errno or 0
    finally:
        os.close(fd)


def parse_stat(text: str) -> StatInfo:
    """Parse /proc/PID/stat; comm may contain spaces and parentheses, so split at the last ')'."""
    lpar, rpar = text.index("("), text.rindex(")")
    pid = int(text[:lpar])
    comm = text[lpar + 1 : rpar]
    f = text[rpar + 2 :].split()
    # f[0] is field 3 (state); man proc numbers fields from 1.
    return StatInfo(
        pid=pid,
        comm=comm,
        state=f[0],
        ppid=int(f[1]),
        pgid=int(f[2]),
        minflt=int(f[7]),
        majflt=int(f[9]),
        cpu_s=(int(f[11]) + int(f[12])) / CLOCK_TICKS,
        threads=int(f[17]),
        start_ticks=int(f[19]),
        sys_cpu_s=int(f[12]) / CLOCK_TICKS,
        rss_pages=int(f[21]) if len(f) > 21 else 0,
        layout=(int(f[23]), int(f[25]), int(f[44])) if len(f) > 44 else (0, 0, 0),
        flags=int(f[6]),
    )


def read_stat(pid: int, tid: int | None = None) -> StatInfo | None:
    """/proc/PID/stat (or a thread's /proc/PID/task/TID/stat); ``None`` if gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    text = read_text(path)
    if not text:
        return None
    try:
        return parse_stat(text)
    except (ValueError, IndexError):
        return None


def _kb_fields(text: str, keys: dict[str, str]) -> dict[str, int]:
    # A search per key, anchored at a line start, rather than splitting every line: status has
    # ~55 lines and the sampler wants 4 of them (0.2 ms -> ~15 µs a read).
    out: dict[str, int] = {}
    text = "\n" + text
    for name, attr in keys.items():
        i = text.find(f"\n{name}:")
        if i >= 0:
            start = i + len(name) + 2
            end = text.find("\n", start)
            out[attr] = int(text[start : end if end >= 0 else None].split()[0]) * KB
    return out


def read_cheap(pid: int) -> CheapSample | None:
    """The cheap tier for one process, or ``None`` if it is gone or a zombie."""
    stat = read_stat(pid)
    if stat is None or stat.state in ("Z", "X"):
        return None
    status = read_text(f"/proc/{pid}/status")
    if status is None:
        return None
    v = _kb_fields(status, _STATUS_KEYS)
    if "rss" not in v:  # kernel threads and exiting processes have no Vm lines
        return None
    return CheapSample(
        stat=stat,
        rss=v["rss"],
        rss_anon=v.get("rss_anon", 0),
        rss_file=v.get("rss_file", 0),
        rss_shmem=v.get("rss_shmem", 0),
    )


def parse_smaps_rollup(text: str) -> PssSample | None:
    v = _kb_fields(text, _ROLLUP_KEYS)
    if "pss" not in v:
        return None
    return PssSample(**{name: v.get(name, 0) for name in _ROLLUP_KEYS.values()})


def read_pss(pid: int) -> PssSample | None:
    """The smaps_rollup tier, or ``None`` if the process is gone, a zombie, or unreadable."""
    got = read_pss_or_denied(pid)
    return got if isinstance(got, PssSample) else None


@dataclass(frozen=True)
class Denied:
    """The kernel refused memprobe a process's memory map (EACCES, EPERM on smaps_rollup): it
    runs as another user (a set-user-ID program, a child that changed its uid) or made itself
    non-dumpable. Its stat and status stay readable: RSS is known, PSS and USS are not."""

    uids: tuple[int, int] | None  # (real, effective) from its status; None if that is gone too


def read_pss_or_denied(pid: int) -> PssSample | Denied | None:
    """:func:`read_pss`, telling a process memprobe may not read (:class:`Denied`) from one that
    is gone, a zombie or exiting (``None``)."""
    text = _read_or_errno(f"/proc/{pid}/smaps_rollup")
    if isinstance(text, int):
        return Denied(read_uids(pid)) if text in (errno.EACCES, errno.EPERM) else None
    return parse_smaps_rollup(text) if text else None


def read_uids(pid: int) -> tuple[int, int] | None:
    """(real, effective) uid of a process, from /proc/PID/status (readable for any process)."""
    text = read_text(f"/proc/{pid}/status")
    line = next((ln for ln in (text or "").splitlines() if ln.startswith("Uid:")), None)
    fields = line.split()[1:3] if line else []
    if len(fields) != 2 or not all(f.isascii() and f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1])


def read_children(pid: int, *, all_threads: bool = True) -> list[int]:
    """Direct children of every thread of ``pid`` (needs CONFIG_PROC_CHILDREN, as on all
    mainstream kernels); an empty list if the process is gone. ``all_threads=False`` reads the
    main thread's only: one read instead of one per thread (torch starts dozens of threads)."""
    if not all_threads:
        text = read_text(f"/proc/{pid}/task/{pid}/children")
        return [int(x) for x in text.split()] if text else []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for tid in tids:
        text = read_text(f"/proc/{pid}/task/{tid}/children")
        if text:
            kids.extend(int(x) for x in text.split())
    return kids


def process_tree(root: int, children: Callable[[int], list[int]] | None = None) -> list[int]:
    """``root`` and all its descendants, parents before children; ``children`` lists a
    process's children (default: :func:`read_children`, every thread's)."""
    children = children or read_children
    order, todo = [], [root]
    seen: set[int] = set()
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        order.append(pid)
        todo.extend(children(pid))
    return order


def processes_in_group(pgid: int) -> list[int]:
    """Every live process whose process group is ``pgid`` (a full /proc scan: slower, used to
    find processes that escaped the tree, e.g. reparented orphans)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None and st.pgid == pgid and st.state not in ("Z", "X"):
                found.append(st.pid)
    return found


def left_group(leader: int) -> dict[int, int]:
    """Descendants of ``leader`` (a process group's leader) that left its group (a ``setsid``
    child): {pid: start ticks}. A signal to the group misses them; the start ticks tell a
    process from a later one that reuses its pid."""
    out = {}
    for pid in process_tree(leader)[1:]:
        st = read_stat(pid)
        if st is not None and st.pgid != leader:
            out[pid] = st.start_ticks
    return out


def read_cmdline(pid: int) -> list[str]:
    text = read_text(f"/proc/{pid}/cmdline")
    return [p for p in (text or "").split("\0") if p]


def thread_ids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def thread_name(pid: int, tid: int) -> str:
    return (read_text(f"/proc/{pid}/task/{tid}/comm") or "").strip()


def dev_shm_used() -> int | None:
    """Bytes in use on /dev/shm (tmpfs), or ``None`` where it does not exist."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def mem_available() -> int | None:
    text = read_text("/proc/meminfo")
    if text is None:
        return None
    return _kb_fields(text, {"MemAvailable": "a"}).get("a")


def boot_id() -> str | None:
    """This boot's id: a pid and its start time name one process only within one boot."""
    return (read_text("/proc/sys/kernel/random/boot_id") or "").strip() or None


def process_identity(pid: int) -> dict:
    """Who ``pid`` is, for good: ``{"pid", "start_ticks", "boot_id"}`` (pid numbers are reused;
    with the start time and the boot they are not). A results folder's manifest names its
    writer so (memprobe.results.folder.ResultsFolder.create)."""
    st = read_stat(pid)
    return {"pid": pid, "start_ticks": st.start_ticks if st else None, "boot_id": boot_id()}


def still_running(identity: Mapping[str, object]) -> bool:
    """Whether the process ``identity`` names (:func:`process_identity`) still runs, on this machine."""
    pid, ticks, boot = identity.get("pid"), identity.get("start_ticks"), identity.get("boot_id")
    if not isinstance(pid, int) or boot != boot_id():
        return False
    st = read_stat(pid)
    return st is not None and st.start_ticks == ticks and st.state not in ("Z", "X")


# kcmp(2): whether two processes share a kernel object; KCMP_VM, their address space.
_SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1
_libc: ctypes.CDLL | None = None


def same_memory(pid: int, other: int) -> bool | None:
    """Whether ``pid`` and ``other`` share one address space (kcmp(2), ``KCMP_VM``): a child
    between vfork (``posix_spawn``, ``subprocess``) and its exec runs in its parent's memory, where
    a forked one has a copy of it. ``None`` where kcmp cannot tell: another architecture, a kernel
    without it, no permission to inspect the processes, one of them gone."""
    global _libc
    if _SYS_KCMP is None:
        return None
    try:
        if _libc is None:  # once: the sampler asks this of every child that shows its parent's layout
            _libc = ctypes.CDLL(None, use_errno=True)
        result = _libc.syscall(_SYS_KCMP, pid, other, _KCMP_VM, 0, 0)
    except (OSError, AttributeError):
        return None
    return None if result < 0 else result == 0
