"""Classification of a tree memprobe did not build (memprobe.probe.tree), on a fake /proc: every
kind of tree users bring, by structure, names only as labels."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from memprobe.probe import procfs
from memprobe.probe.tree import MAX_RANK, SETTLE_AGE_S, TreeRoles, env_rank, parse_rank

HZ = procfs.CLOCK_TICKS
PY = "/usr/bin/python3"
SPAWN_CMD = [
    PY,
    "-c",
    "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
    "--multiprocessing-fork",
]
FORKSERVER_CMD = [PY, "-c", "from multiprocessing.forkserver import main; main(8, 9, ['__main__'])"]
TRACKER_CMD = [PY, "-c", "from multiprocessing.resource_tracker import main;main(6)"]


@dataclass
class Proc:
    ppid: int
    comm: str = "python"
    cmd: list[str] = field(default_factory=lambda: [PY, "train.py"])
    env: dict[str, str] | None = field(default_factory=dict)
    layout: tuple[int, int, int] = (1, 2, 3)
    start: float = 0.0  # seconds since boot
    state: str = "S"
    vfork_of: int | None = None  # the parent whose memory it runs in, between vfork and exec


class FakeProc:
    """A /proc that tests write: ``add`` a process, ``kill`` it, move the clock."""

    def __init__(self) -> None:
        self.procs: dict[int, Proc] = {}
        self.now = 1000.0

    def add(self, pid: int, ppid: int, **kw) -> int:
        kw.setdefault("start", self.now)
        if "layout" not in kw and ppid in self.procs:
            kw["layout"] = self.procs[ppid].layout  # forked: the parent's address space
        if "cmd" not in kw and ppid in self.procs:
            kw["cmd"] = self.procs[ppid].cmd
        self.procs[pid] = Proc(ppid, **kw)
        return pid

    def exec(self, pid: int, cmd: list[str], env: dict[str, str] | None = None, comm: str = "python") -> None:
        p = self.procs[pid]
        p.cmd, p.comm, p.layout = cmd, comm, (pid * 7, pid * 11, pid * 13)  # a fresh, random layout
        if env is not None:
            p.env = env

    def kill(self, pid: int) -> None:
        del self.procs[pid]

    # -- ProcReader ----------------------------------------------------------------------
    def stat(self, pid: int) -> procfs.StatInfo | None:
        p = self.procs.get(pid)
        if p is None:
            return None
        return procfs.StatInfo(
            pid=pid,
            comm=p.comm,
            state=p.state,
            ppid=p.ppid,
            pgid=1,
            minflt=0,
            majflt=0,
            cpu_s=0.0,
            threads=1,
            start_ticks=int(p.start * HZ),
            layout=p.layout,
        )

    def cmdline(self, pid: int) -> list[str]:
        p = self.procs.get(pid)
        return list(p.cmd) if p else []

    def environ(self, pid: int) -> dict[str, str] | None:
        p = self.procs.get(pid)
        return None if p is None or p.env is None else dict(p.env)

    def children(self, pid: int) -> list[int]:
        return [c for c, p in self.procs.items() if p.ppid == pid]

    def uptime_s(self) -> float:
        return self.now

    def same_memory(self, pid: int, other: int) -> bool | None:
        p, o = self.procs.get(pid), self.procs.get(other)
        if p is None or o is None:
            return None
        return pid == other or p.vfork_of == other or o.vfork_of == pid


def _see(roles: TreeRoles, fake: FakeProc) -> dict[int, str]:
    """One sampler tick: every live process, parents first."""
    order, todo = [], [roles.main_pid]
    while todo:
        pid = todo.pop(0)
        order.append(pid)
        todo.extend(sorted(fake.children(pid)))
    return {pid: roles.role(pid, fake.procs[pid].comm).name for pid in order}


@pytest.fixture
def fake() -> FakeProc:
    f = FakeProc()
    f.add(100, 1, start=900.0)
    return f


def _settle(fake: FakeProc) -> None:
    fake.now += SETTLE_AGE_S + 0.1


def test_a_forked_worker_seen_exiting_while_young_stays_a_forked_worker(fake: FakeProc) -> None:
    """A zombie's stat has no layout and no command line: judged again from them, a forked
    worker that ended within its first second was called exec'd, and the analysis booked its
    copy-on-access as its start-up."""
    roles = TreeRoles(100, fake)
    fake.add(101, 100)
    assert _see(roles, fake)[101] == "worker 0" and roles.nodes[101].kind == "fork"
    fake.procs[101].state, fake.procs[101].layout, fake.procs[101].cmd = "Z", (0, 0, 0), []
    fake.now += 0.3  # still young
    roles.role(101, "python")
    assert roles.nodes[101].kind == "fork" and roles.nodes[101].start_method == "fork"


def test_children_forked_after_the_root_was_read_mid_exec_are_forked_workers(fake: FakeProc) -> None:
    """memprobe record reads its command's stat as soon as it has exec'd; the kernel sets the new
    layout's fields one by one, so a read then can see part of it (start_brk still 0). Kept as
    the root's layout, it made every child the root then forked an exec'd one, its
    copy-on-access booked as start-up (test_trees, os_fork, under the CI's load)."""
    fake.add(100, 1, layout=(1, 2, 0))  # read mid-exec: start_brk not set yet
    roles = TreeRoles(100, fake)
    fake.procs[100].layout = (1, 2, 3)  # the exec done
    fake.now += 5
    fake.add(101, 100)
    fake.add(102, 100, start=fake.now + 0.01)
    assert _see(roles, fake) == {100: "main", 101: "worker 0", 102: "worker 1"}
    assert [roles.nodes[p].kind for p in (101, 102)] == ["fork", "fork"]


def test_dataloader_workers_under_both_torch_names_are_forked_workers(fake: FakeProc) -> None:
    fake.add(101, 100, comm="pt_data_worker")
    fake.add(
        102, 100, comm="pt_multiprocess", start=fake.now + 0.01
    )  # pt_multiprocess_data_worker, cut to 15
    roles = TreeRoles(100, fake)
    assert _see(roles, fake) == {100: "main", 101: "worker 0", 102: "worker 1"}
    for pid in (101, 102):
        node = roles.nodes[pid]
        assert (node.kind, node.forked, node.start_method, node.generation) == ("dataloader", True, "fork", 0)
    assert roles.nodes[100].kind == "main" and dict(roles.start_methods) == {"fork": 2}


def test_each_epochs_workers_are_worker_0_to_n_again_in_a_new_generation(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    fake.add(102, 100, comm="pt_data_worker", start=fake.now + 0.02)
    fake.add(101, 100, comm="pt_data_worker", start=fake.now + 0.01)  # started first: worker 0
    assert _see(roles, fake) == {100: "main", 101: "worker 0", 102: "worker 1"}
    fake.kill(101)
    fake.kill(102)
    fake.now += 5
    fake.add(103, 100, comm="pt_data_worker")
    fake.add(104, 100, comm="pt_data_worker", start=fake.now + 0.01)
    assert _see(roles, fake) == {100: "main", 103: "worker 0", 104: "worker 1"}
    assert roles.nodes[103].generation == roles.nodes[104].generation == 1


def test_a_worker_appearing_while_others_live_takes_the_lowest_free_index(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    for pid in (101, 102, 103):
        fake.add(pid, 100, start=fake.now + pid / 1000)
    _see(roles, fake)
    fake.kill(102)
    fake.now += 1
    fake.add(104, 100)
    assert _see(roles, fake)[104] == "worker 1"
    assert roles.nodes[104].generation == 0  # the others were alive: the same generation


def test_torchrun_launcher_ranks_and_each_ranks_workers(fake: FakeProc) -> None:
    fake.procs[100].cmd = [PY, "/venv/bin/torchrun", "--nproc_per_node=2", "train.py"]
    roles = TreeRoles(100, fake)
    for rank, pid in enumerate((110, 120)):
        fake.add(pid, 100)
        fake.exec(pid, [PY, "-u", "train.py"], env={"RANK": str(rank), "LOCAL_RANK": str(rank)})
        for k in range(2):
            fake.add(pid + 1 + k, pid, comm="pt_data_worker", start=fake.now + k / 100)
    seen = _see(roles, fake)
    assert seen == {
        100: "launcher",
        110: "rank 0",
        120: "rank 1",
        111: "rank 0 worker 0",
        112: "rank 0 worker 1",
        121: "rank 1 worker 0",
        122: "rank 1 worker 1",
    }
    assert roles.nodes[100].kind == "launcher" and roles.nodes[110].kind == "rank"
    assert roles.ranks == {110: 0, 120: 1} and roles.rank_of(122) == 1
    assert roles.parent_role(121) == "rank 1"


@pytest.mark.parametrize(
    ("value", "rank"),
    [
        ("0", 0),
        ("7", 7),
        ("007", 7),
        (str(MAX_RANK), MAX_RANK),
        (str(MAX_RANK + 1), None),
        ("99999999999999999999", None),  # made the results' Parquet overflow
        ("9" * 5000, None),  # beyond what int() parses at all
        (" 2", None),
        ("2 ", None),
        ("\u0663", None),  # ARABIC-INDIC DIGIT THREE: int() gives 3
        ("\uff11", None),  # FULLWIDTH DIGIT ONE
        ("\u00b2", None),  # SUPERSCRIPT TWO: isdigit() says yes
        ("1_0", None),
        ("+1", None),
        ("-1", None),
        ("", None),
        ("abc", None),
        ("0x1", None),
        ("1\n", None),
        (None, None),
        (3, None),  # only text comes from an environment
    ],
)
def test_a_rank_in_the_environment_is_ascii_digits_within_range(value: object, rank: int | None) -> None:
    assert parse_rank(value) == rank


def test_the_environments_rank_is_the_first_rank_variable_it_holds() -> None:
    assert env_rank({"RANK": "3", "LOCAL_RANK": "1"}) == 3
    assert env_rank({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}) == 1
    assert env_rank({"RANK": "x", "LOCAL_RANK": "1"}) is None  # RANK is there and says no rank
    assert env_rank({"PATH": "/bin"}) is None and env_rank({}) is None and env_rank(None) is None


@pytest.mark.parametrize("value", ["99999999999999999999", " 2", "\u0663", "1_0", "2147483648"])
def test_a_child_whose_rank_variable_is_no_rank_is_a_worker(fake: FakeProc, value: str) -> None:
    """RANK=99999999999999999999 made the rank column overflow when the results were saved (no
    Parquet, no report); " 2", an Arabic-Indic 3 and "1_0" became ranks 2, 3 and 10."""
    roles = TreeRoles(100, fake)
    fake.add(110, 100)
    fake.exec(110, ["/usr/bin/sleep", "5"], env={"PATH": "/bin", "RANK": value}, comm="sleep")
    _settle(fake)
    assert _see(roles, fake) == {100: "main", 110: "worker 0"}
    assert roles.nodes[110].kind == "exec" and roles.rank_of(110) == -1 and roles.ranks == {}


@pytest.mark.parametrize("root_workers_first", [False, True])
def test_a_root_that_trains_beside_the_ranks_it_started_is_rank_0(
    fake: FakeProc, root_workers_first: bool
) -> None:
    """Lightning's DDP (strategy="ddp") re-runs the script for rank 1 with LOCAL_RANK=1 in its
    environment and trains as rank 0 itself, with DataLoader workers of its own: no launcher."""
    fake.procs[100].env = {"PATH": "/bin"}
    roles = TreeRoles(100, fake)

    def root_workers() -> None:
        for k in range(2):
            fake.add(101 + k, 100, comm="pt_data_worker", start=fake.now + k / 100)

    if root_workers_first:
        root_workers()
        _see(roles, fake)
    fake.add(110, 100)
    fake.exec(110, [PY, "/job/train.py"], env={"PATH": "/bin", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    _settle(fake)
    _see(roles, fake)
    for k in range(2):
        fake.add(111 + k, 110, comm="pt_data_worker", start=fake.now + k / 100)
    if not root_workers_first:
        _see(roles, fake)  # rank 1 first: the root looks like a launcher until its workers start
        root_workers()
    _see(roles, fake)  # a parent's row comes before its children's: renamed from the next tick
    assert _see(roles, fake) == {
        100: "rank 0",
        101: "rank 0 worker 0",
        102: "rank 0 worker 1",
        110: "rank 1",
        111: "rank 1 worker 0",
        112: "rank 1 worker 1",
    }
    assert roles.nodes[100].kind == "rank" and roles.ranks == {110: 1, 100: 0}
    assert roles.rank_of(102) == 0 and roles.parent_role(102) == "rank 0"


def test_spawned_children_that_run_dataloader_workers_are_ranks(fake: FakeProc) -> None:
    """torch.multiprocessing.spawn(train, nprocs=2): its children carry no RANK; once one runs
    DataLoader workers it is a rank (numbered as spawn started them), the root its launcher."""
    roles = TreeRoles(100, fake)
    for k, pid in enumerate((110, 120)):
        fake.add(pid, 100, start=fake.now + k / 100)
        fake.exec(pid, SPAWN_CMD)
    fake.add(130, 100)
    fake.exec(130, TRACKER_CMD)
    _settle(fake)
    assert _see(roles, fake) == {100: "main", 110: "worker 0", 120: "worker 1", 130: "resource tracker"}
    for pid in (110, 120):
        for k in range(2):
            fake.add(pid + 1 + k, pid, comm="pt_data_worker", start=fake.now + k / 100)
    _settle(fake)
    _see(roles, fake)
    assert _see(roles, fake) == {
        100: "launcher",
        110: "rank 0",
        120: "rank 1",
        130: "resource tracker",
        111: "rank 0 worker 0",
        112: "rank 0 worker 1",
        121: "rank 1 worker 0",
        122: "rank 1 worker 1",
    }
    assert roles.nodes[110].kind == "rank" and roles.ranks == {110: 0, 120: 1}
    assert not roles.start_methods.get("spawn")  # the ranks are no spawn workers any more
    assert roles.rank_of(122) == 1 and roles.parent_role(121) == "rank 1"


def test_a_dataloaders_next_workers_are_a_new_generation_while_the_last_ones_end(fake: FakeProc) -> None:
    """Lightning starts epoch 2's iterator before epoch 1's workers have exited."""
    roles = TreeRoles(100, fake)
    for k in range(2):
        fake.add(101 + k, 100, comm="pt_data_worker", start=fake.now + k / 100)
    _see(roles, fake)
    fake.now += 7
    for k in range(2):
        fake.add(103 + k, 100, comm="pt_data_worker", start=fake.now + k / 100)
    seen = _see(roles, fake)
    assert seen == {100: "main", 101: "worker 0", 102: "worker 1", 103: "worker 0", 104: "worker 1"}
    assert [roles.nodes[pid].generation for pid in (101, 102, 103, 104)] == [0, 0, 1, 1]


def test_spawned_dataloader_workers_started_one_after_the_other_are_one_generation(fake: FakeProc) -> None:
    """A spawn DataLoader starts each worker once the last one read its copy of the dataset."""
    roles = TreeRoles(100, fake)
    for k in range(2):
        fake.add(101 + k, 100, comm="pt_data_worker", start=fake.now)
        fake.exec(101 + k, SPAWN_CMD, comm="pt_data_worker")
        _see(roles, fake)
        fake.now += 10
    assert _see(roles, fake) == {100: "main", 101: "worker 0", 102: "worker 1"}
    assert roles.nodes[102].generation == 0


def test_a_rank_seen_between_fork_and_exec_becomes_a_rank(fake: FakeProc) -> None:
    """A launcher's child first seen before its exec looks like a forked worker; it is looked at
    again until it is settled."""
    fake.procs[100].env = {"PATH": "/bin"}
    roles = TreeRoles(100, fake)
    fake.add(110, 100, env={"PATH": "/bin"})
    assert _see(roles, fake)[110] == "worker 0" and roles.nodes[110].kind == "fork"
    fake.exec(110, [PY, "train.py"], env={"PATH": "/bin", "RANK": "0"})
    fake.now += 0.2
    assert _see(roles, fake)[110] == "rank 0"
    assert _see(roles, fake) == {100: "launcher", 110: "rank 0"}  # the root, seen first, at the next tick
    assert not roles.start_methods  # the provisional fork worker was released


def test_a_spawn_child_seen_between_fork_and_exec_becomes_a_spawn_worker(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    fake.add(101, 100)
    assert _see(roles, fake)[101] == "worker 0" and roles.nodes[101].kind == "fork"
    fake.exec(101, SPAWN_CMD)
    fake.now += 0.3
    _see(roles, fake)
    node = roles.nodes[101]
    assert (node.role, node.kind, node.start_method, node.forked) == ("worker 0", "spawn", "spawn", False)
    assert dict(roles.start_methods) == {"spawn": 1}
    _settle(fake)
    _see(roles, fake)
    assert roles.nodes[101].settled and roles.nodes[101].kind == "spawn"


def test_pool_fork_spawn_exec_and_helpers_by_structure(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    fake.add(101, 100)  # multiprocessing fork Pool / os.fork: the parent's layout
    fake.add(102, 100)
    fake.exec(102, SPAWN_CMD)  # spawn
    fake.add(103, 100)
    fake.exec(103, ["/bin/sleep", "5"], comm="sleep")  # a subprocess
    fake.add(104, 100)
    fake.exec(104, TRACKER_CMD)
    _settle(fake)
    seen = _see(roles, fake)
    kinds = {pid: (roles.nodes[pid].kind, roles.nodes[pid].start_method) for pid in seen}
    assert kinds == {
        100: ("main", None),
        101: ("fork", "fork"),
        102: ("spawn", "spawn"),
        103: ("program", None),  # a program beside forked and spawned workers: none of them
        104: ("resource tracker", None),
    }
    assert sorted(seen.values()) == ["main", "program 0", "resource tracker", "worker 0", "worker 1"]
    assert roles.nodes[101].forked and not roles.nodes[102].forked


def test_a_child_seen_between_vfork_and_exec_is_no_fork_worker(fake: FakeProc) -> None:
    """PyPI's CUDA torch runs `ldconfig -p` at import (vfork, then exec): a sample between the two
    sees the parent's layout and command line, in the parent's own memory, not a copy of it. Seen
    once there and gone, it was "worker 0 (fork)", a worker the job never had (3.13's suite)."""
    roles = TreeRoles(100, fake)
    fake.add(101, 100, vfork_of=100)  # subprocess's vfork, before its exec
    fake.add(102, 100)  # a forked worker: the same layout, its own copy of the memory
    _see(roles, fake)
    assert (roles.nodes[101].kind, roles.nodes[101].start_method) == ("exec", None)
    assert (roles.nodes[102].kind, roles.nodes[102].start_method) == ("fork", "fork")
    assert roles.start_methods == {"fork": 1}


def test_lokys_resource_tracker_is_a_helper_not_a_worker(fake: FakeProc) -> None:
    """joblib's loky backend runs its own copy of the resource tracker beside its workers."""
    roles = TreeRoles(100, fake)
    fake.add(101, 100)
    fake.exec(
        101,
        [PY, "-B", "-c", "from joblib.externals.loky.backend.resource_tracker import main; main(9, False)"],
    )
    fake.add(102, 100)
    fake.exec(
        102, [PY, "-m", "joblib.externals.loky.backend.popen_loky_posix", "--process-name", "LokyProcess-1"]
    )
    _settle(fake)
    assert _see(roles, fake) == {100: "main", 101: "resource tracker", 102: "worker 0"}
    assert roles.nodes[102].kind == "exec"


def test_forkserver_children_are_workers_of_the_forkservers_parent(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    fake.add(105, 100)
    fake.exec(105, FORKSERVER_CMD)
    fake.add(106, 105)  # forked by the forkserver: its command line, until torch renames it
    fake.add(107, 105, comm="pt_data_worker")
    _settle(fake)
    seen = _see(roles, fake)
    assert seen == {100: "main", 105: "forkserver", 106: "worker 0", 107: "worker 1"}
    assert roles.nodes[106].kind == "spawn" and roles.nodes[107].kind == "dataloader"
    assert roles.nodes[106].start_method == "forkserver" and not roles.nodes[106].forked
    assert roles.parent_role(106) == "main"
    fake.procs[106].comm = "pt_data_worker"  # renamed by torch later: a DataLoader worker from then on
    _see(roles, fake)
    assert roles.nodes[106].kind == "dataloader" and roles.nodes[106].role == "worker 0"


def test_a_workers_own_workers_are_nested(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    fake.add(101, 100, comm="pt_data_worker")
    fake.add(102, 101)
    fake.add(103, 101, start=fake.now + 0.01)
    assert _see(roles, fake) == {100: "main", 101: "worker 0", 102: "worker 0.0", 103: "worker 0.1"}
    assert roles.parent_role(103) == "worker 0"


def test_share_groups_follow_fork_edges_only(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    fake.add(101, 100)  # fork
    fake.add(102, 100)
    fake.exec(102, SPAWN_CMD)  # exec'd: pages of its own
    fake.add(103, 102)  # forked by the spawned one
    _settle(fake)
    _see(roles, fake)
    groups = roles.share_groups()
    assert groups[100] == groups[101] != groups[102]
    assert groups[102] == groups[103]


def test_a_process_gone_before_it_is_classified_is_not_invented(fake: FakeProc) -> None:
    roles = TreeRoles(100, fake)
    assert roles.classify(999) is None and roles.role(999, "x").name == "other"


def _facts(roles: TreeRoles, pid: int) -> tuple:
    n = roles.nodes[pid]
    return n.role, n.kind, n.worker, n.generation


def test_a_program_started_before_the_dataloaders_workers_is_a_program_once_they_appear(
    fake: FakeProc,
) -> None:
    """A Lightning fit logged to Weights & Biases: WandbLogger starts wandb-core (an exec'd
    program, alive the whole fit) before the fit forks its DataLoader workers. It was "worker 0",
    the workers "worker 1" and "worker 2" of its generation (the trainer's scalars said
    memprobe/worker0 of wandb-core)."""
    roles = TreeRoles(100, fake)
    fake.add(101, 100)
    fake.exec(101, ["/venv/lib/wandb/bin/wandb-core", "--port-filename", "/tmp/p"], comm="wandb-core")
    _settle(fake)
    assert _see(roles, fake)[101] == "worker 0"  # alone, it may be a subprocess worker yet
    fake.add(102, 100)  # the DataLoader forks its workers; torch renames them a moment later
    fake.add(103, 100)
    _see(roles, fake)
    fake.procs[102].comm = fake.procs[103].comm = "pt_data_worker"
    _see(roles, fake)  # the program, read first, renamed once its parent's workers are seen renamed
    seen = _see(roles, fake)
    assert (seen[101], seen[102], seen[103]) == ("program 0", "worker 0", "worker 1")
    assert _facts(roles, 101) == ("program 0", "program", -1, None)
    assert [_facts(roles, pid)[2:] for pid in (102, 103)] == [(0, 0), (1, 0)]
    assert roles.parent_role(101) == "main" and not roles.nodes[101].is_worker


def test_what_a_program_starts_is_part_of_it_before_and_after_it_is_named_one(fake: FakeProc) -> None:
    """wandb-core starts wandb-symon (an exec'd program of its own) before the fit's DataLoader
    forks: it was "worker 0.0" (exec, generation 0) of a program, and the job's most workers at
    once 3 for its 2. Named after its program, with no worker index nor generation; one started
    after is too."""
    roles = TreeRoles(100, fake)
    fake.add(101, 100)
    fake.exec(101, ["/venv/lib/wandb/bin/wandb-core", "--port-filename", "/tmp/p"], comm="wandb-core")
    fake.add(102, 101)
    fake.exec(102, ["/venv/lib/wandb/bin/wandb-symon", "-"], comm="wandb-symon")
    _settle(fake)
    assert _see(roles, fake)[102] == "worker 0.0"  # a subprocess worker's own, as far as is known yet
    fake.add(103, 100, comm="pt_data_worker")
    fake.add(104, 100, comm="pt_data_worker")
    _see(roles, fake)
    seen = _see(roles, fake)
    assert (seen[101], seen[102], seen[103], seen[104]) == (
        "program 0",
        "program 0.0",
        "worker 0",
        "worker 1",
    )
    assert _facts(roles, 102) == ("program 0.0", "program", -1, None)
    fake.add(105, 101)  # forked by the program afterwards: its own as well
    assert _see(roles, fake)[105] == "program 0.1" and roles.nodes[105].generation is None
    assert [_facts(roles, pid)[2:] for pid in (103, 104)] == [(0, 0), (1, 0)]


def test_a_program_run_beside_settled_forked_workers_is_a_program_from_its_start(fake: FakeProc) -> None:
    """os.fork / a fork Pool's workers, once a second old (not a child about to exec): a program
    the parent runs then (nvidia-smi polled by a callback) takes no worker index nor generation;
    the next one takes the lowest program index free."""
    roles = TreeRoles(100, fake)
    fake.add(101, 100)
    fake.add(102, 100)
    _see(roles, fake)
    _settle(fake)
    _see(roles, fake)
    fake.add(110, 100)
    fake.exec(110, ["/usr/bin/nvidia-smi", "-q"], comm="nvidia-smi")
    assert _see(roles, fake)[110] == "program 0" and roles.nodes[110].generation is None
    fake.add(111, 100, start=fake.now + 0.01)  # seen between its fork and its exec: a forked child
    assert _see(roles, fake)[111] == "worker 2"
    fake.exec(111, ["/usr/bin/nvidia-smi", "-q"], comm="nvidia-smi")
    assert _see(roles, fake)[111] == "program 1"
    assert _facts(roles, 111) == ("program 1", "program", -1, None) and roles.start_methods == {"fork": 2}
    fake.kill(110)
    fake.kill(111)
    fake.add(112, 100)
    fake.exec(112, ["/usr/bin/nvidia-smi", "-q"], comm="nvidia-smi")
    assert _see(roles, fake)[112] == "program 0"
    assert [_facts(roles, pid)[2:] for pid in (101, 102)] == [(0, 0), (1, 0)]


def test_a_program_that_ended_before_the_workers_started_leaves_their_generation(fake: FakeProc) -> None:
    """A program run for seconds (a compiler) and ended, then the DataLoader's workers: it had
    been generation 0 and they generation 1; they are generation 0, it none."""
    roles = TreeRoles(100, fake)
    fake.add(101, 100)
    fake.exec(101, ["/usr/bin/cc", "-O2", "ext.c"], comm="cc")
    _settle(fake)
    _see(roles, fake)
    fake.kill(101)
    fake.add(102, 100, comm="pt_data_worker")
    fake.add(103, 100, comm="pt_data_worker")
    seen = _see(roles, fake)
    assert (seen[102], seen[103]) == ("worker 0", "worker 1")
    assert _facts(roles, 101) == ("program 0", "program", -1, None)
    assert [_facts(roles, pid)[3] for pid in (102, 103)] == [0, 0]


def test_a_ranks_program_beside_its_workers_is_named_under_its_rank(fake: FakeProc) -> None:
    fake.procs[100].cmd = [PY, "-m", "torch.distributed.run", "--nproc-per-node=1", "train.py"]
    roles = TreeRoles(100, fake)
    fake.add(110, 100)
    fake.exec(110, [PY, "-u", "train.py"], env={"RANK": "0", "LOCAL_RANK": "0"})
    fake.add(111, 110)
    fake.exec(111, ["/venv/bin/wandb-core"], comm="wandb-core")
    fake.add(112, 110, comm="pt_data_worker")
    _settle(fake)
    seen = _see(roles, fake)
    assert (seen[110], seen[111], seen[112]) == ("rank 0", "rank 0 program 0", "rank 0 worker 0")


def test_a_parent_whose_children_are_all_programs_keeps_them_as_workers(fake: FakeProc) -> None:
    """Workers that are `subprocess` programs (a job that shells out to its own loaders): a
    parent with no forked, spawned or DataLoader worker keeps them as workers, each seen a
    moment between its fork and its exec too."""
    roles = TreeRoles(100, fake)
    for pid in (101, 102):
        fake.add(pid, 100, start=fake.now + (pid - 101) * 0.01)
        _see(roles, fake)  # between its fork and its exec: a forked child for a moment
        fake.exec(pid, ["/opt/loader", "--shard", str(pid)], comm="loader")
        _see(roles, fake)
    _settle(fake)
    seen = _see(roles, fake)
    assert (seen[101], seen[102]) == ("worker 0", "worker 1")
    assert [_facts(roles, pid)[1:] for pid in (101, 102)] == [("exec", 0, 0), ("exec", 1, 0)]
