"""The record/watch sampler (memprobe.probe.tree_sampler) without a process of its own: how its
ticks are spaced, and when a spawned worker's start-up ends (memprobe.probe.tree). The
estimator's tests are in test_estimator*.py, the sampler's on real trees in
tests/integration/test_tree_sampler_processes.py."""

from __future__ import annotations

import os
import time

import pytest

from memprobe.probe.sampler import SamplerSettings
from memprobe.probe.tree_sampler import TreeSampler


def test_ticks_of_a_costly_tree_are_spaced_within_the_cheap_share() -> None:
    from memprobe.probe import tree_sampler

    sampler = TreeSampler(
        os.getpid(),
        lambda table, rows: None,
        SamplerSettings(interval_s=0.2, pss_cpu_budget=0.01),
        t0=time.monotonic(),
    )
    assert sampler.interval() == 0.2
    sampler.tick_cost = 0.0012  # 1.2 ms a tick: 0.2 s would take 60 % of the budget
    assert sampler.interval() == pytest.approx(0.0012 / (tree_sampler.CHEAP_SHARE * 0.01))
    sampler.tick_cost = 0.004  # 4 ms (a torchrun tree of 11 processes: 2-3): 2 points a second
    assert sampler.interval() == tree_sampler.POINTS_INTERVAL_S
    # 200 forked children cost 8.4 ms a tick: at a tick every 0.45 s the cheap tier alone took
    # 1.9 % of a core against a 1 % budget. Spaced, it keeps within the budget.
    sampler.tick_cost = 0.0084
    assert sampler.tick_cost / sampler.interval() == pytest.approx(0.01)
    sampler.tick_cost = 0.03  # 300 processes on a loaded machine: a point every 2 s still
    assert sampler.interval() == tree_sampler.MAX_INTERVAL_S
    assert tree_sampler.compact({"a": 1, "b": None, "c": False}) == {"a": 1, "c": False}


def test_a_spawned_worker_s_start_up_ends_when_its_rss_holds_still_while_it_runs() -> None:
    from memprobe.core.tree_rules import settled_at, startup_end

    t = [0.2 * k for k in range(1, 31)]
    # Unpickling (60 MB per CPU second) until 3 s, then reading its copy (RSS still).
    rss = [100 + 60 * min(x, 3.0) for x in t]
    assert startup_end(t, rss, t) == pytest.approx(3.6)  # half a second still, running all along
    # Waiting for a CPU at 1.0-2.0 s (no CPU, no RSS move) is not the end of its start-up.
    cpu = [min(x, 1.0) + max(x - 2.0, 0.0) for x in t]
    rss = [100 + 60 * min(c, 2.0) for c in cpu]
    assert not any(settled_at(t, rss, cpu, i) for i in range(t.index(2.0) + 1))
    # A 1 GB process whose allocator creeps 20 MB per CPU second (2 %) has settled.
    assert startup_end(t, [1000 + 20 * x for x in t], t) == pytest.approx(0.8)  # its first half second


def test_the_tree_sampler_changes_the_base_sampler_through_its_public_hooks_only() -> None:
    """Sampler's loop is changed by a subclass through the hooks its module doc lists (run_round,
    discover, children, read_cheap, interval): no private method of Sampler is overridden."""
    from memprobe.probe.sampler import Sampler

    private = {name for name in vars(Sampler) if name.startswith("_") and not name.startswith("__")}
    assert private, "the base sampler has private helpers of its own"
    assert not private & set(vars(TreeSampler))
    hooks = {"run_round", "discover", "children", "read_cheap", "interval"}
    assert hooks <= set(vars(TreeSampler)) and hooks <= set(vars(Sampler))


def test_status_is_read_again_only_when_stat_s_rss_moved_though_the_two_files_disagree(monkeypatch) -> None:
    """stat's RSS sums the kernel's per-CPU counters approximately, status's exactly: on 6.18 a
    forked child's stat showed 68-148 KiB less than its status. Compared with status's RSS, every
    process "fell" at every tick and had its status read again (a third of a wide tree's reads);
    compared with stat's RSS when status was read, a quiet process's status is read once."""
    from memprobe.core.system import PAGE_SIZE
    from memprobe.probe import procfs

    stat_rss = [100 * 1024 * 1024]
    status_reads = []

    def stat(pid: int, tid: int | None = None) -> procfs.StatInfo:
        return procfs.StatInfo(
            pid=pid, comm="python", state="S", ppid=1, pgid=1, minflt=0, majflt=0, cpu_s=0.0,
            threads=1, start_ticks=1, rss_pages=stat_rss[0] // PAGE_SIZE,
        )  # fmt: skip

    def cheap(pid: int) -> procfs.CheapSample:
        status_reads.append(stat_rss[0])
        rss = stat_rss[0] + 148 * 1024  # status's exact sum: above stat's
        return procfs.CheapSample(stat(pid), rss=rss, rss_anon=rss - 4096, rss_file=4096, rss_shmem=0)

    monkeypatch.setattr(procfs, "read_stat", stat)
    monkeypatch.setattr(procfs, "read_cheap", cheap)
    sampler = TreeSampler(4242, lambda table, rows: None, SamplerSettings(), t0=time.monotonic())
    for _ in range(5):  # a quiet process
        got = sampler.read_cheap(4242)
        assert got is not None and got.rss_file == 4096
        # One measure throughout: status's RSS, not stat's 148 KiB lower after the first read
        # (a forked child's estimate took that for a fall of its own pages).
        assert got.rss == 100 * 1024 * 1024 + 148 * 1024
    assert len(status_reads) == 1
    stat_rss[0] += 8192  # it moved a little: status's RSS moved as much
    got = sampler.read_cheap(4242)
    assert got is not None and got.rss == 100 * 1024 * 1024 + 148 * 1024 + 8192
    stat_rss[0] -= 8192
    stat_rss[0] += 2 * 1024 * 1024  # it grew: what grew (anon, file) is read again
    sampler.read_cheap(4242)
    stat_rss[0] -= 128 * 1024  # it fell: whether its own pages or file pages fell is read again
    sampler.read_cheap(4242)
    sampler.read_cheap(4242)
    assert len(status_reads) == 3


def test_the_children_lists_are_read_again_only_when_a_pid_was_allocated_since_the_last_walk(
    monkeypatch,
) -> None:
    """Every process's children file every tick was 13 % of a tick of 301 processes. No new pid
    in the namespace (/proc/loadavg's last pid): no process has a new child, the last walk's lists
    stand; a new pid anywhere, or the once-a-second scan of every thread's list after walks that
    read the main thread's only: read again."""
    from memprobe.probe import procfs, tree_walk

    tree = {4242: [5000, 5001], 5000: [], 5001: []}
    reads: list[int] = []
    cursor = [700]

    def children(pid: int, *, all_threads: bool = True) -> list[int]:
        reads.append(pid)
        return list(tree.get(pid, []))

    monkeypatch.setattr(procfs, "read_children", children)
    monkeypatch.setattr(tree_walk, "last_pid", lambda: cursor[0])
    sampler = TreeSampler(4242, lambda table, rows: None, SamplerSettings(), t0=time.monotonic())
    assert sampler.discover(0.0) == [4242, 5000, 5001] and len(reads) == 3
    assert sampler.discover(0.2) == [4242, 5000, 5001] and len(reads) == 3  # nothing created
    cursor[0] = 703  # e.g. a process forked a child
    tree[5000] = [5002]
    assert sampler.discover(0.4) == [4242, 5000, 5001, 5002] and len(reads) == 7
    assert sampler.discover(0.6) == [4242, 5000, 5001, 5002] and len(reads) == 7
    assert sampler.discover(1.2) == [4242, 5000, 5001, 5002] and len(reads) == 11  # the thread scan
    # The next scan, no pid allocated since the last: the lists read whole at 1.2 stand.
    assert sampler.discover(2.4) == [4242, 5000, 5001, 5002] and len(reads) == 11


def test_the_meta_lists_every_process_with_every_fact_the_analysis_takes_as_it_is() -> None:
    """Schema version 4: the analysis derives nothing from a meta's process list. A process gone
    before the tree classified it had no kind (the analysis made it "other" from its role) and
    no start (the analysis took its first tick), a worker whose parent the tree never saw no
    generation (the analysis numbered them by their lives), and DataLoader workers of two epochs
    numbered as one generation stayed so (the analysis split them); a process classified after its
    first row had no parent (the analysis made its rank's process or the root its parent)."""
    from memprobe.probe.ledger import ProcessInfo
    from memprobe.probe.tree import Node

    sampler = TreeSampler(4242, lambda table, rows: None, SamplerSettings(), t0=time.monotonic())
    gone = 2**22 + 1  # above any pid_max: never a process, so never classified
    sampler.ledger.note(gone, 0.5, {"role": "other", "missing": False}, sampler.roles, sampler._boot_at_t0)
    # Classified only after its first row: its parent as the tree knows it, not none.
    late = gone + 1
    sampler.ledger.note(late, 0.5, {"role": "other", "missing": False}, sampler.roles, sampler._boot_at_t0)
    sampler.roles.nodes[late] = Node(late, 4242, "fork", "worker 0", worker=0, generation=0, owner=4242)
    sampler.ledger.note(late, 0.7, {"role": "worker 0", "missing": False}, sampler.roles, sampler._boot_at_t0)

    def worker(pid: int, first_t: float, end_t: float | None) -> ProcessInfo:
        return ProcessInfo(
            pid=pid, ppid=77, role="other", kind="exec", forked=False, start_method=None, rank=-1,
            worker=-1, generation=None, parent_role=None, start_t=first_t, first_t=first_t,
            last_t=end_t or 9.0, end_t=end_t, command="",
        )  # fmt: skip

    # Its parent (77) outside the tree; the third started after the first two ended.
    sampler.ledger.processes |= {
        6000: worker(6000, 1.0, 3.0),
        6001: worker(6001, 1.2, 3.0),
        6002: worker(6002, 4.0, None),
    }
    # Lightning's ddp_spawn: the next epoch's spawned DataLoader workers started while the last
    # epoch's lived, numbered workers 2 and 3 of one generation; they end apart, in two pairs.
    parent = worker(7000, 0.0, None)
    parent.kind, parent.ppid = "main", 1
    sampler.ledger.processes[7000] = parent
    for k, (start, last) in enumerate(((20.0, 40.0), (31.0, 40.4), (35.0, 60.0), (45.0, 60.2))):
        loader = worker(7001 + k, start, None)
        loader.kind, loader.ppid, loader.role, loader.worker, loader.generation = (
            "dataloader",
            7000,
            f"worker {k}",
            k,
            0,
        )
        loader.last_t = last
        sampler.ledger.processes[7001 + k] = loader
    listed = {p["pid"]: p for p in sampler.process_list()}
    assert (listed[gone]["kind"], listed[gone]["start_t"], listed[gone]["generation"]) == ("other", 0.5, None)
    assert [listed[p]["generation"] for p in (6000, 6001, 6002)] == [0, 0, 1]
    assert (listed[late]["ppid"], listed[late]["kind"], listed[late]["generation"]) == (4242, "fork", 0)
    assert [(listed[p]["role"], listed[p]["generation"]) for p in range(7001, 7005)] == [
        ("worker 0", 0),
        ("worker 1", 0),
        ("worker 0", 1),
        ("worker 1", 1),
    ]


def test_a_program_run_for_a_moment_is_listed_as_a_command_not_a_worker() -> None:
    """`ldconfig -p` run by torch's CUDA build at import was "worker 0 (exec)", one generation
    before the DataLoader's: it is a command now, and the generations after it count one less. A
    child program that lived longer, a forked or DataLoader worker however short, stay workers."""
    from memprobe.core.tree_rules import BRIEF_COMMAND_S, brief_commands

    def proc(
        pid: int, kind: str, start: float, last: float, end: float | None, gen: int | None, rank: int = -1
    ):
        role = "main" if kind == "main" else f"worker {pid % 10}"
        return {"pid": pid, "ppid": 1 if kind == "main" else 100, "kind": kind, "role": role, "rank": rank,
                "worker": -1 if kind == "main" else pid % 10, "generation": gen, "start_t": start,
                "last_t": last, "end_t": end}  # fmt: skip

    listed = [
        proc(100, "main", 0.0, 20.0, None, None),
        proc(110, "exec", 2.0, 2.0 + BRIEF_COMMAND_S / 2, 2.6, 0),  # ldconfig: seen once, ended
        proc(121, "fork", 2.1, 2.2, 2.3, 1),  # a forked worker the OOM killer ended at once: a worker
        proc(130, "dataloader", 5.0, 5.2, 5.3, 2),  # a DataLoader worker that lived briefly
        proc(131, "dataloader", 5.0, 9.0, 9.1, 2),
        proc(140, "exec", 10.0, 10.0 + 2 * BRIEF_COMMAND_S, 12.5, 3),  # a child program that worked
        proc(150, "exec", 15.0, 15.2, None, 4),  # still running at the end: not known to be brief
    ]
    out = {p["pid"]: p for p in brief_commands(listed)}
    assert (out[110]["kind"], out[110]["role"], out[110]["generation"]) == ("command", "command", None)
    assert [(out[p]["kind"], out[p]["generation"]) for p in (121, 130, 131, 140, 150)] == [
        ("fork", 0),
        ("dataloader", 1),
        ("dataloader", 1),
        ("exec", 2),
        ("exec", 3),
    ]
    ranked = brief_commands([{**listed[1], "rank": 1}])
    assert (ranked[0]["role"], ranked[0]["worker"]) == ("rank 1 command", -1)


def test_a_program_that_ended_before_its_parents_workers_appeared_is_listed_as_a_program() -> None:
    """The meta says the final classification: a program (a compiler) exec'd and ended before
    the DataLoader's workers forked was "worker 0" in its rows; renamed when they appeared, after
    its last row, it was still listed "worker 0" of a generation of its own, and "the most
    workers at once" and the first worker's exact reading (the warm milestone) were its."""
    from test_tree_roles import FakeProc

    from memprobe.probe.ledger import Ledger, first_worker_reading, most_workers
    from memprobe.probe.tree import SETTLE_AGE_S, TreeRoles

    fake = FakeProc()
    fake.add(100, 1, start=900.0)
    roles, ledger = TreeRoles(100, fake), Ledger()

    def tick(t: float, pids: list[int], exact: set[int] = frozenset()) -> None:
        for pid in pids:
            alive = pid in fake.procs
            role = roles.role(pid, fake.procs[pid].comm).name if alive else "other"
            info = ledger.note(pid, t, {"role": role, "missing": not alive}, roles, boot_at_t0=999.5)
            if not alive:
                info.end_t = t if info.end_t is None else info.end_t
            if pid in exact:
                info.first_pss_t = t if info.first_pss_t is None else info.first_pss_t

    fake.add(101, 100)  # at 0.5 s on the run's clock
    fake.exec(101, ["/usr/bin/cc", "-O2", "ext.c"], comm="cc")
    fake.now += SETTLE_AGE_S + 0.1
    tick(1.0, [100, 101], exact={101})
    tick(2.0, [100, 101])
    fake.kill(101)
    tick(3.0, [100, 101])
    fake.add(102, 100, comm="pt_data_worker")
    fake.add(103, 100, comm="pt_data_worker")
    tick(4.0, [100, 102, 103])
    tick(5.0, [100, 102, 103], exact={102, 103})
    listed = {p["pid"]: p for p in ledger.listed(roles)}
    assert [listed[101][k] for k in ("role", "kind", "worker", "generation")] == [
        "program 0",
        "program",
        -1,
        None,
    ]
    assert [(listed[p]["role"], listed[p]["generation"]) for p in (102, 103)] == [
        ("worker 0", 0),
        ("worker 1", 0),
    ]
    assert most_workers(list(listed.values())) == 2
    assert first_worker_reading(list(listed.values())) == 5.0


def test_a_program_run_for_a_moment_beside_the_workers_stays_a_command() -> None:
    """A program exec'd beside the workers that ended within a second (nvidia-smi polled by a
    callback) is a command its parent ran, as any brief child program."""
    from memprobe.core.tree_rules import BRIEF_COMMAND_S, brief_commands

    program = {"pid": 110, "ppid": 100, "kind": "program", "role": "program 0", "rank": -1, "worker": -1,
               "generation": None, "start_t": 2.0, "last_t": 2.0 + BRIEF_COMMAND_S / 2, "end_t": 2.6}  # fmt: skip
    (out,) = brief_commands([program])
    assert (out["kind"], out["role"], out["worker"], out["generation"]) == ("command", "command", -1, None)
    (kept,) = brief_commands([{**program, "end_t": None}])  # still running at the end
    assert (kept["kind"], kept["role"]) == ("program", "program 0")
