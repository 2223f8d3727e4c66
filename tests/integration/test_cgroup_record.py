"""The job's memory cgroup read from a real `memprobe record`: the cgroup this machine puts the
job in, and a job that a cgroup's limit kills (a cgroup made here for it, when this user may: the
OOM killer ends the worker that allocates past 300 MB)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pandas as pd
import pytest

from memprobe.probe import cgroup

JOB = """
import os, time
pid = os.fork()
if pid == 0:  # a worker that allocates 40 MB at a time, past any small limit
    blocks = []
    for _ in range(50):
        blocks.append(bytearray(40_000_000))
        time.sleep(0.1)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.5)
"""


def _record(out: Path, job: str, *, into: Path | None = None) -> subprocess.CompletedProcess:
    """`memprobe record -- python -c JOB`, moved into the cgroup ``into`` first (memprobe and the
    job in it, as in a container or a SLURM step)."""
    argv = [sys.executable, "-m", "memprobe", "record", "-o", str(out), "--", sys.executable, "-c", job]
    enter = (lambda: (into / "cgroup.procs").write_text(str(os.getpid()))) if into else None
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, preexec_fn=enter)


def test_record_reads_the_cgroup_the_job_runs_in(tmp_path: Path) -> None:
    where = cgroup.locate(os.getpid())
    if where is None:
        pytest.skip("no memory cgroup mounted on this machine")
    done = _record(tmp_path / "rec", "import time; time.sleep(0.5)")
    assert done.returncode == 0, done.stderr[-2000:]
    page = unescape((tmp_path / "rec" / "report.html").read_text(encoding="utf-8"))
    assert f"(cgroup v{where.version} {where.path}" in page
    assert "OOM kills in its cgroup</dt><dd>0 while it ran" in page


@pytest.fixture
def limited() -> Iterator[Path]:
    """A memory cgroup of 300 MB made beside this one, or a skip where this user may not."""
    where = cgroup.locate(os.getpid())
    if where is None or where.version != 1:
        pytest.skip("needs a cgroup v1 memory hierarchy this user may write (v2 delegates differently)")
    d = where.directory / f"memprobe-test-{uuid.uuid4().hex[:8]}"
    try:
        d.mkdir()
        (d / "memory.limit_in_bytes").write_text(str(300 * 1024 * 1024))
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here: {exc}")
    try:
        yield d
    finally:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError:  # its last process is still exiting
                time.sleep(0.1)


def test_a_job_killed_by_its_cgroup_s_limit_is_shown_against_that_limit(
    tmp_path: Path, limited: Path
) -> None:
    done = _record(tmp_path / "rec", JOB, into=limited)
    assert done.returncode == 0, done.stderr[-2000:]
    page = unescape((tmp_path / "rec" / "report.html").read_text(encoding="utf-8"))
    assert "memory limit</dt><dd>300 MB (cgroup v1 " in page
    kill = re.search(r"OOM kills in its cgroup</dt><dd>1 while it ran \(at ([0-9.]+) s: ([^<]*)\)<", page)
    assert kill, page[page.index("memory limit") :][:2000]
    worker = _worker_pid(tmp_path / "rec")
    assert kill.group(2) == f"worker 0 (pid {worker})"  # the victim, not main, which ended after it
    (run,) = json.loads((tmp_path / "rec" / "summary.json").read_text())["runs"]
    assert run["memory_limit"]["oom_kills"] == 1
    assert run["memory_limit"]["oom_killed"][0]["victims"] == [f"worker 0 (pid {worker})"]
    assert f"OOM kills in its cgroup: 1 (worker 0 (pid {worker}))" in done.stdout + done.stderr
    # The verdict says it first: a process of the job was killed for memory.
    said = f"The kernel's OOM killer killed 1 process of the job's memory cgroup while it ran: worker 0 (pid {worker}) at "
    assert said in run["culprit"] and said in done.stdout + done.stderr
    assert "(its memory cgroup's limit is 300 MB)." in run["culprit"]
    assert "the job's memory limit (cgroup v1 " in page  # the projection is measured against it
    charts = json.loads(re.search(r'id="memprobe-data">(.*?)</script>', page, re.DOTALL).group(1))["charts"]
    (rss,) = [c for c in charts if c["id"] == "mem-rss"]
    names = [trace["name"] for trace in rss["data"]]
    assert "cgroup charge" in names and "memory limit" in names


def test_a_job_that_moves_itself_into_a_limited_cgroup_is_shown_against_that_limit(
    tmp_path: Path, limited: Path
) -> None:
    """What `cgexec -g memory:G` and `systemd-run --scope -p MemoryMax=` do: memprobe stays where it
    is; the command it started enters the limited cgroup, then runs the job. Its limit, charge and
    OOM kill are the job's (before: the machine's memory, and the kill said machine-wide)."""
    # The job allocates a second after entering (a real job imports its libraries first): the kill
    # must come after memprobe has seen the move, or the cgroup's counter already holds it.
    job = "import time\ntime.sleep(1)\n" + JOB
    enter = f"echo $$ > {limited / 'cgroup.procs'} && exec {sys.executable} -c {shlex.quote(job)}"
    argv = [sys.executable, "-m", "memprobe", "record", "-o", str(tmp_path / "rec"), "--", "sh", "-c", enter]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = json.loads((tmp_path / "rec" / "summary.json").read_text())["runs"]
    limit = run["memory_limit"]
    inside = cgroup.locate(os.getpid())
    assert inside is not None
    assert limit["limit_mb"] == 300.0 and limit["cgroup_path"] == f"{inside.path.rstrip('/')}/{limited.name}"
    worker = _worker_pid(tmp_path / "rec")
    assert limit["oom_kills"] == 1 and limit["oom_killed"][0]["victims"] == [f"worker 0 (pid {worker})"]
    assert limit["machine_oom_killed"] == []
    assert limit["charge_peak_mb"] < 310  # the charge of the cgroup it entered, not of the one memprobe is in
    assert f"OOM kills in its cgroup: 1 (worker 0 (pid {worker}))" in done.stdout + done.stderr
    assert "memory limit: 300 MB, the job's memory limit (cgroup v1 " in done.stdout + done.stderr


RISING = """
import time
held = []
for _ in range(40):  # 20 MB a second for 8 s: 160 MB, under the 300 MB limit
    held.append(bytearray(4_000_000))
    time.sleep(0.2)
"""


def test_a_job_whose_charge_rises_is_told_its_time_to_the_limit(tmp_path: Path, limited: Path) -> None:
    done = _record(tmp_path / "rec", RISING, into=limited)
    assert done.returncode == 0, done.stderr[-2000:]
    page = unescape((tmp_path / "rec" / "report.html").read_text(encoding="utf-8"))
    got = re.search(
        r"time to the limit</dt><dd>([0-9.]+) s after the charge's peak \([0-9,]+ MB\) had it gone on rising at \+([0-9,]+) MB/min",
        page,
    )
    assert got, page[page.index("memory limit") :][:2000]
    assert 600 < float(got.group(2).replace(",", "")) < 1800  # 1,200 MB/min allocated
    assert "OOM kills in its cgroup</dt><dd>0 while it ran<" in page
    # The terminal and summary.json say it too.
    assert "memory limit: 300 MB, the job's memory limit (cgroup v1 " in done.stdout + done.stderr
    assert "; time to it: " in done.stdout + done.stderr
    (run,) = json.loads((tmp_path / "rec" / "summary.json").read_text())["runs"]
    limit = run["memory_limit"]
    assert (
        limit["limit_mb"] == 300.0
        and limit["oom_kills"] == 0
        and 600 < limit["charge_rate_mb_per_min"] < 1800
    )
    assert limit["minutes_to_limit"] > 0 and limit["charge_peak_mb"] > limit["charge_start_mb"]


def _worker_pid(out: Path) -> int:
    samples = pd.read_parquet(out / "samples.parquet")
    (pid,) = samples.loc[samples["role"] == "worker 0", "pid"].unique()
    return int(pid)
