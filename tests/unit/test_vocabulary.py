"""The mode and role vocabulary: importable anywhere, and every part of memprobe knows every mode."""

from __future__ import annotations

import pandas as pd
import pytest

from memprobe.core import series
from memprobe.core import vocabulary as v
from memprobe.decode import check_mode_supported


@pytest.mark.parametrize("mode", [*v.MODES, v.SINGLE])
def test_the_decode_workload_accepts_every_mode(mode: str) -> None:
    assert check_mode_supported("pillow", "pillow", mode) is None


def test_worker_processes_only_in_process_modes_with_workers() -> None:
    assert [m for m in v.MODES if v.has_worker_processes(m, 2)] == ["fork", "spawn", "forkserver"]
    assert not v.has_worker_processes("fork", 0) and not v.has_worker_processes(v.SINGLE, 0)


def test_roles_in_reading_order() -> None:
    roles = ["resource tracker", "worker 10", "rank 1 worker 0", "worker 2", "main", "rank 1", "forkserver"]
    assert v.role_order(roles) == [
        "main",
        "worker 2",
        "worker 10",
        "rank 1",
        "rank 1 worker 0",
        "forkserver",
        "resource tracker",
    ]
    assert [r for r in roles if v.is_helper(r)] == ["resource tracker", "forkserver"]
    assert [r for r in roles if v.is_worker_role(r)] == ["worker 10", "rank 1 worker 0", "worker 2"]


def test_worker_threads_get_their_own_cpu_band() -> None:
    """The sampler reads the names the thread loader gives its threads; the report bands them."""
    threads = pd.DataFrame(
        {
            "t": [0.0, 1.0, 0.0, 1.0],
            "tid": [7, 7, 8, 8],
            "name": [v.worker_thread_name(0)] * 2 + ["python"] * 2,
            "cpu_s": [0.0, 0.5, 0.0, 0.1],
        }
    )
    assert {c.band for c in series.thread_counters(threads, main_pid=8)} == {"worker thread 0", "main thread"}
