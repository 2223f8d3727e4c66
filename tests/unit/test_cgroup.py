"""The job's memory cgroup, read from fixture trees of cgroup v1 and v2 (a /proc with the
process's cgroup file and memprobe's mountinfo, and the cgroup files under their mounts): the
limit that applies (the lowest on the cgroup and above it), the charge and the OOM kills."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memprobe.core.text import printable
from memprobe.probe import cgroup

MiB = 1024 * 1024
V1_NONE = "9223372036854771712"  # what v1 writes for no limit


def _proc(tmp: Path, cgroup_lines: str, mounts: list[tuple[str, Path, str, str]]) -> Path:
    """A /proc with process 42's cgroup file and memprobe's mountinfo: (root, point, fstype, options)."""
    proc = tmp / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "42" / "cgroup").write_text(cgroup_lines)
    lines = [
        f"{30 + i} 23 0:{28 + i} {root} {str(point).replace(' ', chr(92) + '040')} rw,relatime - {fstype} cgroup {opts}"
        for i, (root, point, fstype, opts) in enumerate(mounts)
    ]
    (proc / "self" / "mountinfo").write_text("\n".join(["22 1 8:1 / / rw - ext4 /dev/vda rw", *lines]) + "\n")
    return proc


def _files(d: Path, **files: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text)


def test_v1_reads_the_limit_set_above_the_job_s_cgroup(tmp_path: Path) -> None:
    """SLURM's v1 layout: the limit on the job's cgroup, the step's below it unlimited; memory.stat's
    hierarchical_memory_limit is the one that applies. cpu and memory on separate mounts."""
    mount = tmp_path / "sys fs" / "memory"  # a space in the mount point: escaped in mountinfo
    step = mount / "slurm" / "uid_1000" / "job_7" / "step_0"
    _files(
        step,
        memory_limit_in_bytes=V1_NONE,
        memory_stat=f"cache 4096\nhierarchical_memory_limit {32 * 1024 * MiB}\ntotal_rss 1\n",
        memory_usage_in_bytes=str(3000 * MiB),
        memory_oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    )
    proc = _proc(
        tmp_path,
        "9:cpu,cpuacct:/slurm/uid_1000/job_7/step_0\n4:memory:/slurm/uid_1000/job_7/step_0\n0::/\n",
        [("/", tmp_path / "cpu", "cgroup", "rw,cpu,cpuacct"), ("/", mount, "cgroup", "rw,memory")],
    )
    where = cgroup.locate(42, proc)
    assert where is not None and where.version == 1 and where.directory == step
    got = cgroup.read(where)
    assert got.limit_bytes == 32 * 1024 * MiB and got.usage_bytes == 3000 * MiB and got.oom_kills == 2
    assert got.to_dict() == {
        "version": 1,
        "path": "/slurm/uid_1000/job_7/step_0",
        "limit_mb": 32768.0,
        "usage_mb": 3000.0,
        "oom_kills": 2,
    }


def test_v1_without_a_limit_says_unlimited(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    _files(
        mount / "docker" / "abc",
        memory_limit_in_bytes=V1_NONE,
        memory_stat=f"hierarchical_memory_limit {V1_NONE}\n",
        memory_usage_in_bytes="1048576",
    )
    proc = _proc(tmp_path, "4:memory:/docker/abc\n", [("/", mount, "cgroup", "rw,memory")])
    got = cgroup.read(cgroup.locate(42, proc))  # type: ignore[arg-type]
    assert got.limit_bytes is None and got.usage_bytes == MiB
    assert got.oom_kills is None  # a kernel without the counter: not known, not 0


def test_v2_takes_the_lowest_memory_max_on_the_way_up(tmp_path: Path) -> None:
    """Kubernetes on v2: the pod's cgroup limits, the container's below it says max."""
    mount = tmp_path / "cgroup"
    pod = mount / "kubepods.slice" / "pod1"
    _files(mount, memory_max="max")  # the root has no memory.max; a file of max is the same
    _files(mount / "kubepods.slice", memory_max=str(64 * 1024 * MiB))
    _files(pod, memory_max=str(16 * 1024 * MiB))
    _files(
        pod / "ctr",
        memory_max="max",
        memory_current=str(900 * MiB),
        memory_events="low 0\nmax 3\noom 1\noom_kill 1\n",
    )
    proc = _proc(tmp_path, "0::/kubepods.slice/pod1/ctr\n", [("/", mount, "cgroup2", "rw,nsdelegate")])
    where = cgroup.locate(42, proc)
    assert where is not None and where.version == 2
    got = cgroup.read(where)
    assert (got.limit_bytes, got.usage_bytes, got.oom_kills) == (16 * 1024 * MiB, 900 * MiB, 1)


def test_v2_inside_a_cgroup_namespace_and_unlimited(tmp_path: Path) -> None:
    """A container with its own cgroup namespace mounts its cgroup as the root: /proc says "/"."""
    mount = tmp_path / "cgroup"
    _files(mount, memory_max="max", memory_current="4096")
    proc = _proc(tmp_path, "0::/\n", [("/", mount, "cgroup2", "rw")])
    got = cgroup.read(cgroup.locate(42, proc))  # type: ignore[arg-type]
    assert got.limit_bytes is None and got.usage_bytes == 4096


def test_a_mount_rooted_below_the_hierarchy_s_root_strips_that_root(tmp_path: Path) -> None:
    """A container that sees the host's v1 hierarchy mounted at its own cgroup: the mount's root
    is the cgroup's path, and the files are at the mount point itself."""
    mount = tmp_path / "memory"
    _files(mount, memory_limit_in_bytes=str(2048 * MiB), memory_usage_in_bytes="0")
    proc = _proc(tmp_path, "4:memory:/docker/abc\n", [("/docker/abc", mount, "cgroup", "rw,memory")])
    where = cgroup.locate(42, proc)
    assert where is not None and where.directory == mount
    assert cgroup.read(where).limit_bytes == 2048 * MiB


def test_no_cgroup_file_or_no_memory_controller_is_none(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "4:cpu:/x\n", [("/", tmp_path / "cpu", "cgroup", "rw,cpu")])
    assert cgroup.locate(42, proc) is None
    assert cgroup.locate(43, proc) is None  # gone


# -- on the record page: the charge's rate, the time to the limit, the OOM kills ------------------


def test_the_charge_s_own_rate_is_taken_over_the_last_third_up_to_its_peak() -> None:
    """A fact of the whole cgroup (summary.json ``charge_rate_mb_per_min``), never the forecast
    (test_forecast.py)."""
    import pandas as pd

    from memprobe.analysis.limit import charge_rate

    t = [float(x) for x in range(0, 61)]
    flat_then_rising = pd.Series([100.0 if x < 40 else 100.0 + (x - 40) * 2.0 for x in t], index=t)
    assert charge_rate(flat_then_rising) == pytest.approx(120.0)  # 2 MB/s over its last 20 s
    assert charge_rate(pd.Series([100.0] * 61, index=t)) == pytest.approx(0.0)
    # A job that ended freed its memory in its last seconds: the rise up to the peak counts.
    ended = pd.concat([flat_then_rising, pd.Series([60.0, 60.0], index=[61.0, 62.0])])
    assert charge_rate(ended) == pytest.approx(120.0)
    assert charge_rate(pd.Series([1.0, 2.0], index=[0.0, 1.0])) is None  # too short


def test_an_oom_kill_names_the_process_that_vanished_with_it_not_those_that_ended_later() -> None:
    import pandas as pd

    from memprobe.analysis.limit import oom_kills

    system = pd.DataFrame({"t": [0.0, 1.0, 2.0, 3.0], "cgroup_oom_kills": [0, 0, 1, 1]})
    samples = pd.DataFrame(
        {
            "t": [2.2, 2.6],
            "pid": [11, 10],
            "role": ["worker 0", "main"],
            "missing": [True, True],
        }
    )
    # Counted at 2.0, seen gone at the next tick: the first to vanish is the one named, with the
    # time it was seen gone; main ended after it.
    assert oom_kills(system, samples) == [(2.2, ["worker 0 (pid 11)"])]
    samples.loc[0, "t"] = 1.5  # gone between the two readings
    assert oom_kills(system, samples) == [(1.5, ["worker 0 (pid 11)"])]
    assert oom_kills(system.drop(columns="cgroup_oom_kills"), samples) == []
    # The record ended before the next reading: the count in meta.json is the last one.
    early = system.iloc[:2]
    assert oom_kills(early, samples) == []
    assert oom_kills(early, samples, final=1) == [(1.5, ["worker 0 (pid 11)"])]


def test_the_machines_oom_kill_counter_is_read_from_vmstat(tmp_path: Path) -> None:
    from memprobe.probe.cgroup import machine_oom_kills

    (tmp_path / "vmstat").write_text("nr_free_pages 12345\noom_kill 29\nnr_dirty 7\n")
    assert machine_oom_kills(tmp_path) == 29
    (tmp_path / "vmstat").write_text("nr_free_pages 12345\n")  # a kernel without the counter
    assert machine_oom_kills(tmp_path) is None


def test_a_machine_oom_kill_is_the_jobs_only_if_a_process_of_it_vanished_right_after() -> None:
    """The machine's counter (machine-wide) rose twice: at 2 s a worker of the job vanished right
    after (the job's); at 5 s nothing of the job did (another program's: not said). A rise the
    cgroup's own counter saw too is the cgroup's kill, said once, as the cgroup's."""
    import pandas as pd

    from memprobe.analysis.limit import against_limit, machine_oom_kills, oom_words

    t = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    system = pd.DataFrame({"t": t, "machine_oom_kills": [29, 29, 30, 30, 30, 31, 31, 31]})
    samples = pd.DataFrame(
        {
            "t": [0.0, 2.2, 6.5, 7.5],
            "pid": [10, 11, 12, 10],
            "role": ["main", "worker 0", "worker 1", "main"],
            "missing": [False, True, True, True],
        }
    )
    # Worker 1 vanished 1.5 s after the rise at 5 s: too late to be laid at the job's door.
    assert machine_oom_kills(system, samples) == [(2.2, 1, ["worker 0 (pid 11)"])]
    assert machine_oom_kills(system.drop(columns="machine_oom_kills"), samples) == []
    # The job's cgroup counted a kill in the same second: the cgroup's, not said twice.
    counted = system.assign(cgroup_oom_kills=[0, 0, 1, 1, 1, 1, 1, 1])
    assert machine_oom_kills(counted, samples) == []

    meta = {
        "cgroup": {"version": 1, "path": "/", "limit_mb": None, "oom_kills": None, "oom_kills_at_start": None}
    }
    limit = against_limit(meta, samples, system, 24_000.0)
    assert limit is not None and limit["machine_oom_killed"] == [
        {"t": 2.2, "kills": 1, "victims": ["worker 0 (pid 11)"]}
    ]
    words = oom_words(limit)
    assert words is not None and "machine-wide" in words and "worker 0 (pid 11) at 2.2 s" in words
    assert words.startswith("The machine's OOM killer killed 1 process while the job ran")
    # The terminal's line and the record page's facts say it too, machine-wide.
    from memprobe.cli.recording import limit_line
    from memprobe.report.record_tables import cgroup_facts

    assert "the machine's OOM killer (machine-wide) killed 1 right before the job lost worker 0 (pid 11)" in (
        limit_line(limit)
    )
    facts = dict(cgroup_facts(limit, 24_000.0))
    assert (
        "machine-wide" in facts["OOM kills on the machine"]
        and "worker 0 (pid 11)" in facts["OOM kills on the machine"]
    )


def test_a_kill_between_the_two_counters_reads_of_a_tick_is_the_cgroup_s_not_the_machine_s() -> None:
    """The sampler reads the cgroup's counter, then the machine's; a loaded machine can run the
    kill between the two reads. Seen (test_cgroup_record.py, 3 pytest workers and 2 CPU hogs on 2 cores): the
    machine's counter risen at 2.02 s, the cgroup's still 0 there, its rise only in the count at
    the end (the job ended at 2.62 s, before the next reading): said once, as the cgroup's (before:
    said twice, the second time machine-wide). And the other way round: the cgroup's counter
    risen a tick before the machine's."""
    import pandas as pd

    from memprobe.analysis.limit import against_limit, machine_oom_kills, oom_kills

    system = pd.DataFrame(
        {
            "t": [0.0113, 1.0205, 2.0212],
            "cgroup_mb": [2466.0, 4.7, 272.8],
            "cgroup_oom_kills": [0, 0, 0],
            "machine_oom_kills": [95, 95, 96],
        }
    )
    samples = pd.DataFrame(
        {
            "t": [0.0, 2.254, 2.6239],
            "pid": [7875, 7888, 7875],
            "role": ["main", "worker 0", "main"],
            "missing": [False, True, True],
        }
    )
    meta = {
        "cgroup": {
            "version": 1,
            "path": "/job/limited",
            "limit_mb": 300.0,
            "usage_mb": 0.3,
            "usage_at_start_mb": 4.7,
            "oom_kills": 1,
            "oom_kills_at_start": 0,
            "since_t": 0.2152,
        }
    }
    limit = against_limit(meta, samples, system, 24_000.0)
    assert limit is not None and limit["oom_kills"] == 1
    assert limit["oom_killed"] == [{"t": 2.254, "victims": ["worker 0 (pid 7888)"]}]
    assert limit["machine_oom_killed"] == []
    # Without the count at the end, nothing says the cgroup's counter rose: the machine's, as before.
    assert machine_oom_kills(system, samples, since=0.2152) == [(2.254, 1, ["worker 0 (pid 7888)"])]
    # A kill between the job's entry (0.22 s) and the cgroup's first reading after it (1.02 s):
    # listed, with whom, against the count at entry (before: not listed, and said machine-wide).
    entered = system.assign(cgroup_oom_kills=[0, 1, 1], machine_oom_kills=[95, 96, 96])
    limit = against_limit(meta, samples.assign(t=[0.0, 0.8, 2.6239]), entered, 24_000.0)
    assert limit is not None and limit["oom_killed"] == [{"t": 0.8, "victims": ["worker 0 (pid 7888)"]}]
    assert limit["machine_oom_killed"] == []
    # No sample at all (a command that ended at once): the kill at the last reading, not at NaN.
    assert oom_kills(system, samples.iloc[0:0], final=1, since=0.2152) == [(2.0212, [])]
    # Read the other way round (a job that stayed in its cgroup): the cgroup's counter risen at
    # 1.02 s, the machine's only at the next tick.
    early = system.assign(cgroup_oom_kills=[0, 1, 1])
    assert machine_oom_kills(early, samples, final=1) == []


def test_what_the_charge_is_made_of_is_read_from_memory_stat_on_v1_and_v2(tmp_path: Path) -> None:
    """The charge is not total PSS: the page says by what (anonymous memory, page cache, shared
    memory, the kernel's), from memory.stat, each version's own keys (v1 hierarchical totals,
    its cache including shmem; v2's file including shmem)."""
    from memprobe.report.record_tables import cgroup_facts

    v1 = tmp_path / "memory" / "job"
    _files(
        v1,
        memory_limit_in_bytes=V1_NONE,
        memory_stat=(
            f"cache 1\nrss 1\nshmem 1\ntotal_cache {300 * MiB}\ntotal_rss {500 * MiB}\n"
            f"total_shmem {40 * MiB}\nhierarchical_memory_limit {V1_NONE}\n"
        ),
        memory_usage_in_bytes=str(830 * MiB),
    )
    got = cgroup.read(
        cgroup.locate(42, _proc(tmp_path / "a", "4:memory:/job\n", [("/", v1.parent, "cgroup", "rw,memory")]))
    )  # type: ignore[arg-type]
    assert got.to_dict()["parts_mb"] == {
        "anonymous": 500.0,
        "page_cache": 260.0,
        "shared_memory": 40.0,
        "kernel_and_other": 30.0,
    }
    v2 = tmp_path / "cgroup"
    _files(
        v2,
        memory_max="max",
        memory_current=str(700 * MiB),
        memory_stat=f"anon {400 * MiB}\nfile {250 * MiB}\nshmem {50 * MiB}\nkernel {45 * MiB}\n",
    )
    got = cgroup.read(cgroup.locate(42, _proc(tmp_path / "b", "0::/\n", [("/", v2, "cgroup2", "rw")])))  # type: ignore[arg-type]
    parts = got.to_dict()["parts_mb"]
    assert parts == {"anonymous": 400.0, "page_cache": 200.0, "shared_memory": 50.0, "kernel_and_other": 50.0}
    facts = dict(
        cgroup_facts(
            {"cgroup_version": 2, "cgroup_path": "/", "charge_end_mb": 700.0, "charge_end_parts_mb": parts},
            24_000.0,
        )
    )
    assert facts["the charge at its end"].startswith(
        "400 MB anonymous memory (what PSS and USS count); 200 MB page cache (files read or written"
    )
    _files(v2, memory_stat="anon 1\n")  # a kernel whose memory.stat lacks a part: none said
    assert (
        "parts_mb"
        not in cgroup.read(
            cgroup.locate(42, _proc(tmp_path / "c", "0::/\n", [("/", v2, "cgroup2", "rw")]))
        ).to_dict()
    )  # type: ignore[arg-type]


def test_a_job_that_moves_into_another_cgroup_is_followed_there(tmp_path: Path) -> None:
    """cgexec and systemd-run --scope: the command memprobe started moves itself into the cgroup
    that limits it, then runs the job. The cgroup is found again where /proc/PID/cgroup changed,
    read as it was entered, and kept where the process is gone."""
    mount = tmp_path / "memory"
    _files(
        mount / "outer", memory_limit_in_bytes=V1_NONE, memory_stat="", memory_usage_in_bytes=str(3000 * MiB)
    )
    _files(
        mount / "outer" / "job",
        memory_limit_in_bytes=str(700 * MiB),
        memory_stat=f"hierarchical_memory_limit {700 * MiB}\n",
        memory_usage_in_bytes=str(5 * MiB),
        memory_oom_control="oom_kill 4\n",
    )
    proc = _proc(tmp_path, "4:memory:/outer\n0::/\n", [("/", mount, "cgroup", "rw,memory")])
    first = cgroup.Entered.of(42, proc)
    assert first is not None and first.where.path == "/outer" and first.t == 0.0
    assert first.at_entry.usage_bytes == 3000 * MiB and first.at_entry.limit_bytes is None
    assert first.followed(42, 0.5, proc) is first  # still there: the same, no cgroup file read
    (proc / "42" / "cgroup").write_text("4:memory:/outer/job\n0::/\n")
    moved = first.followed(42, 1.0, proc)
    assert moved.where.path == "/outer/job" and moved.where.directory == mount / "outer" / "job"
    assert moved.t == 1.0 and moved.at_entry.limit_bytes == 700 * MiB and moved.at_entry.oom_kills == 4
    assert moved.followed(42, 2.0, proc) is moved
    (proc / "42" / "cgroup").unlink()  # the process is gone: its last cgroup stays the job's
    assert moved.followed(42, 3.0, proc) is moved


def test_the_charge_and_kills_of_the_cgroup_the_job_left_are_not_its() -> None:
    """The job entered a 700 MB cgroup 2 s after the start: the 3,000 MB charged to the one it
    left, and that one's OOM kill, are not the job's; its own kill is, and the machine's counter
    that rose with it is the cgroup's (not said machine-wide)."""
    import pandas as pd

    from memprobe.analysis.limit import against_limit

    t = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    system = pd.DataFrame(
        {
            "t": t,
            "cgroup_mb": [3000.0, 3100.0, 100.0, 250.0, 400.0, 550.0, 690.0, 120.0],
            "cgroup_oom_kills": [8, 9, 4, 4, 4, 4, 5, 5],
            "machine_oom_kills": [40, 41, 41, 41, 41, 41, 42, 42],
        }
    )
    samples = pd.DataFrame(
        {
            "t": [0.0, 6.3, 7.0, 7.4],
            "pid": [10, 11, 10, 10],
            "role": ["main", "worker 0", "main", "main"],
            "missing": [False, True, False, True],
        }
    )
    meta = {
        "cgroup": {
            "version": 1,
            "path": "/outer/job",
            "limit_mb": 700.0,
            "usage_mb": 120.0,
            "usage_at_start_mb": 100.0,
            "oom_kills": 5,
            "oom_kills_at_start": 4,
            "since_t": 2.0,
        }
    }
    limit = against_limit(meta, samples, system, 24_000.0)
    assert limit is not None and limit["limit_mb"] == 700.0
    assert limit["charge_peak_mb"] == 690.0  # not the 3,100 MB of the cgroup it left
    assert limit["charge_rate_mb_per_min"] == pytest.approx(147.0 * 60, rel=0.05)
    assert limit["oom_kills"] == 1 and limit["oom_killed"] == [{"t": 6.3, "victims": ["worker 0 (pid 11)"]}]
    assert limit["machine_oom_killed"] == []
    # Without since_t (a job that stayed in one cgroup), every reading counts, as before.
    del meta["cgroup"]["since_t"]
    assert against_limit(meta, samples, system, 24_000.0)["charge_peak_mb"] == 3100.0  # type: ignore[index]


def test_a_cgroup_whose_name_is_not_utf8_is_found_and_read(tmp_path: Path) -> None:
    """A cgroup's name is any bytes but "/": one that is not UTF-8 (``lim\\xffit``, 350 MB) is the
    job's limit, its path shown with the byte escaped (before: decoded with replacement
    characters, its directory not found, and the job shown against the machine's memory)."""
    mount = tmp_path / "memory"
    name = os.fsdecode(b"lim\xffit")
    _files(
        mount / name,
        memory_limit_in_bytes=str(350 * MiB),
        memory_stat=f"hierarchical_memory_limit {350 * MiB}\n",
        memory_usage_in_bytes=str(5 * MiB),
    )
    proc = _proc(tmp_path, "0::/\n", [("/", mount, "cgroup", "rw,memory")])
    (proc / "42" / "cgroup").write_bytes(b"4:memory:/lim\xffit\n0::/\n")
    entered = cgroup.Entered.of(42, proc)
    assert entered is not None and entered.where.directory == mount / name
    assert entered.at_entry.limit_bytes == 350 * MiB and entered.at_entry.usage_bytes == 5 * MiB
    assert entered.followed(42, 1.0, proc) is entered  # the same cgroup, not a move to another
    assert printable(entered.where.path) == "/lim\\xffit"


# -- who else is in the cgroup: its process list ---------------------------------------------------


def test_the_cgroup_s_other_processes_are_read_from_its_process_lists_and_below(tmp_path: Path) -> None:
    group = tmp_path / "cg" / "job"
    (group / "child").mkdir(parents=True)
    (group / "cgroup.procs").write_text("10\n11\n12\n13\n14\n15\n")
    (group / "child" / "cgroup.procs").write_text("20\n")
    proc = tmp_path / "proc"
    for pid, ppid, pages, name in (
        (10, 1, 1000, "python"),
        (11, 10, 2000, "pt_data_worker"),
        (12, 2, 0, "kworker"),
        (13, 1, 512, "bash"),
        (14, 10, 300, "pt_data_worker"),  # forked since the sampler's walk: the job's
        (15, 14, 100, "python (a) b"),  # ... and its own child
        (20, 1, 25600, "bystander"),
    ):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "statm").write_text(f"9999 {pages} 0 0 0 0 0\n")
        (proc / str(pid) / "comm").write_text(f"{name}\n")
        (proc / str(pid) / "stat").write_text(f"{pid} ({name}) S {ppid} {pid} 0 0\n")
    where = cgroup.CgroupLocation(2, "/job", group, tmp_path / "cg")
    assert sorted(cgroup.members(where)) == [10, 11, 12, 13, 14, 15, 20]
    # The job's two processes the sampler knows, its two new ones; a kernel thread holds nothing.
    got = cgroup.others(where, {10, 11}, proc)
    page_mb = cgroup.PAGE_SIZE / 2**20
    assert got.processes == 2 and got.rss_bytes == (512 + 25600) * cgroup.PAGE_SIZE
    assert [(n, p) for n, p, _ in got.largest] == [("bystander", 20), ("bash", 13)]
    assert got.largest[0][2] / 2**20 == pytest.approx(25600 * page_mb)


def test_the_cgroup_s_file_cache_is_read_from_memory_stat_shared_memory_left_out(tmp_path: Path) -> None:
    mib = 2**20
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.stat").write_text(
        f"cache {9 * mib}\ntotal_cache {900 * mib}\ntotal_shmem {100 * mib}\ntotal_mapped_file {300 * mib}\n"
    )
    assert cgroup.file_cache(cgroup.CgroupLocation(1, "/x", v1, tmp_path)) == 800 * mib  # mapped or not
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.stat").write_text(f"anon 1\nfile {50 * mib}\nshmem {10 * mib}\nfile_mapped {15 * mib}\n")
    assert cgroup.file_cache(cgroup.CgroupLocation(2, "/x", v2, tmp_path)) == 40 * mib
    (v2 / "memory.stat").write_text("anon 1\n")
    assert cgroup.file_cache(cgroup.CgroupLocation(2, "/x", v2, tmp_path)) is None
