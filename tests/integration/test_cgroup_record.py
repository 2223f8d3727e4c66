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
if pid == 0:  # a worker that allocates 10 MB at a time, past any small limit, for 2-3 s
    blocks = []
    for _ in range(60):
        blocks.append(bytearray(10_000_000))
        time.sleep(0.1)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(2)  # ends ticks after its worker: ticks 0.5 s apart once named both the kill's victims
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


LEAKING = """
import time
held = []
while True:  # 2 MB every 0.2 s (600 MB/min) until its cgroup's limit kills it
    held.append(bytearray(2_000_000))
    time.sleep(0.2)
"""


def test_a_job_killed_by_its_cgroup_was_told_when_before_it_was(tmp_path: Path, limited: Path) -> None:
    """A main process allocating 600 MB/min in a 720 MB cgroup: killed about a minute in. The
    recording as it stood 15 s before the kill (benchmarks/bench_forecast.py's ``cut``) forecast
    the limit from the main process's own rise at about the kill's time; the whole recording's
    page, terminal and summary.json say the forecast too."""
    # A forecast needs 40 s of record (its latest half 20 s long), and the cut 15 s before the kill
    # must hold them: with 600 MB, 3.13t's interpreter and memprobe (66 MB of it) were killed at
    # 55.4 s, and the cut held 40.2 s of samples.
    (limited / "memory.limit_in_bytes").write_text(str(720 * 1024 * 1024))
    done = _record(tmp_path / "rec", LEAKING, into=limited)
    assert done.returncode == 128 + 9, done.stderr[-2000:]  # killed by the OOM killer
    (run,) = json.loads((tmp_path / "rec" / "summary.json").read_text())["runs"]
    limit = run["memory_limit"]
    assert limit["oom_kills"] == 1 and limit["cgroup_alone"] is True
    kill = limit["oom_killed"][0]["t"]
    f = limit["forecast"]
    assert f["basis"] == "parents" and 400 < f["rate_mb_per_min"] < 800
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_forecast import cut

    from memprobe.analysis.recorded import analyse
    from memprobe.results.folder import ResultSet

    results = ResultSet.load(tmp_path / "rec")
    meta, tables = cut(results, kill - 15.0)
    before = analyse(
        meta, tables["samples"], tables["progress"], system=tables["system"], mem_total_mb=24_000.0
    )
    ahead = before.summary.memory_limit["forecast"]  # type: ignore[index]
    assert ahead["basis"] == "parents", ahead
    assert abs(ahead["limit_at_t"] - kill) < 6.0, (ahead["limit_at_t"], kill)  # 15 s ahead, within 6 s
    page = unescape((tmp_path / "rec" / "report.html").read_text(encoding="utf-8"))
    said = re.search(
        r"time to the limit</dt><dd>720 MB in about [^<]*: main process \+([0-9,]+) MB/min<", page
    )
    assert said, page[page.index("memory limit") :][:2000]
    assert 'id="forecast-words">The main process&#39;s own memory +' in (
        tmp_path / "rec" / "report.html"
    ).read_text(encoding="utf-8")
    assert "memory limit: 720 MB, the job's memory limit (cgroup v1 " in done.stdout + done.stderr
    assert "; time to it: the main process's own memory +" in done.stdout + done.stderr


def _worker_pid(out: Path) -> int:
    samples = pd.read_parquet(out / "samples.parquet")
    (pid,) = samples.loc[samples["role"] == "worker 0", "pid"].unique()
    return int(pid)
