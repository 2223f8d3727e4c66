"""The fault matrix of `memprobe record` and `memprobe watch` (issue 23, docs/reliability.md): a
job that fills the disk or deletes its results folder, flags that are not numbers, foreign
command lines, stop signals, processes that leave the job's process group, a closed pipe, a
missing interpreter, a damaged mark file, a thread id, a daemonized child.

Every case runs the real command in a session of its own and asserts the exit code, the message
(no traceback), the files written and what became of the job; afterwards no process of
memprobe's session is left (test_faults.wait_gone, which walks /proc, never by name).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_faults import Done, Memprobe, wait_gone

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RESULTS_V1 = REPO / "tests" / "data" / "results-v1" / "record"


def memprobe(*args: object, cwd: Path | None = None, timeout: float = 120, **kwargs) -> Done:
    """`python -m memprobe ARGS` in a session of its own, to its end."""
    proc = start(*args, cwd=cwd, **kwargs)
    return finish(proc, timeout)


def start(*args: object, cwd: Path | None = None, session: bool = True, **kwargs) -> subprocess.Popen:
    """memprobe in a session of its own (``session=False``: in a process group of its own, in
    pytest's session, as from a shell's job)."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.update({"start_new_session": True} if session else {"process_group": 0})
    return subprocess.Popen([sys.executable, "-m", "memprobe", *map(str, args)], cwd=cwd, text=True, **kwargs)


def finish(proc: subprocess.Popen, timeout: float = 120) -> Done:
    """Its end; what of its session, and of its group (started with ``session=False``), is left."""
    done = Memprobe(REPO).finish(proc, timeout=timeout)
    done.err = done.err or ""
    done.left += wait_gone(proc.pid, [proc.pid])
    return done


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return False
    return text[text.rindex(b")") + 2 : text.rindex(b")") + 3] not in (b"Z", b"X")


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def run_meta(out: Path) -> dict:
    (meta,) = (out / "runs").glob("*/meta.json")
    return json.loads(meta.read_text())


def no_traceback(done: Done) -> None:
    assert "Traceback" not in done.err, done.err[-3000:]


# -- a full disk, a deleted folder: memprobe stops sampling, never the job ----------------------

FILLS_THE_DISK = textwrap.dedent("""
    import glob, os, sys, time
    blob, then, go = sys.argv[1:4]

    def wait_for(done):
        while not done():
            time.sleep(0.02)

    # A tick written first: until a samples.jsonl of the run's folder (record: where the mark
    # file lies; watch: under argv[4], the results' runs/) holds a row.
    runs = sys.argv[4] if len(sys.argv) > 4 else os.path.dirname(os.path.dirname(os.environ["MEMPROBE_MARK_FILE"]))
    wait_for(lambda: any(os.path.getsize(f) for f in glob.glob(os.path.join(runs, "*", "samples.jsonl"))))
    try:
        with open(blob, "wb") as f:
            f.write(b"x" * (4 << 20))  # more than the 2 MB the disk holds
    except OSError as exc:
        print("job: the disk is full:", exc.strerror, flush=True)
    wait_for(lambda: os.path.exists(go))  # the test saw memprobe stop sampling; the job goes on
    if then == "frees":
        os.unlink(blob)
    time.sleep(0.5)
    print("job: done", flush=True)
    sys.exit(7)
""")


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MB tmpfs (root only): what a job and its results fill."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _once_sampling_stopped(tmp_path: Path, go: Path, *args: object) -> Done:
    """`memprobe ARGS` to its end, ``go`` made once it has said it stopped sampling (the job
    waits for it: before, a 1.5 s sleep, within which a loaded machine may take no tick)."""
    err = tmp_path / "err.txt"
    with open(err, "w") as stderr:
        proc = start(*args, stderr=stderr)
    _wait_for_line(err, "sampling stopped at", proc)
    go.touch()
    done = finish(proc)
    done.err = err.read_text()
    return done


@pytest.mark.parametrize("then", ["stays full", "frees"])
def test_a_full_disk_stops_the_sampling_never_the_job(tmp_path: Path, small_disk: Path, then: str) -> None:
    """Before: the command got SIGTERM after its first tick and memprobe exited 1."""
    script = tmp_path / "fills.py"
    script.write_text(FILLS_THE_DISK)
    out, go = small_disk / "out", tmp_path / "go"
    job = [sys.executable, script, small_disk / "blob", then.split()[0], go]
    done = _once_sampling_stopped(tmp_path, go, "record", "--no-report", "-o", out, "--", *job)
    no_traceback(done)
    assert done.code == 7, done.err  # the job's exit code, passed through
    assert "job: the disk is full" in done.out and "job: done" in done.out  # it ran to its end
    assert "No space left on device: sampling stopped at" in done.err, done.err
    assert "the command runs on" in done.err
    assert done.left == []
    if then == "stays full":
        (samples,) = (out / "runs").glob("*/samples.jsonl")
        assert samples.read_text().count("\n") >= 1, "the samples taken before the disk filled are kept"
        # What was kept is named, with how to finish the folder; nothing claims more.
        assert "the results could not be finished; kept in" in done.err, done.err
        assert f"memprobe report {out}" in done.err
        assert json.loads((out / "manifest.json").read_text())["status"] == "running"
        assert not (out / "summary.json").exists()
    else:  # the job freed the space before its end: the results are finished, up to the stop
        assert "the results cover the job until then" in done.err, done.err
        assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
        meta = run_meta(out)
        assert meta["status"] == "failed" and meta["exit_code"] == 7
        assert "No space left on device" in meta["sampling_stopped"]["reason"]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["runs"][0]["status"] == "failed"
        import pandas as pd

        t = pd.read_parquet(out / "samples.parquet")["t"]
        assert len(t) >= 1 and t.max() <= meta["sampling_stopped"]["t"]


def test_a_full_disk_stops_watch_and_never_the_watched_job(tmp_path: Path, small_disk: Path) -> None:
    """watch's results on the disk the job fills: watch stops, exit 1, names what was kept; the
    job is never signalled. Before: exit 1 with "What was saved before is intact" and no word of
    what that was."""
    script = tmp_path / "fills.py"
    script.write_text(FILLS_THE_DISK)
    out, go = small_disk / "out", tmp_path / "go"
    job = subprocess.Popen(
        [sys.executable, str(script), str(small_disk / "blob"), "stays", str(go), str(out / "runs")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        done = _once_sampling_stopped(tmp_path, go, "watch", job.pid, "--no-report", "-o", out)
        no_traceback(done)
        assert done.code == 1, done.err
        assert "No space left on device: sampling stopped at" in done.err, done.err
        assert "the watched process was not touched" in done.err
        assert "the results could not be finished; kept in" in done.out, done.out
        stdout, _ = job.communicate(timeout=60)
        assert job.returncode == 7 and "job: done" in stdout
        assert done.left == []
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


DELETES_ITS_RESULTS = textwrap.dedent("""
    import os, shutil, sys, time
    time.sleep(1.0)
    # The results folder holds the mark file: <out>/runs/<id>/marks.txt
    shutil.rmtree(os.path.dirname(os.path.dirname(os.path.dirname(os.environ["MEMPROBE_MARK_FILE"]))))
    time.sleep(1.5)
    print("job: done", flush=True)
    sys.exit(5)
""")


def test_a_job_that_deletes_its_results_folder_runs_on_and_nothing_is_claimed_saved(tmp_path: Path) -> None:
    """Before: the job got SIGTERM, memprobe exited 1 with "What was saved before is intact"."""
    script = tmp_path / "deletes.py"
    script.write_text(DELETES_ITS_RESULTS)
    out = tmp_path / "out"
    done = memprobe("record", "--no-report", "-o", out, "--", sys.executable, script)
    no_traceback(done)
    assert done.code == 5 and "job: done" in done.out, done.err
    assert f"the results folder {out} was deleted or moved: sampling stopped at" in done.err, done.err
    assert "nothing could be saved" in done.err and "intact" not in done.err
    assert not out.exists() and done.left == []


# -- flags that are not numbers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["record", "--interval", "nan", "--", "true"], "--interval: got nan"),
        (["record", "--interval", "inf", "--", "true"], "--interval: got inf"),
        (["record", "--pss-budget", "nan", "--", "true"], "--pss-budget: got nan"),
        (["record", "--threshold", "nan", "--", "true"], "--threshold: got nan"),
        (["record", "--threshold", "-5", "--", "true"], "--threshold: got -5"),
        (["record", "--threshold", "inf", "--", "true"], "--threshold: got inf"),
        (["watch", "{pid}", "--duration", "nan"], "--duration: got nan"),
        (["watch", "{pid}", "--duration", "inf"], "--duration: got inf"),
        (["watch", "{pid}", "--interval", "nan"], "--interval: got nan"),
    ],
)
def test_a_flag_that_is_not_a_finite_number_is_refused(tmp_path: Path, args: list[str], words: str) -> None:
    """Before: --interval nan spun a core (60,000 rows in 4 s), --duration nan never ended."""
    job = subprocess.Popen(["sleep", "60"])
    try:
        out = tmp_path / "out"
        done = memprobe(*(a.format(pid=job.pid) for a in args), "-o", out, timeout=30)
        assert done.code == 2
        line = done.one_line_error()
        assert words in line and "allowed:" in line, line
        assert not out.exists() and done.left == []
        assert job.poll() is None
    finally:
        job.kill()
        job.wait()


# -- foreign strings on the terminal -----------------------------------------------------------

HOSTILE_ARGV0 = "\x1b]0;HACKED\x07\x1b[2J\nmemprobe: forged line"


def test_watch_shows_a_foreign_command_line_with_its_control_characters_escaped(tmp_path: Path) -> None:
    """Before: "watching pid ..." retitled the terminal, cleared it and forged a line."""
    job = subprocess.Popen(["bash", "-c", 'exec -a "$1" sleep 60', "bash", HOSTILE_ARGV0])
    try:
        deadline = time.monotonic() + 10
        while HOSTILE_ARGV0.encode() not in Path(f"/proc/{job.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        out = tmp_path / "out"
        done = memprobe("watch", job.pid, "--duration", "1", "--no-report", "-o", out)
        no_traceback(done)
        assert done.code == 0, done.err
        both = done.out + done.err
        assert "\x1b" not in both and "\x07" not in both, repr(both)
        assert "\\x1b]0;HACKED\\x07\\x1b[2J\\nmemprobe: forged line" in done.err, done.err
        assert not any(line.startswith("memprobe: forged line") for line in both.splitlines())
        # The results keep the command line as it was: data, escaped where shown.
        assert run_meta(out)["command"][0] == HOSTILE_ARGV0
        assert job.poll() is None
    finally:
        job.kill()
        job.wait()


# -- watch stopped by a signal -------------------------------------------------------------------


def _wait_for_line(path: Path, words: str, proc: subprocess.Popen, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while words not in path.read_text():
        assert proc.poll() is None or words in path.read_text(), path.read_text()  # said, then ended
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.05)


def _wait_for_a_sample(out: Path, proc: subprocess.Popen, within: float = 60) -> None:
    """Until a samples.jsonl of the results folder ``out`` holds a row (one tick written)."""
    deadline = time.monotonic() + within
    while not any(f.stat().st_size for f in out.glob("runs/*/samples.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, f"no sample in {out} within {within} s"
        time.sleep(0.05)


@pytest.mark.parametrize("name, code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_watch_stopped_by_a_signal_keeps_what_was_sampled(tmp_path: Path, name: str, code: int) -> None:
    """Before: `timeout 3 memprobe watch PID` ended with 124 / 143 / 129, no message, no summary, no
    report, the manifest left `running`."""
    job = subprocess.Popen(["sleep", "120"])
    out = tmp_path / "out"
    err = tmp_path / "err.txt"
    try:
        with open(err, "w") as stderr:
            proc = start("watch", job.pid, "-o", out, stderr=stderr)
        _wait_for_line(err, "memprobe: watching pid", proc)
        _wait_for_a_sample(out, proc)  # what was sampled: something (before: a 1 s sleep)
        os.kill(proc.pid, getattr(signal, name))
        done = finish(proc)
        done.err = err.read_text()
        no_traceback(done)
        assert done.code == code, done.err
        assert f"memprobe: {name}: stopping; saving what was sampled" in done.err
        assert "interrupted: what was sampled has been saved" in done.out
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "interrupted" and manifest["signals"] == [name]
        assert run_meta(out)["ended"] == name
        summary = json.loads((out / "summary.json").read_text())
        assert summary["runs"][0]["status"] == "interrupted"
        for name_ in ("samples.parquet", "report.html"):
            assert (out / name_).exists(), name_
        assert job.poll() is None, "watch never signals the watched process"
        assert done.left == []
    finally:
        job.kill()
        job.wait()


# -- processes that left the command's process group --------------------------------------------

LEAVES = {
    "start_new_session": (
        sys.executable,
        "-c",
        (
            "import subprocess, sys, time\n"
            "p = subprocess.Popen(['sleep', '301'], start_new_session=True)\n"
            "open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(1.0)"
        ),
    ),
    "setsid": ("sh", "-c", 'setsid sleep 302 & echo $! > "$0"; sleep 1'),
    "job control": ("bash", "-c", 'set -m; sleep 303 & echo $! > "$0"; sleep 1'),
}


@pytest.mark.parametrize("how", list(LEAVES))
def test_record_names_the_processes_that_left_its_group_and_leaves_them_running(
    tmp_path: Path, how: str
) -> None:
    """A process the command moved out of its process group (a session of its own, or a shell's
    job control) is what a daemon does: memprobe does not end it, as a shell would not, and
    names it (pid, command line), in the terminal, the table and meta.json. Before: it ran on
    unmentioned, and the table showed it alive from 0.0 to 3.2 s."""
    where = tmp_path / "pid.txt"
    program, flag, code = LEAVES[how]
    out = tmp_path / "out"
    pid = None
    try:
        # Files, not pipes: the process that runs on holds the command's stdout and stderr. In
        # a process group of its own, as from a shell: a session of memprobe's own would hold
        # the job-control case's process, which outlives memprobe, in memprobe's session.
        with open(tmp_path / "stdout", "w+") as stdout, open(tmp_path / "stderr", "w+") as stderr:
            done = finish(
                start(
                    "record",
                    "--no-report",
                    "-o",
                    out,
                    "--",
                    program,
                    flag,
                    code,
                    where,
                    stdout=stdout,
                    stderr=stderr,
                    session=False,
                )
            )
            done.err = Path(stderr.name).read_text()
        pid = int(where.read_text())
        no_traceback(done)
        assert done.code == 0, done.err
        still = alive(pid)
        assert still, f"memprobe ended {pid}, which the command had moved out of its group: {done.err}"
        sleep = f"sleep 30{list(LEAVES).index(how) + 1}"
        assert f"pid {pid}: {sleep}" in done.err and f"kill {pid}" in done.err, done.err
        assert any(line.startswith(str(pid)) and "runs on" in line for line in done.err.splitlines()), (
            done.err
        )
        assert [(p["pid"], p["command"]) for p in run_meta(out)["outlived"]] == [(pid, sleep)]
        assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    finally:
        if pid is not None:
            kill(pid)


# -- smaller ------------------------------------------------------------------------------------


def test_a_command_whose_interpreter_is_missing_leaves_no_running_folder(tmp_path: Path) -> None:
    """Before: "cannot run", exit 1, and a results folder whose status stayed `running`."""
    script = tmp_path / "train.sh"
    script.write_text("#!/no/such/python3\nprint('never')\n")
    script.chmod(0o755)
    out, empty = tmp_path / "out", tmp_path / "empty"
    empty.mkdir()
    for folder in (out, empty):
        done = memprobe("record", "-o", folder, "--", script)
        assert done.code == 127
        line = done.one_line_error()
        assert (
            f"{script}: cannot run: its interpreter '/no/such/python3' (the #! line) does not exist" in line
        )
        assert done.left == []
    assert not out.exists()
    assert empty.is_dir() and list(empty.iterdir()) == []  # given with -o: left as it was


MARKS_AND_GARBAGE = textwrap.dedent("""
    import os, time
    import memprobe
    memprobe.mark(10)
    with open(os.environ["MEMPROBE_MARK_FILE"], "a") as f:
        f.write("not a mark\\n12.5 lots 1\\nnan 3 1\\n1.0 -4 1\\n")
    time.sleep(0.3)
    memprobe.mark(20)
    time.sleep(0.3)
""")


def test_lines_of_the_mark_file_that_are_not_marks_are_named(tmp_path: Path) -> None:
    """Before: ignored without a word (and NaN became a time no table could join on)."""
    script = tmp_path / "marks.py"
    script.write_text(MARKS_AND_GARBAGE)
    out = tmp_path / "out"
    done = memprobe("record", "--no-report", "-o", out, "--", sys.executable, script, cwd=REPO)
    no_traceback(done)
    assert done.code == 0, done.err
    assert "4 line(s) ignored that are not marks" in done.err and "the first: 'not a mark'" in done.err, (
        done.err
    )
    meta = run_meta(out)
    assert meta["items"] == 30 and meta["batches"] == 2


def test_watch_refuses_a_thread_id_and_names_its_process(tmp_path: Path) -> None:
    """/proc/TID exists for a thread too. Before: watch took the thread for a process."""
    job = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import threading, time\n"
                "t = threading.Thread(target=lambda: (print(threading.get_native_id(), flush=True), "
                "time.sleep(60)))\nt.start(); t.join()"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None
        tid = int(job.stdout.readline())
        assert tid != job.pid
        out = tmp_path / "out"
        done = memprobe("watch", tid, "--duration", "1", "-o", out)
        assert done.code == 2
        line = done.one_line_error()
        assert f"{tid} is a thread of process {job.pid}" in line and f"memprobe watch {job.pid}" in line, line
        assert not out.exists() and done.left == []
    finally:
        job.kill()
        job.wait()


def a_kernel_thread() -> int | None:
    """The pid of a kernel thread this pid namespace shows (kthreadd is 2 on the host), or None."""
    for entry in sorted((e for e in os.listdir("/proc") if e.isdigit()), key=int):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = Path(f"/proc/{entry}/stat").read_text()
            if int(text[text.rindex(")") + 2 :].split()[6]) & 0x00200000:  # PF_KTHREAD
                return int(entry)
    return None


@pytest.mark.parametrize("command", ["watch", "top"])
def test_a_kernel_thread_is_refused_as_one_whoever_memprobe_runs_as(tmp_path: Path, command: str) -> None:
    """`memprobe top 2` (kthreadd) run as root said "or run memprobe as root"."""
    pid = a_kernel_thread()
    if pid is None:
        pytest.skip("no kernel thread in this pid namespace (a container shows none)")
    out = tmp_path / "out"
    done = memprobe(command, pid, "--duration", "1", "-o", out)
    assert done.code == 2
    line = done.one_line_error()
    assert f"pid {pid} (" in line and "is a kernel thread: it has no memory of its own to watch" in line, line
    assert "root" not in line and not out.exists() and done.left == []


def with_closed(redirect: str, *args: object, **kwargs) -> subprocess.CompletedProcess:
    """`python -m memprobe ARGS` started with ``redirect`` (``>&-``: stdout closed, ``2>&-``:
    stderr), in a session of its own."""
    command = [sys.executable, "-m", "memprobe", *map(str, args)]
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", *command],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
        **kwargs,
    )


@pytest.mark.parametrize("command", ["top", "watch"])
def test_a_closed_stdout_is_no_reason_to_fail(tmp_path: Path, command: str) -> None:
    """`memprobe top PID >&-`: a traceback at once (Python's sys.stdout is None), nothing
    recorded; `watch PID >&-`: saved, then a traceback and exit 1."""
    job = subprocess.Popen(["sleep", "60"])
    out = tmp_path / "out"
    try:
        done = with_closed(">&-", command, job.pid, "--duration", "1", "--no-report", "-o", out)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
        assert job.poll() is None
    finally:
        job.kill()
        job.wait()


def test_record_with_stderr_closed_leaves_the_jobs_streams_as_they_were(tmp_path: Path) -> None:
    """`memprobe record -- CMD 2>&-`: memprobe's lines went into the job's stdout (print to a
    None stderr prints to stdout), and `--live` exited 1 without a word or a folder. memprobe's
    lines go nowhere now; the job's stdout holds its own lines only, and the job finds its
    stderr closed, as it would without memprobe (its write there fails the same way)."""
    status = tmp_path / "status"
    job = ["sh", "-c", f"echo job out; echo job err >&2; echo $? > {status}; echo status >&2"]
    alone = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *job], capture_output=True, text=True)
    failed = status.read_text()
    assert alone.stdout == "job out\n" and failed != "0\n"  # its stderr closed: the write failed
    for live in ([], ["--live"]):
        status.unlink()
        out = tmp_path / f"out{len(live)}"
        done = with_closed("2>&-", "record", *live, "--no-report", "-o", out, "--", *job)
        assert done.stdout == alone.stdout  # the job's own line only
        assert done.returncode == alone.returncode and status.read_text() == failed
        assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


DAEMONIZES = textwrap.dedent("""
    import os, sys, time
    if os.fork() == 0:          # the child forks the daemon and exits at once (a double fork)
        if os.fork() == 0:
            blob = bytearray(48 << 20)
            for i in range(0, len(blob), 4096):
                blob[i] = 1
            open(sys.argv[1], "w").write(str(os.getpid()))
            time.sleep(60)
        os._exit(0)
    os.wait()
    time.sleep(60)
""")


def test_watch_follows_a_child_that_daemonized_within_the_process_group(tmp_path: Path) -> None:
    """A double fork without setsid re-parents the daemon to init before watch sees it in the
    tree; it stays in the watched process's group. Before: never seen, nothing said."""
    script = tmp_path / "daemon.py"
    script.write_text(DAEMONIZES)
    where = tmp_path / "daemon.pid"
    job = subprocess.Popen([sys.executable, str(script), str(where)], process_group=0)
    daemon = None
    try:
        deadline = time.monotonic() + 30
        while not where.exists() or not where.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        daemon = int(where.read_text())
        out = tmp_path / "out"
        done = memprobe("watch", job.pid, "--duration", "2", "--no-report", "-o", out)
        no_traceback(done)
        assert done.code == 0, done.err
        import pandas as pd

        samples = pd.read_parquet(out / "samples.parquet")
        mine = samples[(samples["pid"] == daemon) & ~samples["missing"].astype(bool)]
        assert len(mine) >= 2 and mine["rss_mb"].max() >= 40, samples["pid"].unique()
        assert f"found outside the process tree of pid {job.pid}" in done.out, done.out
        assert f"pid {daemon} (" in done.out
        assert alive(daemon) and job.poll() is None
    finally:
        if daemon is not None:
            kill(daemon)
        job.kill()
        job.wait()
