"""The fault matrix (issue 13, docs/reliability.md): `memprobe run` given hostile or careless
input, and killed, interrupted or stopped at every phase, exactly as a user would do it.

Every case runs the real command in a session of its own and asserts four things: the exit
code, the message (one line, no traceback), the files left behind, and that no process of the
run survives - found by walking /proc for memprobe's session and for each run's process group
(the run's process leads a group of its own), never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 5.0  # end_group's grace (3 s) plus a margin for a loaded machine

# The user's datasets, in the current directory of every memprobe started here (not next to
# the scenarios): the factory import path includes the current directory (docs/scenarios.md).
FAULTSETS = '''\
import ctypes, os, signal, time


class Items:
    """n items; a worker (not the main process) dies or raises at item ``at``."""

    def __init__(self, n, delay=0.0, fault=None, at=-1):
        self.n, self.delay, self.fault, self.at = n, delay, fault, at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at:
            from torch.utils.data import get_worker_info
            if get_worker_info() is not None:
                if self.fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise ValueError(f"bad item {i}")
        time.sleep(self.delay)
        return i


def quick(n=96):
    return Items(n)


def slow(n=20000, delay=0.002):
    return Items(n, delay)


def raises():
    raise ValueError("the factory refused")


def exits():
    os._exit(3)


def segfaults():
    ctypes.string_at(0)


def hangs():
    time.sleep(3600)


def worker_killed():
    return Items(400, 0.001, "kill", 200)


def worker_raises():
    return Items(400, 0.001, "raise", 200)


def slow_build(seconds=120):
    time.sleep(seconds)
    return Items(96)


def _leave_the_session(where):
    """Start a process in a session of its own (setsid), as a dataset that launches a helper
    server might, and tell the test its pid."""
    import subprocess
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(where, "w") as f:
        f.write(str(p.pid))


def escapes(where, then="quick"):
    _leave_the_session(where)
    if then == "hang":
        time.sleep(3600)
    return slow() if then == "slow" else quick()
'''


# -- processes, found from /proc ---------------------------------------------------------------


def _stat(pid: str) -> tuple[str, int, int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[2]), int(fields[3]), text[text.index("(") + 1 : text.rindex(")")]


def members(sid: int, groups: Iterable[int] = ()) -> list[str]:
    """Live processes of session ``sid`` or of a process group in ``groups``."""
    groups = set(groups)
    found = []
    for name in os.listdir("/proc"):
        st = _stat(name) if name.isdigit() else None
        if st and st[0] not in ("Z", "X") and (st[2] == sid or st[1] in groups):
            found.append(f"{name} ({st[3]}, group {st[1]}, session {st[2]})")
    return found


def wait_gone(sid: int, groups: Iterable[int] = (), within: float = GONE_WITHIN_S) -> list[str]:
    """What of the session and groups is still alive after ``within`` seconds (then killed, so
    that one leak does not fail every later test)."""
    groups = list(groups)
    deadline = time.monotonic() + within
    while (left := members(sid, groups)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for entry in left:
        with contextlib.suppress(OSError):
            os.kill(int(entry.split()[0]), signal.SIGKILL)
    return left


def run_groups(out: Path) -> list[int]:
    """Each run's process group: the pid of its process, from the 'started' events."""
    return [e["pid"] for d in sorted((out / "runs").glob("*")) for e in events(d) if e["event"] == "started"]


def events(run_dir: Path) -> list[dict]:
    from memprobe.results.files import read_jsonl

    return read_jsonl(run_dir / "events.jsonl")  # a torn last line is skipped


# -- memprobe as a user runs it ----------------------------------------------------------------


@dataclass
class Done:
    code: int
    out: str
    err: str
    left: list[str]  # processes of the session or of a run's group still alive afterwards
    results: Path | None = None

    def one_line_error(self) -> str:
        lines = self.err.strip().splitlines()
        assert "Traceback" not in self.err and len(lines) == 1, self.err[-2000:]
        assert lines[0].startswith("memprobe: error: "), lines
        return lines[0]

    def manifest(self) -> dict:
        return json.loads((self.results / "manifest.json").read_text())

    def summary(self) -> dict:
        return {r["run_id"]: r for r in json.loads((self.results / "summary.json").read_text())["runs"]}


class Memprobe:
    """`python -m memprobe ...` in a session of its own, from a folder holding the user's datasets."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def start(self, *args: object, stdout: int = subprocess.PIPE) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "memprobe", *map(str, args)],
            cwd=self.cwd,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def finish(self, proc: subprocess.Popen, results: Path | None = None, timeout: float = 120) -> Done:
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        groups = run_groups(results) if results and (results / "runs").is_dir() else []
        return Done(proc.returncode, out or "", err, wait_gone(proc.pid, groups), results)

    def __call__(self, *args: object, results: Path | None = None, timeout: float = 120) -> Done:
        return self.finish(self.start(*args), results, timeout)

    def inline(self, *args: object, timeout: float = 60) -> Done:
        """`memprobe ARGS` called in this process (memprobe.cli.main, from ``cwd``): for what a
        command says and writes when it refuses its input, where a process of its own adds only
        its start (~1 CPU-s of imports for `report`). A traceback is printed to its stderr; a
        hang is cut after ``timeout`` s (SIGALRM); ``left``: children of this process still
        alive afterwards."""
        import io
        import traceback

        import psutil
        from inprocess import call_memprobe  # here: a run's child imports this module as a dataset's

        def children() -> dict[int, str]:
            alive = {}
            for p in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if p.status() != psutil.STATUS_ZOMBIE:
                        alive[p.pid] = p.name()
            return alive

        # What this pytest process had started before (multiprocessing's resource tracker or
        # forkserver, which live as long as it does) is not what the command left.
        before = children()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = call_memprobe(*args, cwd=self.cwd, timeout=timeout)
            except Exception:
                traceback.print_exc()
                code = 1
        # As wait_gone: what is still alive GONE_WITHIN_S after the command returned (a run's
        # process reaped by now may still be exiting), then killed.
        deadline = time.monotonic() + GONE_WITHIN_S
        while (
            new := {p: n for p, n in children().items() if p not in before}
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in new:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return Done(code, out.getvalue(), err.getvalue(), [f"{pid} ({name})" for pid, name in new.items()])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's project folder (current directory), with their datasets module."""
    d = tmp_path_factory.mktemp("project")
    (d / "faultsets.py").write_text(FAULTSETS)
    return d


@pytest.fixture(scope="module")
def memprobe(home: Path) -> Memprobe:
    return Memprobe(home)


def scenario(folder: Path, text: str, name: str = "s.yaml") -> Path:
    """A scenario file in its own folder, away from the datasets module."""
    d = folder / "scenarios"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d / name


def wait_for(results: Path, event: str, proc: subprocess.Popen, within: float = 90) -> dict:
    """Until some run of ``results`` sent ``event``; that event."""
    deadline = time.monotonic() + within
    while True:
        for e in (e for d in (results / "runs").glob("*") for e in events(d) if e["event"] == event):
            return e
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no {event!r} event within {within} s"
        time.sleep(0.02)


def assert_nothing_written(folder: Path) -> None:
    assert not folder.exists() or not any(folder.iterdir()), sorted(folder.iterdir())


# -- bad input: one line, exit 2, before anything runs -----------------------------------------


def alias_bomb(key: str, levels: int = 8) -> str:
    """The issue's 1.3 KB scenario: 8 levels of nested aliases, 9 references each, all under ``key``."""
    nodes = ['&a0 "lolololololololololololololololololol"']
    nodes += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return f"{'' if key == 'name' else 'name: bomb'}\n{key}: [{', '.join(nodes)}]\n"


@pytest.mark.slow
@pytest.mark.parametrize("key", ["description", "name", "modes", "loader", "dataset"])
def test_a_yaml_alias_bomb_is_refused_in_one_short_line(memprobe: Memprobe, tmp_path: Path, key: str) -> None:
    text = alias_bomb(key)
    assert len(text) < 1500
    out = tmp_path / "out"
    done = memprobe("run", scenario(tmp_path, text), "-o", out)
    assert done.code == 2
    line = done.one_line_error()
    assert (
        "s.yaml" in line
        and f"key '{key}'" in line
        and "aliases expand to more than 1,000,000 characters" in line
    )
    assert len(done.err) < 500  # the run printed a 351 MB error message
    assert_nothing_written(out)
    assert done.left == []


SCENARIO_MISTAKES = {
    "recursive alias": ("name: r\nmodes: &m [fork, *m]\n", ["line 2", "'modes[1]'", "recursive alias"]),
    "duplicate key": (
        "name: d\nloader:\n  batch_size: 8\n  batch_size: 64\n",
        ["line 4", "'loader.batch_size' appears twice", "first on line 3"],
    ),
    "nested too deeply": ("name: n\ndescription: " + "[" * 3000 + "]" * 3000 + "\n", ["nested too deeply"]),
    "NaN timeout": ("name: t\ntimeout_s: .nan\n", ["'timeout_s'", "nan", ">= 1"]),
    "seed numpy cannot take": (
        "name: s\ndataset: {seed: 99999999999}\n",
        ["'dataset.seed'", "<= 4,294,967,295"],
    ),
    "name with a slash": ("name: ../../etc\n", ["'name'", "'../../etc'", "without '/'"]),
    "workers: [10000]": ("name: w\nworkers: [10000]\n", ["'workers'", "10000", "--no-limits", "per CPU"]),
    "records the machine cannot hold": (
        "name: r\ndataset: {records: 1000000000}\n",
        ["'dataset.records'", "1,000,000,000", "--no-limits"],
    ),
    "batches fewer than workers": (
        "name: b\ndataset: {records: 100}\nworkers: [4]\nloader: {batch_size: 64}\n",
        ["'loader.batch_size'", "at most 33", "every worker delivers a batch"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SCENARIO_MISTAKES))
def test_a_scenario_mistake_stops_before_anything_runs(memprobe: Memprobe, tmp_path: Path, case: str) -> None:
    text, words = SCENARIO_MISTAKES[case]
    out = tmp_path / "out"
    done = memprobe("run", scenario(tmp_path, text), "-o", out)
    assert done.code == 2
    line = done.one_line_error()
    assert "s.yaml" in line and all(w in line for w in words), line
    assert_nothing_written(out)
    assert done.left == []


def _special_files(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    binary = tmp / "photo.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    huge = tmp / "huge.yaml"
    with open(huge, "wb") as f:
        f.write(b"name: huge\ndescription: " + b"x" * 50_000_000 + b"\n")
    fifo = tmp / "fifo.yaml"
    os.mkfifo(fifo)
    folder = tmp / "folder.yaml"
    folder.mkdir()
    not_utf8 = Path(os.fsdecode(bytes(tmp) + b"/\xff\xfe.yaml"))
    return {
        "binary file": (binary, ["photo.yaml", "not a text file", "byte 0x89 at offset 0"]),
        "50 MB file": (huge, ["huge.yaml", "larger than 1,000,000 bytes"]),
        "FIFO": (fifo, ["fifo.yaml", "a FIFO"]),  # opened without waiting for a writer
        "folder": (folder, ["folder.yaml", "is a folder"]),
        "unreadable file": (Path("/proc/self/mem"), ["/proc/self/mem", "cannot read"]),
        "missing file, name not UTF-8": (not_utf8, ["\\xff\\xfe.yaml", "no such scenario file"]),
    }


@pytest.mark.slow
def test_any_file_as_the_scenario_gets_one_line_naming_it(memprobe: Memprobe, tmp_path: Path) -> None:
    failures = {}
    for case, (path, words) in _special_files(tmp_path).items():
        started = time.monotonic()
        done = memprobe("run", path, "-o", tmp_path / "out", timeout=60)
        if (
            done.code != 2
            or "Traceback" in done.err
            or not all(w in done.err for w in words)
            or len(done.err.strip().splitlines()) != 1
            or time.monotonic() - started > 30
            or done.left
        ):
            failures[case] = (done.code, done.err[-500:], done.left)
    assert not failures
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "flag, words",
    [
        (["--timeout", "-5"], ["--timeout", "-5", ">= 1"]),
        (["--timeout", "inf"], ["--timeout", "inf"]),
        (["-o", "{file}"], ["-o", "exists and is not a folder"]),
        (["-o", "{full}"], ["-o", "not empty"]),
        (["-o", "/proc/self/x"], ["-o /proc/self/x", "cannot create the results folder"]),
    ],
)
def test_a_bad_flag_stops_before_anything_runs(
    memprobe: Memprobe, tmp_path: Path, flag: list[str], words: list[str]
) -> None:
    file, full = tmp_path / "notes.txt", tmp_path / "mine"
    file.write_text("my notes")
    full.mkdir()
    (full / "thesis.tex").write_text("keep")
    path = scenario(tmp_path, "name: ok\ndataset: {records: 1000}\n")
    done = memprobe.inline("run", path, *(f.format(file=file, full=full) for f in flag))
    assert done.code == 2
    line = done.one_line_error()
    assert all(w in line for w in words), line
    assert file.read_text() == "my notes" and sorted(p.name for p in full.iterdir()) == ["thesis.tex"]
    assert not list(memprobe.cwd.glob("reports/ok-*"))
    assert done.left == []


@pytest.mark.slow
def test_a_default_results_folder_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "reports").write_text("not a folder")  # where the results would go by default
    done = Memprobe(tmp_path).inline("run", scenario(tmp_path, "name: ok\ndataset: {records: 1000}\n"))
    assert done.code == 2
    assert "reports: exists and is not a folder" in done.one_line_error() and "-o" in done.err
    assert (tmp_path / "reports").read_text() == "not a folder" and done.left == []


# -- real runs: every case started at once -------------------------------------------------------
#
# Each case below is one `memprobe run` (or two) as a user would start, interrupt, kill or stop
# it. They run four at a time in one module fixture (about 40 s on 2 loaded cores, instead of
# twice that one after the other); the tests then read each case's outcome. The triggers are
# events (the run's first batch, "ok" on stderr), not fixed delays, so a slow machine only
# makes them later.

FAULTS = """\
name: faults
description: '</script><script>alert("pwned")</script><img src=x onerror=alert(1)>'
datasets:
  - {name: ok, factory: "faultsets:quick"}
  - {name: raises, factory: "faultsets:raises"}
  - {name: exits, factory: "faultsets:exits"}
  - {name: segfaults, factory: "faultsets:segfaults"}
  - {name: worker-killed, factory: "faultsets:worker_killed"}
  - {name: worker-raises, factory: "faultsets:worker_raises"}
modes: [fork]
workers: [2]
loader: {batch_size: 8}
timeout_s: 90
"""
SLOW = (
    "name: slow\ndataset: {factory: 'faultsets:slow'}\nmodes: [fork]\nworkers: [2]\nloader: {batch_size: 8}\n"
    "timeout_s: 120\n"
)
# Start-up counts toward a run's timeout, and under a loaded CI it once took more than 20 s; the
# stop is sized from the run's own clock (see case_stopped).
STOPPED_TIMEOUT_S = 45


def with_factory(factory: str, mode: str = "fork", timeout_s: int = 120) -> str:
    return (
        SLOW.replace("faultsets:slow'", f"faultsets:{factory}'")
        .replace("[fork]", f"[{mode}]")
        .replace("120", str(timeout_s))
    )


def interrupt(
    memprobe: Memprobe,
    tmp: Path,
    *,
    when: str,
    signals: list[int],
    gap: float = 0.0,
    text: str = SLOW,
    delay: float = 0.2,
    render: bool = True,
) -> Done:
    """Start `memprobe run`, wait for the event ``when`` (or the stderr text after "stderr:"),
    then send ``signals``, ``gap`` seconds apart."""
    out = tmp / "results"
    proc = memprobe.start("run", scenario(tmp, text), "-o", out, *([] if render else ["--no-report"]))
    if when.startswith("stderr:"):
        for line in proc.stderr:
            if when[7:] in line:
                break
    else:
        wait_for(out, when, proc)
    time.sleep(delay)
    for i, sig in enumerate(signals):
        time.sleep(gap if i else 0)
        os.kill(proc.pid, sig)
    return memprobe.finish(proc, out)


def case_faults(memprobe: Memprobe, tmp: Path) -> Done:
    """Six runs in one session; the factories come from the current directory, the scenario
    lives elsewhere."""
    out = tmp / "results"
    return memprobe("run", scenario(tmp, FAULTS), "-o", out, results=out)


def case_hang(memprobe: Memprobe, tmp: Path) -> Done:
    out = tmp / "results"
    return memprobe(
        "run",
        "--dataset",
        "faultsets:hangs",
        "--modes",
        "fork",
        "--timeout",
        "2",
        "-o",
        out,
        "--no-report",
        results=out,
    )


def case_signal(sig: int) -> Callable[[Memprobe, Path], Done]:
    return lambda memprobe, tmp: interrupt(memprobe, tmp, when="first_batch", signals=[sig])


def case_ctrl_c_twice(memprobe: Memprobe, tmp: Path) -> Done:
    return interrupt(memprobe, tmp, when="first_batch", signals=[signal.SIGINT, signal.SIGINT], gap=0.3)


def case_ctrl_c_building(memprobe: Memprobe, tmp: Path) -> Done:
    return interrupt(
        memprobe, tmp, when="started", signals=[signal.SIGINT], text=with_factory("slow_build"), render=False
    )


def case_ctrl_c_saving(memprobe: Memprobe, tmp: Path) -> Done:
    """The issue: SIGINT 0.05 s after the last run's "ok"."""
    return interrupt(
        memprobe, tmp, when="stderr:: ok (", signals=[signal.SIGINT], delay=0.05, text=with_factory("quick")
    )


KILL_PHASES = {
    "start-up": ("slow_build", "fork", "started", 0.3),
    "iteration": ("slow", "forkserver", "first_batch", 0.3),
    "clean-up": ("quick", "fork", "stderr:: ok (", 0.05),
}


def case_sigkill(phase: str) -> Callable[[Memprobe, Path], tuple[Done, Done]]:
    """SIGKILL at ``phase``, then `memprobe report` on what was left."""
    factory, mode, when, delay = KILL_PHASES[phase]

    def run(memprobe: Memprobe, tmp: Path) -> tuple[Done, Done]:
        done = interrupt(
            memprobe, tmp, when=when, signals=[signal.SIGKILL], text=with_factory(factory, mode), delay=delay
        )
        return done, memprobe("report", done.results)

    return run


def case_folder_deleted(memprobe: Memprobe, tmp: Path) -> Done:
    import shutil

    out = tmp / "results"
    proc = memprobe.start("run", scenario(tmp, SLOW), "-o", out)
    wait_for(out, "first_batch", proc)
    groups = run_groups(out)
    shutil.rmtree(out)
    done = memprobe.finish(proc)
    done.left += wait_gone(proc.pid, groups)
    done.results = out
    return done


def case_stopped(memprobe: Memprobe, tmp: Path) -> Done:
    """SIGSTOP for longer than the timeout, once iterating, then SIGCONT."""
    out = tmp / "results"
    text = with_factory("slow", timeout_s=STOPPED_TIMEOUT_S).replace("'}", "', kwargs: {n: 1500}}")
    proc = memprobe.start("run", scenario(tmp, text), "-o", out, "--no-report")
    first = wait_for(out, "first_batch", proc)
    os.kill(proc.pid, signal.SIGSTOP)
    # Longer than what was left of the timeout: the run's clock read ``t`` at its first batch.
    time.sleep(STOPPED_TIMEOUT_S - first["t"] + 1)
    os.kill(proc.pid, signal.SIGCONT)
    return memprobe.finish(proc, out)


def case_same_second(memprobe: Memprobe, tmp: Path) -> list[Done]:
    """Two runs of one scenario into default folders, started together; one prints into a
    closed pipe (`memprobe run ... | head -0`)."""
    path = scenario(tmp, with_factory("quick").replace("name: slow", "name: twins"))
    r, w = os.pipe()
    os.close(r)
    procs = [memprobe.start("run", path, "--no-report"), memprobe.start("run", path, "--no-report", stdout=w)]
    os.close(w)
    return [memprobe.finish(p) for p in procs]


CASES: dict[str, Callable[[Memprobe, Path], Any]] = {
    "faults": case_faults,
    "hang": case_hang,
    "SIGINT": case_signal(signal.SIGINT),
    "SIGTERM": case_signal(signal.SIGTERM),
    "SIGHUP": case_signal(signal.SIGHUP),
    "ctrl-c twice": case_ctrl_c_twice,
    "ctrl-c building": case_ctrl_c_building,
    "ctrl-c saving": case_ctrl_c_saving,
    **{f"SIGKILL {p}": case_sigkill(p) for p in KILL_PHASES},
    "folder deleted": case_folder_deleted,
    "stopped": case_stopped,
    "same second": case_same_second,
}
AT_ONCE = 4


@pytest.fixture(scope="module")
def runs(memprobe: Memprobe, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's outcome (or the exception it raised), the slowest started first."""
    from concurrent.futures import ThreadPoolExecutor

    order = ["stopped", "faults", *[c for c in CASES if c not in ("stopped", "faults")]]
    with ThreadPoolExecutor(AT_ONCE) as pool:
        futures = {
            c: pool.submit(CASES[c], memprobe, tmp_path_factory.mktemp(c.replace(" ", "-"))) for c in order
        }
    return {c: f.exception() or f.result() for c, f in futures.items()}


def outcome(runs: dict[str, Any], case: str) -> Any:
    result = runs[case]
    if isinstance(result, BaseException):
        raise result
    return result


def _run(done: Done, run_id: str) -> tuple[dict, dict]:
    meta = json.loads((done.results / "runs" / run_id / "meta.json").read_text())
    return done.summary()[run_id], meta


@pytest.mark.slow
@pytest.mark.parametrize(
    "run_id, words",
    [
        ("raises-fork-w2", ["ValueError", "the factory refused", "faultsets:raises"]),
        ("exits-fork-w2", ["ended (exit code 3)", "child.log"]),
        ("segfaults-fork-w2", ["SIGSEGV"]),
        ("worker-killed-fork-w2", ["worker", "SIGKILL"]),
        ("worker-raises-fork-w2", ["ValueError", "bad item 200"]),
    ],
)
def test_a_failing_run_is_named_and_the_others_go_on(runs: dict, run_id: str, words: list[str]) -> None:
    done = outcome(runs, "faults")
    assert done.code == 1, done.err[-2000:]
    assert "Traceback" not in done.err + done.out  # a worker's remote traceback is cut to its ends
    run, meta = _run(done, run_id)
    assert run["status"] == "failed" and all(w in run["error"] for w in words), run["error"]
    assert f"{run_id}: failed" in done.out  # named under the summary table
    assert meta["exit_code"] is not None  # the run's process was reaped, not abandoned
    assert done.left == []


@pytest.mark.slow
def test_the_runs_around_a_failure_complete_and_are_reported(runs: dict) -> None:
    done = outcome(runs, "faults")
    run, _ = _run(done, "ok-fork-w2")
    assert run["status"] == "ok" and run["items"] == 96
    assert done.manifest()["status"] == "complete" and done.manifest()["signals"] == []
    assert (done.results / "report.html").exists() and (done.results / "samples.parquet").exists()
    assert not list(done.results.rglob(".*.tmp"))


@pytest.mark.slow
def test_the_report_escapes_what_the_scenario_says(runs: dict) -> None:
    html = (outcome(runs, "faults").results / "report.html").read_text(encoding="utf-8")
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # shown, as text


@pytest.mark.slow
def test_damaged_results_get_one_line_from_report(memprobe: Memprobe, runs: dict, tmp_path: Path) -> None:
    import shutil

    original = outcome(runs, "faults").results
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    samples = copy / "samples.parquet"
    samples.write_bytes(samples.read_bytes()[:500])  # the truncated samples.parquet
    done = memprobe.inline("report", copy)
    assert done.code == 2
    line = done.one_line_error()
    assert "samples.parquet" in line and "truncated or damaged" in line
    samples.unlink()
    (copy / "manifest.json").write_text('{"schema_version": 1, "status": "comp')
    done = memprobe.inline("report", copy)
    assert done.code == 2 and "manifest.json" in done.one_line_error()
    assert (copy / "report.html").read_bytes() == (original / "report.html").read_bytes()  # untouched


# -- a results folder from someone else: data, never a way to read or write other files (issue 23)

V1 = REPO / "tests" / "data" / "results-v1" / "scenario"  # a results folder written by a real run
SECRET = "SECRET-23 root:$6$hash"


def _data(path: Path) -> str:
    """The bytes a file holds on disk, its holes left out: the 10 GB sparse scenario.yaml is 313
    bytes and 10 GB of holes (reading it whole took 4 s of each case)."""
    found = []
    with open(path, "rb") as f:
        fd, end, at = f.fileno(), os.fstat(f.fileno()).st_size, 0
        while at < end:
            try:
                at = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after ``at``
                break
            hole = os.lseek(fd, at, os.SEEK_HOLE)
            f.seek(at)
            found.append(f.read(hole - at))
            at = hole
    return b"".join(found).decode("latin-1")


def _hostile_folders(tmp: Path) -> dict[str, tuple[Callable[[Path], None], list[str]]]:
    """Case -> (how a copy of V1 is made hostile, words of the one-line refusal)."""
    secret = tmp / "secret.txt"
    secret.write_text(SECRET)
    run = "runs/list-fork-w2"

    def link(name: str, target: str | Path) -> Callable[[Path], None]:
        def make(root: Path) -> None:
            (root / name).unlink(missing_ok=True)
            (root / name).symlink_to(target)

        return make

    def fifo(name: str) -> Callable[[Path], None]:
        def make(root: Path) -> None:
            (root / name).unlink(missing_ok=True)
            os.mkfifo(root / name)

        return make

    def run_elsewhere(root: Path) -> None:
        os.rename(root / run, tmp / "elsewhere")
        (root / run).symlink_to(tmp / "elsewhere")

    def sparse_scenario(root: Path) -> None:
        os.truncate(root / "scenario.yaml", 10 << 30)  # 10 GB of holes: nothing on disk

    return {
        "scenario.yaml -> a secret file": (link("scenario.yaml", secret), ["scenario.yaml", "symbolic link"]),
        "scenario.yaml -> /dev/zero": (
            link("scenario.yaml", "/dev/zero"),
            ["scenario.yaml", "symbolic link"],
        ),
        "scenario.yaml a FIFO": (fifo("scenario.yaml"), ["scenario.yaml", "a FIFO"]),
        "scenario.yaml of 10 GB": (sparse_scenario, ["scenario.yaml", "larger than 1,000,000 bytes"]),
        "events.jsonl -> /dev/zero": (
            link(f"{run}/events.jsonl", "/dev/zero"),
            ["events.jsonl", "symbolic link"],
        ),
        "events.jsonl a FIFO": (fifo(f"{run}/events.jsonl"), ["events.jsonl", "a FIFO"]),
        "samples.parquet -> a file outside": (
            link("samples.parquet", V1 / "samples.parquet"),
            ["samples.parquet", "symbolic link"],
        ),
        "a run's folder -> a folder outside": (run_elsewhere, ["meta.json", "symbolic link"]),
        "manifest.json -> a file inside": (
            link("manifest.json", "summary.json"),
            ["manifest.json", "symbolic link"],
        ),
    }


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_results_folder_from_someone_else_reads_nothing_outside_it(
    memprobe: Memprobe, tmp_path: Path, command: str
) -> None:
    """Before: a link to /etc/shadow as scenario.yaml copied it into report.html, /dev/zero ended
    in MemoryError and a FIFO hung report and compare until killed."""
    import shutil

    failures = {}
    for i, (case, (make, words)) in enumerate(_hostile_folders(tmp_path).items()):
        root = Path(shutil.copytree(V1, tmp_path / f"folder-{i}", symlinks=True))
        make(root)
        started = time.monotonic()
        args = (
            ("report", root) if command == "report" else ("compare", V1, root, "-o", tmp_path / f"c{i}.html")
        )
        done = memprobe.inline(*args, timeout=60)
        lines = done.err.strip().splitlines()
        written = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and SECRET in _data(p)]
        if (
            done.code != 2
            or "Traceback" in done.err
            or len(lines) != 1
            or not all(w in lines[0] for w in words)
            or (root / "report.html").exists()
            or (tmp_path / f"c{i}.html").exists()
            or written
        ):
            failures[case] = (done.code, done.err[-500:], round(time.monotonic() - started, 1), written)
    assert not failures, failures


def test_report_writes_no_file_through_a_link_left_in_the_folder(memprobe: Memprobe, tmp_path: Path) -> None:
    """A folder whose temporary name for report.html is a link to a file of the user's: the page
    is written to the folder, the file is untouched (before: report.html was written into it)."""
    import shutil

    root = Path(shutil.copytree(V1, tmp_path / "folder"))
    precious = tmp_path / "bashrc"
    precious.write_text("export KEEP=1\n")
    (root / ".report.html.tmp").symlink_to(precious)
    (root / ".summary.json.tmp").symlink_to(precious)
    done = memprobe.inline("report", root)
    assert done.code == 0, done.err
    assert precious.read_text() == "export KEEP=1\n"
    assert (root / "report.html").is_file() and not (root / "report.html").is_symlink()
    assert json.loads((root / "summary.json").read_text())["runs"][0]["run_id"] == "list-fork-w2"


def test_a_command_line_with_bytes_that_are_not_utf8_is_recorded_and_shown_escaped(
    memprobe: Memprobe, tmp_path: Path
) -> None:
    """`memprobe record -o d -- true $'\\xff'`: before, UnicodeEncodeError and no report, and
    `memprobe report d` failed the same way."""
    out = tmp_path / "d"
    proc = subprocess.Popen(
        [
            os.fsencode(sys.executable),
            b"-m",
            b"memprobe",
            b"record",
            b"-o",
            os.fsencode(out),
            b"--",
            b"true",
            b"\xff",
        ],
        cwd=memprobe.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    done = memprobe.finish(proc, out)
    assert done.code == 0 and "Traceback" not in done.err, done.err[-2000:]
    assert done.left == []
    assert "true \\xff" in (out / "report.html").read_text(encoding="utf-8")  # strict: no surrogate
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    (out / "report.html").unlink()
    again = memprobe.inline("report", out)
    assert again.code == 0 and "Traceback" not in again.err, again.err[-2000:]
    assert "true \\xff" in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_hanging_factory_times_out_and_leaves_nothing(runs: dict) -> None:
    done = outcome(runs, "hang")
    assert done.code == 1 and "Traceback" not in done.err
    run = done.summary()["hangs-fork-w2"]
    assert run["status"] == "timeout" and "timeout_s=2" in run["error"]
    assert done.manifest()["status"] == "complete"
    assert done.left == []


def assert_interrupted(done: Done, code: int, name: str, run_id: str = "slow-fork-w2") -> dict:
    assert done.code == code, done.err[-2000:]
    assert "Traceback" not in done.err and f"interrupted by {name}" in done.err
    manifest = done.manifest()
    assert manifest["status"] == "interrupted" and manifest["signals"][0] == name
    run = done.summary()[run_id]
    assert run["status"] == "interrupted" and f"by {name}" in run["error"]
    assert not list(done.results.rglob(".*.tmp"))
    assert done.left == []
    return run


@pytest.mark.slow
@pytest.mark.parametrize("name, code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_signal_while_iterating_saves_everything_and_leaves_nothing(
    runs: dict, name: str, code: int
) -> None:
    import pandas as pd

    done = outcome(runs, name)
    run = assert_interrupted(done, code, name)
    assert 0 < run["items"] < 20000
    assert "interrupted" in (done.results / "report.html").read_text(encoding="utf-8").lower()
    samples = pd.read_parquet(done.results / "samples.parquet")
    assert {"main", "worker 0", "worker 1"} <= set(samples["role"])  # partial samples, workers included


@pytest.mark.slow
def test_ctrl_c_twice_still_writes_the_report(runs: dict) -> None:
    """The issue: two SIGINTs 0.3 s apart mid-run left no report.html."""
    done = outcome(runs, "ctrl-c twice")
    assert_interrupted(done, 130, "SIGINT")
    assert done.manifest()["signals"] == ["SIGINT", "SIGINT"]
    assert (done.results / "summary.json").exists()
    assert "interrupted" in (done.results / "report.html").read_text(encoding="utf-8").lower()


@pytest.mark.slow
def test_ctrl_c_while_the_dataset_is_being_built(runs: dict) -> None:
    done = outcome(runs, "ctrl-c building")
    run = assert_interrupted(done, 130, "SIGINT", "slow_build-fork-w2")
    assert run["items"] == 0


@pytest.mark.slow
def test_ctrl_c_while_saving_finishes_the_results(runs: dict) -> None:
    """The issue: SIGINT 0.05 s after the last run's "ok" left no report, no summary and a
    manifest saying "complete" with exit 130. Every run had ended: the results are complete."""
    done = outcome(runs, "ctrl-c saving")
    assert done.code == 0, done.err[-2000:]
    assert "Traceback" not in done.err and "came after the last run had ended" in done.err
    assert done.manifest()["status"] == "complete" and done.manifest()["signals"] == ["SIGINT"]
    assert done.summary()["quick-fork-w2"]["status"] == "ok"
    assert (done.results / "report.html").exists()
    assert done.left == []


@pytest.mark.slow
@pytest.mark.parametrize("phase", list(KILL_PHASES))
def test_sigkill_at_any_phase_leaves_no_process_and_report_finishes_the_folder(
    runs: dict, phase: str
) -> None:
    done, again = outcome(runs, f"SIGKILL {phase}")
    factory, mode, _, _ = KILL_PHASES[phase]
    assert done.code == -signal.SIGKILL
    assert run_groups(done.results)
    assert done.left == []  # the issue: ~1,000 workers forked on, re-parented to init
    assert again.code == 0 and "Traceback" not in again.err, again.err
    manifest = done.manifest()
    run = done.summary()[f"{factory}-{mode}-w2"]
    if manifest["status"] == "interrupted":  # killed before the results were finished
        assert run["status"] == "interrupted" and "killed?" in run["error"]
        assert "interrupted" in (done.results / "report.html").read_text(encoding="utf-8").lower()
    else:  # killed while saving, after every run had ended
        assert phase == "clean-up" and manifest["status"] == "complete" and run["status"] == "ok"
    assert (done.results / "samples.parquet").exists() and not list(done.results.rglob("samples.jsonl"))
    assert again.left == []


@pytest.mark.slow
def test_a_results_folder_deleted_mid_run_is_named_as_such(runs: dict) -> None:
    done = outcome(runs, "folder deleted")
    assert done.code == 1
    line = done.err.strip().splitlines()[-1]
    assert "Traceback" not in done.err and "deleted or moved" in line and str(done.results) in line
    assert "space" not in line  # not a full disk
    assert not done.results.exists()
    assert done.left == []


@pytest.mark.slow
def test_memprobe_stopped_longer_than_the_timeout_does_not_time_the_run_out(runs: dict) -> None:
    done = outcome(runs, "stopped")
    assert done.code == 0, done.err[-2000:]
    run = done.summary()["slow-fork-w2"]
    assert run["status"] == "ok" and run["duration_s"] > STOPPED_TIMEOUT_S
    assert done.left == []


@pytest.mark.slow
def test_runs_started_in_the_same_second_do_not_collide(runs: dict, memprobe: Memprobe) -> None:
    done = outcome(runs, "same second")
    assert [d.code for d in done] == [0, 0], [d.err[-1000:] for d in done]
    assert all("Traceback" not in d.err and "already holds results" not in d.err for d in done)
    made = sorted((memprobe.cwd / "reports").glob("twins-*"))
    assert len(made) == 2 and all((m / "summary.json").exists() for m in made)
    assert all(d.left == [] for d in done)


# -- the run's process outlives no supervisor --------------------------------------------------


@pytest.mark.slow
def test_a_run_process_whose_supervisor_died_before_it_started_ends_its_group(tmp_path: Path) -> None:
    """The race PR_SET_PDEATHSIG alone misses: the supervisor died before prctl() ran. The run's
    process sees a parent other than the one named in its environment and ends its group."""
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    r, w = os.pipe()
    env = {**os.environ, "MEMPROBE_EVENT_FD": str(w), "MEMPROBE_SUPERVISOR_PID": str(helper.pid)}
    code = (
        "import os, subprocess, sys; os.setpgid(0, 0); "
        "sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(sleeper.pid, flush=True); "
        "os.execv(sys.executable, [sys.executable, '-m', 'memprobe.run.child'])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        pass_fds=(w,),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(w)
    try:
        sleeper = int(proc.stdout.readline())
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, err
        assert "the supervisor is gone" in err
        assert wait_gone(-1, [proc.pid]) == []  # the whole group, the sleeper included
        assert _stat(str(sleeper)) is None or _stat(str(sleeper))[0] in ("Z", "X")
    finally:
        os.close(r)
        helper.kill()
        helper.wait()


@pytest.mark.slow
def test_watch_refuses_init_itself_and_a_zombie(tmp_path: Path) -> None:
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    while _stat(str(zombie.pid))[0] != "Z":
        time.sleep(0.01)
    try:
        cases = {
            "init": ("1", "memprobe itself or one of its parents"),
            "itself": ("$$", "memprobe itself or one of its parents"),  # exec: the shell's pid is memprobe's
            "a zombie": (str(zombie.pid), f"no running process with pid {zombie.pid}"),
        }
        for case, (pid, words) in cases.items():
            out = tmp_path / case
            proc = subprocess.Popen(
                [
                    "sh",
                    "-c",
                    f'exec "$0" -m memprobe watch {pid} --duration 1 -o "$1"',
                    sys.executable,
                    str(out),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            done = Memprobe(tmp_path).finish(proc)
            assert done.code == 2 and words in done.one_line_error(), (case, done.err)
            assert not out.exists() and done.left == []
    finally:
        zombie.wait()


# -- in-process: what the signal handlers do ---------------------------------------------------


def test_stop_signals_are_noted_not_raised_and_wake_the_supervisor() -> None:
    import select

    from memprobe.session.signals import StopSignals

    seen = []
    with StopSignals((signal.SIGINT, signal.SIGTERM), on_signal=lambda s, n: seen.append((s, n))) as stop:
        assert select.select([stop.fileno()], [], [], 0)[0] == []
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)  # would end the process without the handler
        time.sleep(0.05)  # no KeyboardInterrupt: handlers only take note
        assert stop.received == [signal.SIGINT, signal.SIGTERM] and stop.first == "SIGINT"
        assert select.select([stop.fileno()], [], [], 0)[0] == [stop.fileno()]
    assert seen == [(signal.SIGINT, 1), (signal.SIGTERM, 2)]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def _alive(pid: int) -> bool:
    st = _stat(str(pid))
    return st is not None and st[0] not in ("Z", "X")


def _escaped_pid(path: Path, proc: subprocess.Popen, within: float = 60) -> int:
    deadline = time.monotonic() + within
    while not path.exists() or not path.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return int(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ends", "times out", "SIGINT", "SIGKILL"])
def test_a_process_that_left_the_session_ends_with_the_run(
    memprobe: Memprobe, tmp_path: Path, how: str
) -> None:
    """A dataset's `setsid` child leaves the run's process group and memprobe's session, where no
    group signal reaches it; it still ends with the run, however the run ends."""
    where = tmp_path / "escaped.pid"
    then = {"ends": "quick", "times out": "hang"}.get(how, "slow")
    kwargs = json.dumps({"where": str(where), "then": then})
    out = tmp_path / "out"
    proc = memprobe.start(
        "run",
        "--dataset",
        "faultsets:escapes",
        "--kwargs",
        kwargs,
        "--modes",
        "fork",
        "--workers",
        "2",
        "--timeout",
        "3" if then == "hang" else "120",
        "-o",
        out,
    )
    pid = _escaped_pid(where, proc)
    if how in ("SIGINT", "SIGKILL"):
        wait_for(out, "warm", proc)
        os.killpg(proc.pid, getattr(signal, how))
    done = memprobe.finish(proc, out)
    assert done.code == {"ends": 0, "times out": 1, "SIGINT": 130, "SIGKILL": -signal.SIGKILL}[how], done.err[
        -2000:
    ]
    deadline = time.monotonic() + GONE_WITHIN_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    still = _alive(pid)
    if still:
        os.kill(pid, signal.SIGKILL)
    assert not still, f"the dataset's setsid child {pid} outlived the run ({how})"
    assert done.left == []
