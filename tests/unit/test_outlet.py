"""What memprobe writes while it samples, against an output that takes none (memprobe/live/outlet.py):
a pipe filled to the brim stands for a terminal paused with Ctrl-S or a reader that stalled (a
write to either waits until it takes the bytes). The views and the log go on at once; what
waited is written in order once it reads again, the repaints it missed replaced by the latest."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator

import pytest

from memprobe.live import outlet as outlet_module
from memprobe.live.outlet import Outlet
from memprobe.live.view import Lines, Live, Screen

BOUND_S = 60.0  # a bound for a loaded machine: what must not wait at all returns long before


@contextlib.contextmanager
def full_pipe() -> Iterator[tuple[int, object]]:
    """(the read end, a text stream on the write end) of a pipe that holds as much as it can:
    a write to it waits until the read end is read."""
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(w, b"." * 65536)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(w, b".")
    fcntl.fcntl(w, fcntl.F_SETFL, flags)  # blocking again, as a terminal is
    stream = os.fdopen(w, "w")
    try:
        yield r, stream
    finally:
        os.close(r)  # first: a write still waiting on it ends (EPIPE)
        with contextlib.suppress(OSError):
            stream.close()


def returns(action: Callable[[], None]) -> None:
    """``action`` ran to its end in another thread (it would wait forever on the full pipe)."""
    done = threading.Event()

    def run() -> None:
        action()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(BOUND_S), "held by an output that takes nothing"


def read_all(r: int, stream, outlet: Outlet) -> bytes:
    """Everything written to the pipe once it is read again (the filling dots left out): read
    until the outlet has written all it holds and the write end is closed."""
    got = bytearray()

    def read() -> None:
        while chunk := os.read(r, 1 << 20):
            got.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert outlet.wait(BOUND_S)
    stream.close()
    reader.join(BOUND_S)
    return bytes(got).lstrip(b".")


def test_a_screen_on_a_terminal_that_takes_nothing_never_holds_the_view_or_its_end() -> None:
    """``memprobe top`` on a paused terminal: its repaints, its log and its end went through
    blocking writes in the recording's main thread, which stopped with them (the duration, the
    job's end and the save waited for Ctrl-Q). Queued, they return at once; once the terminal
    reads again it gets the screen's setup, the lines, the teardown, in that order, and none of
    the repaints that waited (a newer replaced each; the closed view replaced the last)."""
    from test_live import view_for_screen

    with full_pipe() as (r, stream):
        outlet = Outlet()
        screen = Screen(stream, outlet, color=False)
        said: list[str] = []
        live = Live(screen, log=said.append)

        def a_minute_of_the_view() -> None:
            screen.open()
            for _ in range(60):
                screen.show(view_for_screen(), "pid 100 (python train.py)", "", False)
            outlet.say(stream, "memprobe: a line of memprobe's")
            live.close()

        returns(a_minute_of_the_view)
        assert outlet.alive(stream)
        written = read_all(r, stream, outlet).decode()
    assert written == "\x1b[?1049h\x1b[?25l" + "memprobe: a line of memprobe's\n" + "\x1b[?25h\x1b[?1049l"


def test_a_line_every_few_seconds_into_a_pipe_nobody_reads_keeps_only_the_latest() -> None:
    from test_live import view_for_screen

    now = [0.0]
    with full_pipe() as (r, stream):
        outlet = Outlet()
        shown = Lines(stream, 5.0, outlet=outlet, clock=lambda: now[0])

        def lines() -> None:
            for i in range(100):
                now[0] = 5.0 * i
                shown.show(view_for_screen(), "t", "", False)

        returns(lines)
        written = read_all(r, stream, outlet).decode().splitlines()
    # The first (being written when the pipe was full) and the latest: never 100 stale lines.
    assert 1 <= len(written) <= 2 and all(w.startswith("memprobe top: 21 s: ") for w in written)


def test_memprobe_s_lines_wait_in_order_and_those_beyond_the_bound_are_counted(monkeypatch) -> None:
    monkeypatch.setattr(outlet_module, "MAX_PENDING", 200)
    with full_pipe() as (r, stream):
        outlet = Outlet()
        returns(lambda: [outlet.say(stream, f"memprobe: line {i} \x1b[2J") for i in range(20)])
        written = read_all(r, stream, outlet).decode().splitlines()
    kept = [w for w in written if w.startswith("memprobe: line")]
    assert kept == [f"memprobe: line {i} \\x1b[2J" for i in range(len(kept))]  # in order, escaped
    assert 2 <= len(kept) < 20
    assert written[-1] == (
        f"memprobe: {20 - len(kept)} line(s) of its output not shown: the terminal took no output for a while"
    )


def test_an_output_that_went_away_ends_its_writes_not_the_caller() -> None:
    r, w = os.pipe()
    os.close(r)  # the reader is gone (a closed pipe; a terminal hung up answers EIO the same way)
    with os.fdopen(w, "w") as stream:
        outlet = Outlet()
        returns(lambda: outlet.say(stream, "memprobe: one"))
        assert outlet.wait(BOUND_S)
        assert not outlet.alive(stream)
        returns(lambda: outlet.say(stream, "memprobe: two"))  # dropped at once
        assert outlet.wait(BOUND_S)


@pytest.mark.parametrize("keep", [False, True])
def test_a_repaint_waiting_is_replaced_by_the_next_and_a_teardown_is_never_dropped(keep: bool) -> None:
    with full_pipe() as (r, stream):
        outlet = Outlet()

        def view() -> None:
            outlet.put(stream, "<setup>", frame="view", keep=True)
            for i in range(5):
                outlet.put(stream, f"<repaint {i}>", frame="view")
            outlet.put(stream, "<teardown>" if keep else "<repaint 5>", frame="view", keep=keep)

        returns(view)
        written = read_all(r, stream, outlet).decode()
    assert written == ("<setup><teardown>" if keep else "<setup><repaint 5>")


def test_memprobe_run_s_progress_never_holds_the_run_it_measures() -> None:
    """`memprobe run` with its terminal paused: the supervisor's progress line blocked it, and
    the run with it (a 30 s pause made a run's items/s a third of the next run's). Progress and
    a stop signal's line return at once; the run's end waits for the terminal, then the lines
    come in order, the progress lines that waited replaced by the latest."""
    import signal
    from types import SimpleNamespace

    from memprobe.cli.console import TerminalConsole

    loader = SimpleNamespace(items=None, epochs=1)
    spec = SimpleNamespace(
        run_id="list-fork-w2", loader=loader, decode=None, dataset=SimpleNamespace(records=100)
    )
    with full_pipe() as (r, stream):
        console = TerminalConsole(stream)  # a pipe: a line every 5 s at most, as on a file

        def a_run() -> None:
            console.run_started(spec, 0, 1)
            for i in range(50):
                console._last = -10.0  # (5 s since the last line, each time)
                state = SimpleNamespace(items=i, elapsed_s=float(i), milestones={"dataset_built": 0.0})
                console.run_progress(state)
            console.signal_received(signal.SIGTERM, 1)

        returns(a_run)
        got = bytearray()
        reader = threading.Thread(
            target=lambda: [got.extend(c) for c in iter(lambda: os.read(r, 1 << 20), b"")]
        )
        reader.start()  # the terminal takes output again
        state = SimpleNamespace(items=50, elapsed_s=50.0, status="interrupted", error=None, milestones={})
        returns(lambda: console.run_finished(state))  # returns once all of it is written
        stream.close()
        reader.join(BOUND_S)
        written = bytes(got).lstrip(b".").decode().splitlines()
    assert written[0] == "[1/1] list-fork-w2: starting"
    progress = [w for w in written if "items," in w and "interrupted" not in w]
    assert 1 <= len(progress) <= 2 and progress[-1].startswith("[1/1] list-fork-w2: 49/100 items")
    assert "memprobe: SIGTERM: stopping; saving what was measured" in "\n".join(written)
    assert written[-1] == "[1/1] list-fork-w2: interrupted (50 items, 50.0 s)"
