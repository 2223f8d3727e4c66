"""memprobe.SharedList under real DataLoaders, measured by memprobe itself: forked workers stay
flat where a list's grow, spawned workers share one copy, a killed job leaves nothing behind.

Measured on the 2-core dev machine (memprobe.profile, 2 workers, gc_freeze): fork, 200k records,
60k items: a list of dicts +37.6 MB USS per worker, the same records in a SharedList +0.5..0.6 MB;
spawn, a 143 MB SharedList: total PSS +144.8 MB over the same job with empty blobs, each worker's
USS 151.9 MB in both. Built without mapping every page in the builder, the spawned workers' USS
was 184-199 MB (pages only one worker maps are its own); pickled as bytes, total PSS +497 MB.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from shared_list_datasets import annotations

import memprobe
from memprobe.datasets.shared_list import MEMFD_NAME

pytestmark = pytest.mark.slow


def _profile(
    tmp_path: Path, name: str, mode: str, items: int | None, **kwargs: Any
) -> memprobe.ProfileResult:
    result = memprobe.profile(
        annotations,
        kwargs=kwargs,
        mode=mode,
        workers=2,
        items=items,
        batch_size=256,
        gc_freeze=True,  # the interpreter's own one-off copy is not the container's
        out=tmp_path / name,
    )
    result.assert_ok()
    return result


def test_fork_workers_reading_a_shared_list_stay_flat_where_a_lists_grow(tmp_path: Path) -> None:
    """Every record read from a list of dicts writes its objects' reference counts: the worker
    copies those pages. The same records in a SharedList are bytes in a read-only mapping."""
    listed = _profile(tmp_path, "list", "fork", 60_000, records=200_000, shared=False)
    shared = _profile(tmp_path, "shared", "fork", 60_000, records=200_000, shared=True)
    assert all(w.growth_mb > 25 for w in listed.workers), listed.workers
    with pytest.raises(AssertionError, match="copy-on-access"):
        listed.assert_flat(max_worker_growth_mb=8)
    shared.assert_flat(max_worker_growth_mb=8)
    assert shared.verdict == "flat", shared.summary.explanation


def test_spawn_workers_share_one_copy_of_the_buffer_in_total_pss(tmp_path: Path) -> None:
    """Spawn pickles the dataset into every worker: a list (or a numpy buffer) is there three
    times with 2 workers. A SharedList sends its descriptor: total PSS grows by one copy of the
    buffer over the same job with empty blobs, whatever the workers read."""
    blob, records = 60_000, 2_500  # ~150 MB of records
    buffer_mb = blob * records / 2**20
    tiny = _profile(tmp_path, "tiny", "spawn", 2_000, records=records, shared=True, blob=0)
    big = _profile(tmp_path, "big", "spawn", 2_000, records=records, shared=True, blob=blob)
    assert tiny.summary.total_pss_peak_mb is not None and big.summary.total_pss_peak_mb is not None
    added = big.summary.total_pss_peak_mb - tiny.summary.total_pss_peak_mb
    # One copy, not three (a list's or numpy's: 2.6 x more), nor none. The two peaks are two jobs'
    # totals of ~1 GB (each spawned worker imports torch), read at their own few exact rounds:
    # +112.7 MB for 143 once, on 3.13 in the suite at 1e9da46 (the peaks at each job's last round).
    assert 0.6 * buffer_mb < added < 1.4 * buffer_mb, (added, buffer_mb)
    # and no worker holds it as its own memory
    big.assert_flat(max_worker_growth_mb=8)
    assert all(w.uss_end_mb < tiny.workers[0].uss_end_mb + 0.2 * buffer_mb for w in big.workers), big.workers


JOB = """
import sys, time
from torch.utils.data import DataLoader
sys.path.insert(0, {here!r})
from shared_list_datasets import annotations
loader = DataLoader(annotations(2_000, True, 20_000), num_workers=2, multiprocessing_context={mode!r},
                    batch_size=8, persistent_workers=True)
it = iter(loader)
next(it), next(it)  # one batch from each worker (in order): both have unpickled the dataset
print(*[w.pid for w in it._workers], flush=True)
time.sleep({sleep})
assert sum(len(batch["id"]) for batch in it) == 2_000 - 16
"""


def _new_segments(before: set[str], job: set[int]) -> set[str]:
    """What appeared in /dev/shm since ``before`` and is the job's: less multiprocessing's
    semaphores and torch's segments of processes outside the job (``torch_<pid>_...``: other tests
    and other sessions on the machine run DataLoaders too; seen in 3.13's suite)."""
    new = set(os.listdir("/dev/shm")) - before
    theirs = {n for n in new if (m := re.match(r"torch_(\d+)_", n)) and int(m[1]) not in job}
    return {n for n in new - theirs if not n.startswith("sem.mp-")}


def _cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` (/proc/PID/stat fields 14 and 15), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _wait_idle(pids: list[int], quiet_s: float = 0.6, timeout_s: float = 60) -> None:
    """Until no process of ``pids`` has run for ``quiet_s``: the workers have filled their prefetch
    and wait for indices. A worker killed while it builds a batch can leave one of torch's own
    segments: its file_descriptor strategy opens ``/dev/shm/torch_<pid>_<rand>_<n>`` and unlinks
    it just after (seen once in CI, on a loaded machine: ``torch_8111_2729525093_13``); that
    window is torch's, not the SharedList's, whose buffer is never a named segment."""
    deadline, last, still = time.monotonic() + timeout_s, None, 0.0
    while time.monotonic() < deadline and still < quiet_s:
        now = [_cpu_ticks(pid) for pid in pids]
        still = still + 0.1 if now == last else 0.0
        last = now
        time.sleep(0.1)
    assert still >= quiet_s, f"the workers {pids} kept running for {timeout_s} s"


def _maps_of(pid: int) -> set[str]:
    """The inodes of the SharedList memory files ``pid`` maps."""
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[4] for line in f if f"/memfd:{MEMFD_NAME}" in line}


@pytest.mark.parametrize("mode", ["spawn", "forkserver"])
def test_a_killed_job_leaves_nothing_in_dev_shm_and_its_workers_map_the_parents_file(mode: str) -> None:
    """The buffer is one anonymous memory file that the main process and every worker map (the
    same inode); SIGKILL to the whole job (its resource tracker too) leaves no segment behind."""
    before = set(os.listdir("/dev/shm"))
    job = subprocess.Popen(
        [sys.executable, "-c", JOB.format(here=str(Path(__file__).parent), mode=mode, sleep=120)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert job.stdout is not None
        workers = [int(p) for p in job.stdout.readline().split()]
        assert len(workers) == 2, workers
        inodes = _maps_of(job.pid)
        assert len(inodes) == 1, inodes
        for pid in workers:
            assert _maps_of(pid) == inodes
        _wait_idle(workers)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    left = _new_segments(before, {job.pid, *workers})
    assert not left, left


@pytest.mark.parametrize("mode", ["spawn", "forkserver"])
def test_a_job_that_ends_leaves_no_warning_and_no_segment(mode: str) -> None:
    """A job that runs its epoch to the end gets no resource-tracker warning (multiprocessing's
    resource tracker warns on stderr of a named segment nobody unlinked; the buffer is not one)
    and leaves nothing in /dev/shm."""
    before = set(os.listdir("/dev/shm"))
    job = subprocess.Popen(
        [sys.executable, "-c", JOB.format(here=str(Path(__file__).parent), mode=mode, sleep=0)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    # (torch may warn of more workers than CPUs on a small machine: not ours)
    assert "resource_tracker" not in err and "leaked" not in err, err
    workers = {int(p) for p in out.split("\n", 1)[0].split()}
    left = _new_segments(before, {job.pid, *workers})
    assert not left, left


def test_the_public_name_imports_neither_torch_nor_pyarrow() -> None:
    code = (
        "import sys, memprobe; s = memprobe.SharedList([{'a': 1}]); assert s[0] == {'a': 1}; "
        "print(sorted({'torch', 'pyarrow', 'numpy', 'pandas'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
