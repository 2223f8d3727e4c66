"""``memprobe top PID`` on a real DataLoader job, read as a person reads it: in a terminal (tmux:
a 200x50 pane, keys sent with send-keys, the screen read with capture-pane), and with its stdout
a pipe (one line every few seconds).

The job iterates a DataLoader with 2 forked workers until a stop file appears, so each test says
when it ends. tmux is needed for the terminal tests: `make install-test` installs it where
apt-get can (`apt-get install tmux`); elsewhere those tests are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

JOB = textwrap.dedent("""
    import os, sys, time
    from torch.utils.data import DataLoader, Dataset

    class Strings(Dataset):
        def __init__(self):
            self.data = [str(i) * 4 for i in range(200_000)]
        def __len__(self):
            return 10**9
        def __getitem__(self, i):
            return len(self.data[i % len(self.data)])

    if __name__ == "__main__":
        loader = DataLoader(Strings(), batch_size=64, num_workers=2, multiprocessing_context="fork")
        for batch in loader:
            if os.path.exists(sys.argv[1]):
                break
            time.sleep(0.1)
        print("job done", flush=True)
""")
# A training step of 0.1 s: the job runs until the test ends it, and at 0.01 s a step its loop
# (and its workers making the batches) took 0.15 CPU-s every second it ran; at 0.1 s, too little
# to tell from the noise (topjob measured over 4 s and 16 s, nice -n 19). What the tests read is
# the tree and its figures, never its pace.
WAIT_S = 90.0  # a bound for a loaded machine, not a measure: each wait ends once the screen shows it


def start_job(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    stop = tmp_path / "stop"
    job = subprocess.Popen(
        [sys.executable, str(script), str(stop)], stdout=subprocess.DEVNULL, process_group=0
    )
    try:
        wait_for(lambda: len(workers_of(job.pid)) >= 2, f"the job (pid {job.pid}) started no 2 workers")
    except BaseException:
        end_job(job)  # not left running for the next test
        raise
    return job, stop


def workers_of(pid: int) -> list[int]:
    from memprobe.probe import procfs

    kids = [(k, procfs.read_stat(k)) for k in procfs.read_children(pid)]
    return [k for k, st in kids if st is not None and st.comm == "pt_data_worker"]


def wait_for(done: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.2)
    raise AssertionError(what)


def end_job(job: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()


class Terminal:
    """A tmux server of the test's own (its socket in tmp_path) with one pane (200x50 unless ``size``)."""

    def __init__(
        self,
        tmp_path: Path,
        command: list[str],
        env: dict[str, str] | None = None,
        size: tuple[int, int] = (200, 50),
    ) -> None:
        tmux = shutil.which("tmux")
        if tmux is None:
            pytest.skip(
                "tmux not found: `apt-get install tmux` (make install-test installs it where apt-get can)"
            )
        self.base = [tmux, "-S", str(tmp_path / "tmux.sock")]
        # The pane stays after memprobe exits (its exit code shown), until the server is ended;
        # the shell waits through a Ctrl-C as an interactive one does (else it would die of it).
        shell = (
            "trap : INT; " + " ".join(shlex.quote(c) for c in command) + '; echo "EXIT=$?"; exec sleep 600'
        )
        setenv = [f"{k}={v}" for k, v in (env or {}).items()]
        subprocess.run(
            [
                *self.base,
                "new-session",
                "-d",
                "-x",
                str(size[0]),
                "-y",
                str(size[1]),
                "env",
                *setenv,
                "sh",
                "-c",
                shell,
            ],
            check=True,
        )

    def screen(self, escapes: bool = False) -> str:
        got = subprocess.run(
            [*self.base, "capture-pane", "-p", *(["-e"] if escapes else [])], capture_output=True, text=True
        )
        return got.stdout

    def wait_for(self, pattern: str) -> str:
        try:
            wait_for(lambda: re.search(pattern, self.screen(), re.M), f"not on the screen: {pattern!r}")
        except AssertionError as exc:  # what the screen showed instead, for whoever reads the failure
            raise AssertionError(f"{exc}; the screen:\n{self.screen()}") from None
        return self.screen()

    def history(self) -> str:
        """Every line the pane has shown: its history (what scrolled off the top) and its screen."""
        got = subprocess.run([*self.base, "capture-pane", "-p", "-S", "-"], capture_output=True, text=True)
        return got.stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", *keys], check=True)

    def resize(self, columns: int, lines: int) -> None:
        subprocess.run([*self.base, "resize-window", "-x", str(columns), "-y", str(lines)], check=True)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


def top(pid: int, out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "memprobe", "top", str(pid), "--no-report", "-o", str(out), *more]


@contextlib.contextmanager
def watched_in_a_terminal(
    tmp_path: Path,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen, Path, Path, Terminal]]:
    """A job (start_job), and a Terminal running ``command`` (by default `memprobe top` on the
    job, its results in tmp_path/out): (job, its stop file, out, terminal); both ended after."""
    job, stop = start_job(tmp_path)
    out = tmp_path / "out"
    try:
        term = Terminal(tmp_path, command or top(job.pid, out), env=env)
        try:
            yield job, stop, out, term
        finally:
            term.close()
    finally:
        end_job(job)


def the_view(term: Terminal, job: subprocess.Popen) -> str:
    """The screen once it shows the job's main process and both workers with their figures."""
    row = r"^\s*{pid}\s+{role}\s+\S+\s+-\s+{worker}\s+{gen}\s+[\d,.]+\s+(exact|est\.)\s+[\d,.]+\s+[\d,.]+"
    w0, w1 = sorted(workers_of(job.pid))
    for pid, role, worker, gen in (
        (job.pid, "main", "-", "-"),
        (w0, "worker 0", 0, 0),
        (w1, "worker 1", 1, 0),
    ):
        term.wait_for(row.format(pid=pid, role=role, worker=worker, gen=gen))
    return term.wait_for(r"^total PSS [\d,]+ MB  sum of RSS [\d,]+ MB")


def the_end(term: Terminal, out: Path, code: int, status: str) -> str:
    """The screen once memprobe has exited with ``code``, the results folder named and saved."""
    screen = term.wait_for(r"^EXIT=\d+")
    assert f"EXIT={code}" in screen, screen
    assert f"results: {out}" in screen
    assert json.loads((out / "summary.json").read_text())["runs"][0]["status"] == status
    return screen


@pytest.mark.parametrize(("key", "code"), [("q", 0), ("C-c", 130)])
def test_top_shows_each_process_and_the_totals_and_q_saves_what_was_sampled(
    tmp_path: Path, key: str, code: int
) -> None:
    with watched_in_a_terminal(tmp_path) as (job, _, out, term):
        screen = the_view(term, job)
        assert f"memprobe top  pid {job.pid} (" in screen and "q: quit and save" in screen
        assert re.search(
            r"^\s*pid\s+role\s+kind\s+rank\s+worker\s+gen\s+USS MB\s+USS is\s+PSS MB", screen, re.M
        )
        assert re.search(r"^(flat|GROWING) so far: workers' USS", screen, re.M), screen
        assert re.search(r"^(time to the limit|memory limit): ", screen, re.M), screen
        assert "limit " in screen  # the job's cgroup limit, else this machine's memory
        assert "\x1b[32m" in term.screen(escapes=True) or "\x1b[31m" in term.screen(escapes=True)
        term.keys(key)  # q, or Ctrl-C: the same end, q's exit code 0
        screen = the_end(term, out, code, "interrupted")
        assert "what was sampled has been saved" in screen
        assert job.poll() is None, "memprobe top must never signal the job it watches"


def test_top_ends_with_the_final_summary_when_the_job_exits(tmp_path: Path) -> None:
    with watched_in_a_terminal(tmp_path, env={"NO_COLOR": "1"}) as (job, stop, out, term):
        the_view(term, job)
        assert not re.search(r"\x1b\[[0-9;]*m", term.screen(escapes=True)), (
            "NO_COLOR: no colour, no attribute"
        )
        stop.touch()
        assert job.wait(timeout=WAIT_S) == 0
        screen = the_end(term, out, 0, "ok")
        assert re.search(rf"^{job.pid}\s+main\s+main", screen, re.M)  # the per-process table
        assert re.search(r"^\d+\s+worker 1\s+dataloader", screen, re.M)
        assert "q: quit and save" not in screen  # the live view has ended


def test_top_without_a_terminal_prints_one_line_every_few_seconds(tmp_path: Path) -> None:
    job, stop = start_job(tmp_path)
    out = tmp_path / "out"
    lines: list[str] = []
    proc = subprocess.Popen(
        top(job.pid, out, "--every", "1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        while len(lines) < 3:
            got = proc.stdout.readline()
            assert got, f"memprobe top ended: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(got)
        stop.touch()
        rest, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
        for got in lines:
            assert re.match(r"memprobe top: \d+ s: \d+ process\(es\): total PSS .*sum of RSS", got), got
        assert "\x1b" not in "".join(lines) + rest
        assert f"results: {out}" in rest
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        end_job(job)


def test_ctrl_z_gives_the_terminal_back_and_fg_brings_the_view_again(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found: job control needs an interactive shell")
    shell = [bash, "--norc", "--noprofile", "-i"]
    with watched_in_a_terminal(tmp_path, shell, env={"PS1": "prompt$ "}) as (job, _, out, term):
        term.wait_for(r"^prompt\$")
        term.keys(" ".join(shlex.quote(c) for c in top(job.pid, out)), "Enter")
        the_view(term, job)
        term.keys("C-z")  # the shell's own screen again, memprobe stopped as any program is
        screen = term.wait_for(r"Stopped\s+.*memprobe")
        assert "q: quit and save" not in screen
        # the terminal as it was: neither cbreak (-icanon) nor without echo (-echo)
        term.keys("echo \"cbreak=$(stty -a | grep -cE -- '(^| )-(icanon|echo)( |$)')\"", "Enter")
        term.wait_for(r"^cbreak=0$")
        term.keys("fg", "Enter")
        term.wait_for(r"q: quit and save")
        term.keys("q")
        screen = term.wait_for(rf"^results: {re.escape(str(out))}")
        assert json.loads((out / "summary.json").read_text())["runs"][0]["status"] == "interrupted"


def started_on(go: Path, command: list[str]) -> list[str]:
    """``command`` once the file ``go`` exists: the test pauses the terminal before it starts."""
    return [
        "sh",
        "-c",
        f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.1; done; exec {shlex.join(command)}",
    ]


def saved(out: Path) -> bool:
    """Whether memprobe has finished the results folder (manifest complete, summary written)."""
    try:
        done = json.loads((out / "manifest.json").read_text())["status"] == "complete"
    except (OSError, ValueError, KeyError):
        return False
    return done and (out / "summary.json").is_file()


@pytest.mark.parametrize("command", ["top", "watch"])
def test_a_paused_terminal_holds_neither_the_duration_nor_the_save(tmp_path: Path, command: str) -> None:
    """The terminal paused with Ctrl-S (XOFF) from memprobe's start: `top --duration 10` was
    still running 30 s later, blocked writing to the terminal, nothing saved (`watch` the same:
    its first line blocked). The duration ends the sampling and the results folder is finished
    while the terminal stays paused; the summary follows once it takes output again (Ctrl-Q)."""
    job, _ = start_job(tmp_path)
    out, go = tmp_path / "out", tmp_path / "go"
    memprobe = [sys.executable, "-m", "memprobe", command, str(job.pid), "--duration", "2"]
    try:
        term = Terminal(tmp_path, started_on(go, [*memprobe, "--no-report", "-o", str(out)]))
        try:
            term.keys("C-s")  # XOFF: the terminal takes no output from here on
            go.touch()
            wait_for(lambda: saved(out), "the results were not saved while the terminal was paused")
            meta = json.loads(next((out / "runs").glob("*/meta.json")).read_text())
            assert meta["ended"] == "duration"
            assert "EXIT=" not in term.screen()  # memprobe waits to say its summary
            term.keys("C-q")  # XON
            the_end(term, out, 0, "ok")
            assert job.poll() is None, "memprobe never signals the job it watches"
        finally:
            term.close()
    finally:
        end_job(job)


def test_a_wide_character_command_line_keeps_the_title_of_a_narrow_terminal(tmp_path: Path) -> None:
    """A job whose command line is CJK, in an 80x8 terminal (the view fills it): the title was
    cut at 80 characters (96 columns), wrapped, and the screen scrolled it away. Cut by columns,
    the title is the screen's first line."""
    script = "数据加载器" * 8 + ".py"
    (tmp_path / script).write_text("import time\ntime.sleep(600)\n")
    job = subprocess.Popen(
        [sys.executable, script, "训练" * 40], cwd=tmp_path, stdout=subprocess.DEVNULL, process_group=0
    )
    out = tmp_path / "out"
    try:
        term = Terminal(tmp_path, top(job.pid, out), size=(80, 8))
        try:
            first = term.wait_for(rf"^{job.pid}\s+main\s+main").splitlines()[0]
            assert first.startswith(f"memprobe top  pid {job.pid} (") and "数据加载器" in first, first
            term.keys("q")
            assert "EXIT=0" in term.wait_for(r"^EXIT=\d+")  # (the 80 columns wrap the folder's name)
            assert json.loads((out / "summary.json").read_text())["runs"][0]["status"] == "interrupted"
        finally:
            term.close()
    finally:
        end_job(job)
