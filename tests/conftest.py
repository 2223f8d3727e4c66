"""Shared fixtures for the memprobe test suite.

tests/unit needs no real run, subprocess or sleep (about a minute together); everything that
starts processes or real DataLoader runs, and the long scenario fuzzing, lives in
tests/integration and is marked ``integration`` here (``pytest -m "not integration"`` runs the
unit tests alone).

* ``no_leftovers`` (autouse): after every test, no process the test started is left running
  (children of pytest, anything re-parented to pytest, and every process group a test's
  subprocess created), and no ``memprobe-sampler`` thread is alive.
* ``small_results``: one small scenario run once per session (fork/spawn/thread,
  list/numpy/arrow, 200k records, 2 workers), its results folder shared by many tests.
* ``report_results``: a real results folder (two runs and a failed one) shared by the report
  page and browser tests.
* ``jpegs`` / ``table``: generated JPEGs for the decode tests; ``fresh_marks``: memprobe.mark()
  as in a new process.
* ``simulated_env`` / ``hide_nvimgcodec``: run memprobe in a subprocess with a ``sitecustomize``
  that changes every Python process it starts (e.g. nvImageCodec not installed).
* ``cli``: the ``memprobe`` command in-process (``memprobe.cli.main``), for what a test asks of
  its arguments, messages and exit code; a new process costs 1-3 CPU-s (pandas, pyarrow, torch)
  and is kept for what happens at the process boundary (signals, rlimits, what is imported).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from inprocess import call_memprobe

GRACE_S = 3.0
SAMPLER_THREAD = "memprobe-sampler"

# -- leftover detection ------------------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36
# (pgid, its leader's start time) of subprocesses started as group leaders, in order
_groups_created: list[tuple[int, float | None]] = []


def _become_subreaper() -> bool:
    """Make pytest the subreaper of everything it starts, so that an orphan (e.g. a forkserver
    whose parent was killed) is re-parented to pytest and shows up in its children."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _track_popen_groups() -> None:
    """Record the pid of every subprocess started in a new process group or session: that pid
    is the group's id, and nothing in the group may outlive the test."""
    original = subprocess.Popen.__init__
    if getattr(original, "_memprobe_tracked", False):
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if kwargs.get("process_group") == 0 or kwargs.get("start_new_session"):
            _groups_created.append((self.pid, _start_time(self.pid)))

    __init__._memprobe_tracked = True  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = __init__  # type: ignore[method-assign]


def _hear_ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt in the suite whoever started it: a shell that starts a
    command in the background (``make test &``, a CI step run that way) hands it SIGINT ignored,
    Python then installs no handler of its own, and the tests of what Ctrl-C does (the thread
    loader's, the supervisor's) failed: "DID NOT RAISE KeyboardInterrupt"."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _fork_with_threads_is_chosen(config: pytest.Config) -> None:
    """The tests start torch's fork DataLoaders from this process, which has threads (torch's and
    pyarrow's own, pytest-xdist's): on CPython 3.12+ each worker's fork warned (DeprecationWarning,
    63 in the summary of tests/unit on 3.13), as in a fork run's process, which leaves out the same
    warning (memprobe.run.child.quiet_fork_with_threads; docs/pythons.md)."""
    from memprobe.run.child import FORK_WITH_THREADS, FORK_WITH_THREADS_MODULE

    config.addinivalue_line(
        "filterwarnings", f"ignore:{FORK_WITH_THREADS}:DeprecationWarning:{FORK_WITH_THREADS_MODULE}"
    )


def pytest_configure(config: pytest.Config) -> None:
    _become_subreaper()
    _track_popen_groups()
    _hear_ctrl_c()
    _fork_with_threads_is_chosen(config)


TESTS = Path(__file__).resolve().parent
INTEGRATION = TESTS / "integration"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration ``integration``; put the tests that share an
    expensive fixture in one xdist group."""
    for item in items:
        if INTEGRATION in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)
    for item, group in _shared_fixture_groups(items).items():
        item.add_marker(pytest.mark.xdist_group(group))


# -- running on several workers (pytest-xdist) -------------------------------------------------
#
# `make test` runs the suite on three workers (-n 3 --dist loadgroup). A module- or session-scoped
# fixture is set up once per worker that uses it, so tests that share one (a real scenario run
# of 10-60 s) are put in one group, which runs on one worker: each such fixture still runs once.
# Tests marked ``alone`` run while no other test runs on any worker. None is: waiting for the
# machine to be idle stalled every worker until the longest fixture under way (a 35-240 s scenario
# run) had ended, and a test that needs an idle machine has a premise on its load; the sampler's
# tests count ticks and rounds instead.

# Shared fixtures that cost nothing to set up twice: they do not tie their users together
# (``module.name`` for a module's fixture). test_faults' ``home`` and ``memprobe`` (a folder with one
# file, and how to start the CLI in it) tied its 49 tests to its ``runs`` fixture's worker, where 21
# need it; test_report_browser's ``chromium_binary`` (a path) tied its decode, record and wide-job
# pages to the scenario report's group.
CHEAP_SHARED_FIXTURES = frozenset(
    {
        "hide_nvimgcodec",
        "simulated_env",
        "test_faults.home",
        "test_faults.memprobe",
        "test_report_browser.chromium_binary",
    }
)


def _shared_fixture_groups(items: list[pytest.Item]) -> dict[pytest.Item, str]:
    """Each test that uses an expensive module- or session-scoped fixture of this suite -> the
    name of its group: tests joined by any such fixture, transitively, share one group."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys: dict[pytest.Item, list[str]] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        found = []
        for name, defs in info.name2fixturedefs.items() if info else ():
            fixture = defs[-1]
            ours = fixture.baseid.startswith("tests")  # not pytest's or a plugin's (tmp_path_factory)
            key = name if fixture.scope == "session" else f"{item.path.stem}.{name}"
            if not ours or fixture.scope not in ("module", "session") or key in CHEAP_SHARED_FIXTURES:
                continue
            found.append(key)
        for key in found[1:]:
            parent[find(key)] = find(found[0])
        if found:
            keys[item] = found
    return {item: find(found[0]) for item, found in keys.items()}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """On xdist workers, a test marked ``alone`` (set-up, call and tear-down, including the
    shared fixtures set up or torn down with it) waits until no other test runs, and the others
    wait for it; elsewhere this does nothing."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    # The workers' base temporary folders share a parent, made anew by each pytest run.
    folder = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    with _turn(folder, alone=item.get_closest_marker("alone") is not None):
        yield


@contextlib.contextmanager
def _turn(folder: Path, *, alone: bool):
    """A readers-writer lock across processes: every test holds it shared, an ``alone`` test
    exclusively. Whoever waits for it holds the turnstile, so tests that come later do not
    overtake a waiting ``alone`` test."""
    with open(folder / "turnstile.lock", "a") as turnstile, open(folder / "tests.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _key(p: psutil.Process) -> tuple[int, float] | None:
    try:
        return p.pid, p.create_time()
    except psutil.Error:
        return None


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _group_reused(pgid: int, leader_start: float | None) -> bool:
    """Whether the id of a test's process group now belongs to another group: its leader was
    reaped, the group emptied, and the pid (pid_max is 32768 here) went to a new process that
    leads a group of its own, perhaps another xdist worker's run. Its processes are not the test's."""
    now = _start_time(pgid)
    return now is not None and leader_start is not None and abs(now - leader_start) > 0.01


def _in_group(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def _reap_zombie_children() -> None:
    """Reap zombies whose parent is pytest (exited subprocesses and re-parented orphans)."""
    me = os.getpid()
    for p in _descendants():
        try:
            if p.ppid() == me and p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError, OSError):
            pass


def _session_helpers() -> set[int]:
    """multiprocessing's per-process singletons of pytest itself (the resource tracker and the
    forkserver, started by the first spawn/forkserver DataLoader in-process): they live for the
    rest of the session by design, and killing them breaks later tests."""
    pids = set()
    try:
        from multiprocessing import forkserver, resource_tracker

        pids.add(getattr(resource_tracker._resource_tracker, "_pid", None))
        pids.add(getattr(forkserver._forkserver, "_forkserver_pid", None))
    except (ImportError, AttributeError):
        pass
    return {p for p in pids if p}


def _leftovers(before: set, groups: list[tuple[int, float | None]]) -> tuple[list[str], list[int]]:
    me = os.getpid()
    left, pids = [], []
    helpers = _session_helpers()
    for p in _descendants():
        k = _key(p)
        if k is None or k in before or p.pid in helpers:
            continue
        try:
            status, ppid, cmd = p.status(), p.ppid(), " ".join(p.cmdline())[:160]
        except psutil.Error:
            continue
        if status == psutil.STATUS_ZOMBIE and ppid == me:
            continue  # reaped on the next pass
        left.append(f"pid {p.pid} ({status}, ppid {ppid}): {cmd}")
        pids.append(p.pid)
    for pgid, leader_start in groups:
        if _group_reused(pgid, leader_start):
            continue
        for pid in _in_group(pgid):
            if pid not in pids and pid != me:
                left.append(f"pid {pid} in process group {pgid}")
                pids.append(pid)
    return left, pids


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SAMPLER_THREAD and t.is_alive()]


def _stop_sampler_thread(thread: threading.Thread) -> None:
    """Stop a sampler a test left running, so that one leak fails that test and not every later
    one in the same worker (before: one failed assertion in CI became 15 errors)."""
    sampler = getattr(getattr(thread, "_target", None), "__self__", None)
    if sampler is not None and hasattr(sampler, "stop"):
        with contextlib.suppress(Exception):
            sampler.stop(final_pss=False)
    thread.join(5)


@pytest.fixture(autouse=True)
def no_leftovers():
    """Fail the test if it leaves a process or a sampler thread behind (after a 3 s grace)."""
    before = {k for k in map(_key, _descendants()) if k is not None}
    first_group = len(_groups_created)
    yield
    groups = _groups_created[first_group:]
    deadline = time.monotonic() + GRACE_S
    while True:
        _reap_zombie_children()
        left, pids = _leftovers(before, groups)
        threads = _sampler_threads()
        if not left and not threads:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for pid in pids:  # clean up so that one leak does not fail every later test
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for thread in threads:
        _stop_sampler_thread(thread)
    time.sleep(0.2)
    _reap_zombie_children()
    problems = left + [f"thread {t.name!r} still alive" for t in threads]
    pytest.fail("left behind after the test:\n  " + "\n  ".join(problems), pytrace=False)


# -- shared scenario results -------------------------------------------------------------------

SMALL_RECORDS = 200_000
# forkserver is covered by the fault and Ctrl-C tests, which need forkserver runs anyway.
SMALL_RUNS = ("list-fork-w2", "numpy-fork-w2", "arrow-fork-w2", "list-spawn-w2", "list-thread-w2")
SMALL_SCENARIO = f"""\
name: small
description: shared by the test suite
dataset: {{records: {SMALL_RECORDS}}}
backends: [list, numpy, arrow]
modes: [fork, spawn, thread]
workers: [2]
loader: {{batch_size: 256, epochs: 1}}
verdict: {{growth_threshold_mb: 50}}
expect:
  - {{backend: list, mode: fork, verdict: growing}}
  - {{backend: [numpy, arrow], verdict: flat}}
timeout_s: 120
"""


@dataclass
class SharedResults:
    root: Path
    result: object  # memprobe.run.session.SessionResult
    summaries: dict  # run_id -> RunSummary
    results: object  # memprobe.results.folder.ResultSet

    def samples(self, run_id: str):
        return self.results.run_table("samples", run_id)

    def meta(self, run_id: str) -> dict:
        return next(m for m in self.results.metas if m["run_id"] == run_id)


@pytest.fixture(scope="session")
def small_results(tmp_path_factory: pytest.TempPathFactory) -> SharedResults:
    """Five runs (~35 s on 2 idle cores), once per session: list/numpy/arrow under fork, list
    under spawn and threads; 200k records, 2 workers, no report."""
    from memprobe.results.folder import ResultSet
    from memprobe.run.scenario import parse_scenario
    from memprobe.run.session import run_scenario

    root = tmp_path_factory.mktemp("small") / "results"
    scenario = parse_scenario(SMALL_SCENARIO, "small.yaml")
    runs = [r for r in scenario.runs() if r.run_id in SMALL_RUNS]
    assert sorted(r.run_id for r in runs) == sorted(SMALL_RUNS)
    result = run_scenario(scenario, root, runs=runs, render=False)
    return SharedResults(
        root=root,
        result=result,
        summaries={s.run_id: s for s in result.summaries},
        results=ResultSet.load(root),
    )


# -- the report's real results ------------------------------------------------------------------

REPORT_SCENARIO = (
    "{name: unit-report, dataset: {records: 50000}, backends: [list, numpy], modes: [fork], workers: [2]}"
)


@pytest.fixture(scope="session")
def report_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real results folder for the report and browser tests, once per session: list-fork-w2,
    numpy-fork-w2 (50k records), and list-single-w0 failing early (an injected fault)."""
    import dataclasses

    from memprobe.run.scenario import parse_scenario
    from memprobe.run.session import run_scenario

    scenario = parse_scenario(REPORT_SCENARIO, "unit-report.yaml")
    runs = scenario.runs()
    failing = dataclasses.replace(
        runs[0],
        run_id="list-single-w0",
        mode="single",
        workers=0,
        fault="raise@100",
        dataset=dataclasses.replace(runs[0].dataset, records=5000),
    )
    out = tmp_path_factory.mktemp("report") / "results"
    result = run_scenario(scenario, out, runs=[*runs, failing], render=False)
    assert [s.status for s in result.summaries] == ["ok", "ok", "failed"], [s.error for s in result.summaries]
    return out


# -- decode test data --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    """24 generated 640x408 JPEGs (needs scikit-image)."""
    from memprobe.decode.images import make_jpegs

    return make_jpegs(24, seed=7)


@pytest.fixture(scope="module")
def table():
    """12 generated JPEGs in one Arrow table (index, source, jpeg)."""
    from memprobe.decode.images import jpeg_table

    return jpeg_table(12, seed=5)


# -- memprobe.mark() ---------------------------------------------------------------------------


@pytest.fixture
def fresh_marks(monkeypatch: pytest.MonkeyPatch):
    """memprobe.mark() as in a new process: no MEMPROBE_MARK_FILE, nothing opened yet."""
    from memprobe.record import marks

    monkeypatch.delenv(marks.ENV, raising=False)
    marks._reset()
    yield
    marks._reset()


# -- simulated machines ------------------------------------------------------------------------

HIDE_NVIMGCODEC = """
import sys

class _NotInstalled:
    \"\"\"Fail ``import nvidia.nvimgcodec`` the way a missing package does.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == "nvidia.nvimgcodec" or name.startswith("nvidia.nvimgcodec."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


@pytest.fixture(scope="session")
def hide_nvimgcodec() -> str:
    """A sitecustomize that makes ``import nvidia.nvimgcodec`` fail as on a machine without it."""
    return HIDE_NVIMGCODEC


@pytest.fixture(scope="session")
def simulated_env():
    """``make(folder, sitecustomize) -> env``: the environment for a memprobe subprocess in which
    ``sitecustomize`` runs first in every Python process it starts (the CLI, each run's child,
    its workers), with a JPEG cache of its own under ``folder``."""

    def make(folder: Path, sitecustomize: str) -> dict[str, str]:
        shim = folder / "shim"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "sitecustomize.py").write_text(sitecustomize, encoding="utf-8")
        path = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path, "XDG_CACHE_HOME": str(folder / "cache")}

    return make


# -- the memprobe command in-process -----------------------------------------------------------


@dataclass
class Ran:
    """What a ``memprobe`` command did: as :class:`subprocess.CompletedProcess` has it."""

    returncode: int
    stdout: str
    stderr: str


REPO = TESTS.parent


@pytest.fixture
def cli(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """``cli(*args) -> Ran``: ``memprobe ARGS`` run in-process from the repository's folder (as the
    tests' subprocesses were), with its exit code (argparse's ``SystemExit`` included) and what it
    and the processes it started printed (on file descriptors 1 and 2: a recorded command's own
    output too)."""
    monkeypatch.chdir(REPO)

    def run(*args: object) -> Ran:
        capfd.readouterr()
        code = call_memprobe(*args)
        out, err = capfd.readouterr()
        return Ran(code, out, err)

    return run
