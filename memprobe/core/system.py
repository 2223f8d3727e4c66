"""Facts of the machine memprobe runs on that every pipeline reads the same way.

``PAGE_SIZE``: the bytes of one memory page, asked of the system once (4 KiB on x86-64, 16 or
64 KiB on some ARM64 kernels): page counts from /proc (``minflt``, stat's RSS, pagemap entries)
become bytes with it, in the probe while sampling and in the record analysis afterwards.
Standard library only.
"""

from __future__ import annotations

import os

PAGE_SIZE: int = os.sysconf("SC_PAGE_SIZE")


def mem_total_mb() -> int:
    """The machine's memory (MemTotal in /proc/meminfo), in MB; 0 if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next((int(line.split()[1]) // 1024 for line in f if line.startswith("MemTotal:")), 0)
    except (OSError, ValueError, IndexError):
        return 0
