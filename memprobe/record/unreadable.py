"""What ``memprobe watch PID`` (and ``top``) says of a process whose memory it cannot read, and
what would read it, for who memprobe runs as: a kernel thread has no memory to watch, whoever
asks; another user's process, or one that is not dumpable, is root's to read; root refused lacks
CAP_SYS_PTRACE (a container drops it) or meets a security module, and is never told to run as
root. The reason itself is the sampler's (:func:`memprobe.probe.sampler.denied_reason`).
"""

from __future__ import annotations

import os

from memprobe.core.text import printable
from memprobe.probe import procfs

CAP_SYS_PTRACE = 19  # include/uapi/linux/capability.h


def unreadable(pid: int, st: procfs.StatInfo) -> str:
    """Why memprobe cannot read the memory of ``pid``, and what would: a kernel thread has none
    (root or not); another user's process or one that is not dumpable is root's to read; root
    refused lacks CAP_SYS_PTRACE (a container drops it) or meets a security module."""
    from memprobe.probe.sampler import denied_reason

    who = f"pid {pid} ({printable(st.comm)})"
    if st.kernel_thread:
        return (
            f"{who} is a kernel thread: it has no memory of its own to watch (no user address space); "
            "give the pid of a job's process (its launcher or main process)"
        )
    got = procfs.read_pss_or_denied(pid)
    if isinstance(got, procfs.PssSample):  # readable after all (it was busy changing)
        return f"cannot read /proc/{pid}/smaps_rollup: try again"
    if got is None:
        return f"cannot read /proc/{pid}/smaps_rollup: {who} is exiting (its memory is being freed)"
    euid = os.geteuid()
    why = f"cannot read /proc/{pid}/smaps_rollup: {denied_reason(got, euid)}"
    if euid != 0:
        if got.uids is not None and got.uids[1] == euid:  # its own user's, not dumpable
            return f"{why}: run memprobe as root (a process that is not dumpable is root's alone to read)"
        return f"{why}: watch a process of your own user, or run memprobe as root"
    if not _capable(CAP_SYS_PTRACE):
        return (
            f"{why}: memprobe runs as root without CAP_SYS_PTRACE, which reading another process's "
            "memory takes (a container drops it: docker run --cap-add SYS_PTRACE)"
        )
    return f"{why}: refused to root too: a security module (Yama's ptrace_scope 3, SELinux, AppArmor)"


def _capable(cap: int) -> bool:
    """Whether memprobe's effective capabilities hold ``cap`` (/proc/self/status CapEff)."""
    text = procfs.read_text("/proc/self/status") or ""
    line = next((ln for ln in text.splitlines() if ln.startswith("CapEff:")), "")
    try:
        return bool(int(line.split()[1], 16) >> cap & 1)
    except (IndexError, ValueError):
        return True  # not known: not the reason to give
