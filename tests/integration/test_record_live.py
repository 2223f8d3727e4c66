"""``memprobe record --live -- CMD``: the job's own output and the live view on one terminal,
read as a person reads it (tmux: a 160x30 pane, keys sent with send-keys, the screen read with
capture-pane), and with stderr a pipe (one line every few seconds).

The job prints a numbered line every 50 ms, holding more memory each time, until a stop file
appears: each test says when it ends, and no step depends on the machine's speed.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_top import WAIT_S, Terminal, saved, started_on, wait_for

pytestmark = pytest.mark.slow

JOB = textwrap.dedent("""
    import os, sys, time
    held = []
    i = 0
    while not os.path.exists(sys.argv[1]):
        held.append(bytearray(200_000))
        print(f"job line {i}: holding {len(held) * 200} KB, all of this line intact", flush=True)
        i += 1
        time.sleep(0.05)
    print("job done", flush=True)
""")
LINE = re.compile(r"^job line (\d+): holding (\d+) KB, all of this line intact$")


def record_live(tmp_path: Path, out: Path, *more: str) -> tuple[list[str], Path]:
    script, stop = tmp_path / "job.py", tmp_path / "stop"
    script.write_text(JOB)
    cmd = [sys.executable, "-m", "memprobe", "record", "--live", "--no-report", "-o", str(out), *more]
    return [*cmd, "--", sys.executable, str(script), str(stop)], stop


def job_lines_intact(screen: str) -> list[int]:
    """The job's line numbers on the screen, each line whole and as the job wrote it; the lines
    in order, none missing between the first and the last shown."""
    numbers = []
    for text in screen.splitlines():
        if text.startswith("job line"):
            m = LINE.match(text)
            assert m, f"a job line garbled: {text!r}\n{screen}"
            assert int(m[2]) == (int(m[1]) + 1) * 200, text
            numbers.append(int(m[1]))
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), screen
    return numbers


def the_view(term: Terminal) -> str:
    """The screen once the view shows the job's main process with its figures, below job lines
    that have scrolled on since (the view is drawn under them, repainted in place)."""
    term.wait_for(r"^memprobe record  pid \d+ \(.*\)  \d+:\d\d  Ctrl-C: stop the job, save")
    term.wait_for(r"^total PSS [\d,]+ MB  sum of RSS [\d,]+ MB")
    term.wait_for(r"^\s*\d+\s+main\s+main\s+-\s+-\s+-\s+[\d,.]+\s+(exact|est\.)\s+[\d,.]+")
    first = job_lines_intact(term.screen())
    term.wait_for(rf"^job line {first[-1] + 30}:")  # 30 more lines scrolled past the view
    screen = term.screen()
    lines = screen.splitlines()
    head = next(i for i, text in enumerate(lines) if text.startswith("memprobe record  pid"))
    assert head == 30 - 10, screen  # the view: the pane's last 10 lines (a third of 30)
    # The job's output scrolls right above it (the cursor on the line after the job's last).
    assert LINE.match(lines[head - 2]) and (lines[head - 1] == "" or LINE.match(lines[head - 1])), screen
    job_lines_intact(screen)
    return screen


def test_record_live_shows_the_view_under_the_jobs_intact_output_and_ctrl_c_saves(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command, _ = record_live(tmp_path, out)
    term = Terminal(tmp_path, command, size=(160, 30))
    try:
        the_view(term)
        term.keys("C-c")  # reaches the job, as without --live; memprobe saves what was sampled
        screen = term.wait_for(r"^EXIT=\d+")
        assert "EXIT=130" in screen and f"results: {out}" in screen, screen
        assert "Ctrl-C: stop the job, save" not in screen  # the view has ended
        assert json.loads((out / "summary.json").read_text())["runs"][0]["status"] == "interrupted"
    finally:
        term.close()


def test_record_live_ends_the_view_and_prints_the_summary_when_the_job_exits(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command, stop = record_live(tmp_path, out)
    term = Terminal(tmp_path, command, size=(160, 30), env={"NO_COLOR": "1"})
    try:
        the_view(term)
        assert not re.search(r"\x1b\[[0-9;]*m", term.screen(escapes=True)), (
            "NO_COLOR: no colour, no attribute"
        )
        stop.touch()
        screen = term.wait_for(r"^EXIT=\d+")
        assert "EXIT=0" in screen and "Ctrl-C: stop the job, save" not in screen, screen
        # The summary follows the job's last line: nothing of the view left between them (the
        # history: the job keeps 200 KB a step, and what to do about it scrolls the screen on).
        screen = term.history()
        lines = screen.splitlines()
        done = lines.index("job done")
        assert lines[done + 1] == "" and lines[done + 2].startswith("run "), screen
        assert re.search(r"^\d+\s+main\s+main", screen, re.M)  # the per-process table
        assert json.loads((out / "summary.json").read_text())["runs"][0]["status"] == "ok"
    finally:
        term.close()


def test_record_live_without_a_terminal_says_one_line_every_few_seconds_on_stderr(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command, stop = record_live(tmp_path, out, "--every", "0.5")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        said: list[str] = []
        while len(said) < 2:
            got = proc.stderr.readline()
            assert got, "memprobe record ended"
            if got.startswith("memprobe record: "):
                said.append(got)
        stop.touch()
        stdout, rest = proc.communicate(timeout=WAIT_S)
    finally:
        stop.touch()
        proc.kill() if proc.poll() is None else None
        proc.wait()
    assert proc.returncode == 0, rest
    for got in said:
        assert re.match(r"memprobe record: \d+ s: \d+ process\(es\): total PSS .*sum of RSS", got), got
    # The job's stdout is its own: every line as it wrote it, nothing of memprobe's.
    lines = stdout.splitlines()
    assert lines[-1] == "job done" and job_lines_intact("\n".join(lines[:-1]))[0] == 0
    assert "\x1b" not in "".join(said) + rest and f"results: {out}" in rest


def test_ctrl_z_gives_the_whole_screen_back_and_fg_draws_the_view_again(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found: job control needs an interactive shell")
    out = tmp_path / "out"
    command, _ = record_live(tmp_path, out)
    term = Terminal(tmp_path, [bash, "--norc", "--noprofile", "-i"], env={"PS1": "prompt$ "}, size=(160, 30))
    try:
        term.wait_for(r"^prompt\$")
        term.keys(" ".join(shlex.quote(c) for c in command), "Enter")
        the_view(term)
        term.keys("C-z")  # the job and memprobe stopped; the view cleared, the screen scrolls whole
        screen = term.wait_for(r"Stopped\s+.*memprobe")
        assert "Ctrl-C: stop the job, save" not in screen
        for k in range(40):  # the shell's output scrolls through the whole screen, the foot included
            term.keys(f"echo shell line {k}", "Enter")
        screen = term.wait_for(r"^shell line 39$")
        assert screen.rstrip("\n").splitlines()[-1].startswith("prompt$"), (
            screen
        )  # the last line is the shell's
        term.keys("fg", "Enter")
        term.wait_for(r"Ctrl-C: stop the job, save")
        term.keys("C-c")
        term.wait_for(rf"^results: {re.escape(str(out))}")
        assert json.loads((out / "summary.json").read_text())["runs"][0]["status"] == "interrupted"
    finally:
        term.close()


SILENT = textwrap.dedent("""
    import os, sys, time
    held = []
    while not os.path.exists(sys.argv[1]):
        held.append(bytearray(100_000))
        time.sleep(0.05)
""")


@pytest.mark.parametrize("live", [False, True], ids=["record", "record --live"])
def test_a_paused_terminal_holds_neither_the_recording_nor_the_jobs_end(tmp_path: Path, live: bool) -> None:
    """The terminal paused with Ctrl-S from memprobe's start, a job that prints nothing: memprobe
    blocked on its first line ("memprobe: recording ...") or the view's first repaint, and
    neither sampled on nor saw the job end. It records, sees the job end and finishes the
    results folder while the terminal stays paused; its summary follows once it is resumed."""
    script, stop, go, out = tmp_path / "job.py", tmp_path / "stop", tmp_path / "go", tmp_path / "out"
    script.write_text(SILENT)
    memprobe = [sys.executable, "-m", "memprobe", "record", *(["--live"] if live else [])]
    command = [*memprobe, "--no-report", "-o", str(out), "--", sys.executable, str(script), str(stop)]
    term = Terminal(tmp_path, started_on(go, command), size=(160, 30))
    try:
        term.keys("C-s")  # XOFF: the terminal takes no output from here on
        go.touch()
        wait_for(lambda: any((out / "runs").glob("*/meta.json")), "no checkpoint saved while paused")
        stop.touch()  # the job ends
        wait_for(lambda: saved(out), "the results were not saved while the terminal was paused")
        assert "EXIT=" not in term.screen()  # memprobe waits to say its summary
        term.keys("C-q")  # XON
        screen = term.wait_for(r"^EXIT=\d+")
        assert "EXIT=0" in screen and f"results: {out}" in screen, screen
        assert json.loads((out / "summary.json").read_text())["runs"][0]["status"] == "ok"
    finally:
        term.close()


def test_a_paused_terminal_holds_the_jobs_output_as_it_would_and_memprobe_samples_on(tmp_path: Path) -> None:
    """`record --live`, the job printing, the terminal paused: the job waits on its own output
    as it would without memprobe, memprobe samples on (its checkpoints keep coming; before,
    its repaint held it); resumed, the view is drawn again and every line the job wrote is on
    the terminal, whole and in order."""
    out = tmp_path / "out"
    command, stop = record_live(tmp_path, out)
    term = Terminal(tmp_path, command, size=(160, 30))
    try:
        before = job_lines_intact(the_view(term))[0]
        term.keys("C-s")
        meta = next((out / "runs").glob("*/meta.json"))
        saves: set[int] = set()

        def saving_on() -> bool:  # the meta is saved every 2 s by the recording's main loop
            with contextlib.suppress(OSError):
                saves.add(meta.stat().st_mtime_ns)
            return len(saves) > 3

        wait_for(saving_on, "memprobe's checkpoints stopped while the terminal was paused")
        term.keys("C-q")
        the_view(term)  # drawn again, under the job's lines scrolling on
        stop.touch()
        screen = term.wait_for(r"^EXIT=\d+")
        assert "EXIT=0" in screen, screen
        # From the screen before the pause to the job's last, every line it wrote, whole, in order.
        history = term.history().splitlines()
        lines = [text for text in history if text.startswith("job line")]
        since = [text for text in lines if int(text.split()[2].rstrip(":")) >= before]
        assert job_lines_intact("\n".join(since))[0] == before
        assert history[history.index("job done") - 1] == since[-1]
    finally:
        term.close()


def drawn_below_whole_lines(screen: str) -> bool:
    lines = screen.splitlines()
    heads = [i for i, text in enumerate(lines) if text.startswith("memprobe record  pid")]
    try:
        job_lines_intact(screen)
    except (AssertionError, IndexError):
        return False
    return heads == [30 - 10]


def test_the_view_comes_back_once_a_terminal_too_short_for_it_grows_again(tmp_path: Path) -> None:
    """Shrunk to 6 lines (no room for the view under the job's output) and grown back: the view
    was never drawn again for the rest of the job. It is, under the job's lines."""
    out = tmp_path / "out"
    command, stop = record_live(tmp_path, out)
    term = Terminal(tmp_path, command, size=(160, 30))
    try:
        the_view(term)
        term.resize(160, 6)
        term.wait_for(r"^memprobe: the terminal is too short for the live view \(6 lines; it needs 8\)")
        term.resize(160, 30)
        # Grown, the pane shows again what scrolled off it, the view as it was before the shrink
        # among it: a view drawn again is the only one, in the pane's last third, under whole lines.
        wait_for(lambda: drawn_below_whole_lines(term.screen()), "the view was not drawn again")
        the_view(term)
        stop.touch()
        assert "EXIT=0" in term.wait_for(r"^EXIT=\d+")
    finally:
        term.close()
