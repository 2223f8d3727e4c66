"""Facts of the machine memprobe runs on that every pipeline reads the same way.

``PAGE_SIZE``: the bytes of one memory page, asked of the system once (4 KiB on x86-64, 16 or
64 KiB on some ARM64 kernels): page counts from /proc (``minflt``, stat's RSS, pagemap entries)
become bytes with it, in the probe while sampling and in the record analysis afterwards.
``run_limit``: the memory a session's runs had to fit in, as its manifest says. Standard library
only.
"""

from __future__ import annotations

import os

from memprobe.core.units import is_num

PAGE_SIZE: int = os.sysconf("SC_PAGE_SIZE")


def mem_total_mb() -> int:
    """The machine's memory (MemTotal in /proc/meminfo), in MB; 0 if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next((int(line.split()[1]) // 1024 for line in f if line.startswith("MemTotal:")), 0)
    except (OSError, ValueError, IndexError):
        return 0


def run_limit(manifest: dict) -> tuple[float | None, str]:
    """The memory a scenario's runs had to fit in, and what it is: memprobe's memory cgroup's
    limit where it was below the machine's memory (the runs are charged to memprobe's cgroup),
    else the machine's memory; (None, "") where neither is known (an older folder)."""
    env = manifest.get("environment") or {}
    own, total = env.get("cgroup_limit_mb"), env.get("mem_total_mb")
    if is_num(own) and own > 0 and not (is_num(total) and total and own >= total):
        return float(own), "memprobe's memory cgroup's limit"
    if is_num(total) and total > 0:
        return float(total), "this machine's memory"
    return None, ""
