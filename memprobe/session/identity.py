"""Who writes a results folder and on what: the machine's facts a reader needs to interpret the
numbers (:func:`environment`) and this memprobe's own process (:func:`writer_identity`), both in
every manifest, whichever pipeline writes it.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import memprobe
from memprobe.core.system import mem_total_mb
from memprobe.core.vocabulary import gil_enabled
from memprobe.probe import procfs
from memprobe.probe.cgroup import memory_limit_mb


def environment() -> dict[str, Any]:
    """The facts a reader needs to interpret the numbers."""
    try:  # the installed version, without importing torch into the supervisor (seconds)
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = None

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in (procfs.read_text("/proc/cpuinfo") or "").splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "memprobe": memprobe.__version__,
        "torch": torch_version,
        "python": platform.python_version(),
        "python_build": sys.version,
        "gil_enabled": gil_enabled(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "mem_total_mb": mem_total_mb(),
        # The memory the runs must fit in where below the machine's: memprobe's memory cgroup's
        # limit (a container, a scheduler's job), None without one (the report draws either).
        "cgroup_limit_mb": _below(memory_limit_mb(), mem_total_mb()),
        "hostname": platform.node(),
    }


def _below(limit: int, total: int) -> int | None:
    return limit if limit and (not total or limit < total) else None


def writer_identity() -> dict:
    """Who writes a results folder: this memprobe (:func:`memprobe.probe.procfs.process_identity`)."""
    return procfs.process_identity(os.getpid())
