"""The live view at the foot of a terminal the job shares (``memprobe record --live``).

The job keeps the terminal: its stdout and stderr are the terminal itself, byte for byte, and
its output scrolls as it would without memprobe, in the lines above the view (the terminal's
scroll region, as apt's progress line does); memprobe repaints the bottom lines about once a
second, each time in one write that saves the cursor, draws, and puts the cursor back where the
job left it (the kernel writes one write() to a terminal whole, never interleaved with the job's
own), so the job's next byte lands where it would have. The keyboard stays the job's: Ctrl-C
reaches the job as without ``--live`` (memprobe saves what was sampled when it ends), Ctrl-Z
stops both; no key is read from the job's stdin.

On close (the job ended, or memprobe stops) the view is cleared and the whole screen given back
to scrolling; memprobe's summary then follows the job's last line. A job that draws on the whole
screen (a full-screen program, a progress bar that moves the cursor to absolute rows) may draw
over the view; the next repaint draws it again. A terminal too short to leave the job
MIN_JOB_LINES lines gets its whole screen back (memprobe says so, once), and the view comes back
once it is tall enough again. The size is read at each repaint: memprobe is not in the
terminal's foreground process group (the job is), so no SIGWINCH reaches it, and a resize
undone between two repaints (a second) goes unseen; the terminal has reset the scroll region
meanwhile, and the job's output scrolls over the view until the next resize.

memprobe writes through :mod:`memprobe.live.outlet`, from a thread of its own: a terminal paused
with Ctrl-S holds the job's own writes as it would without memprobe, never memprobe's sampling
or its end; the repaints it did not take are dropped, the view's setup and teardown kept.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from memprobe.live.model import LiveView
    from memprobe.live.outlet import Outlet

SAVE, RESTORE = "\x1b7", "\x1b8"
MIN_JOB_LINES = 5  # below this many lines for the job's output, the view is not drawn


def height(lines: int) -> int:
    """How many of the terminal's ``lines`` the view takes: a third, between 3 and 12 (the
    totals, the limit, the verdict, the table's head and the processes that fit)."""
    return max(3, min(lines // 3, 12))


def fits(lines: int) -> bool:
    """Whether a terminal of ``lines`` has room for the view and MIN_JOB_LINES of the job's."""
    return lines - height(lines) >= MIN_JOB_LINES


LINES_NEEDED = next(n for n in range(1, 100) if fits(n))


class Panel:
    """The view drawn under the job's output (see the module's docstring)."""

    def __init__(self, stream: TextIO, outlet: Outlet, *, color: bool, name: str, hint: str) -> None:
        self.stream = stream
        self.outlet = outlet
        self.color = color
        self.name, self.hint = name, hint
        self._open = False
        self._size: tuple[int, int] | None = None  # (columns, lines) the scroll region was set for
        self._rows = 0  # the view's height then
        self._ttou: object = None
        self._said_short = False  # "too short for the view", said once
        self._resized = False  # a size other than the region's seen since the last repaint

    def open_now(self) -> bool:
        return False  # memprobe's own lines scroll with the job's, above the view

    def open(self) -> None:
        if threading.current_thread() is threading.main_thread():
            # The job is the terminal's foreground group: a terminal set to `stty tostop` would
            # stop memprobe at its first write (SIGTTOU). Ignored, the write is allowed.
            self._ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        self._open = True

    def key_pressed(self, keys: bytes) -> bool:
        return False  # the keyboard is the job's

    def due(self) -> bool:
        """Whether the view is drawn; called at every poll (5 times a second), it notes a resize
        that a repaint a second later would not see (undone meanwhile)."""
        if self._open and self._terminal_size() != self._size:
            self._resized = True
        return self._open

    def _terminal_size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (OSError, ValueError):
            size = shutil.get_terminal_size()
        return size.columns, size.lines

    def show(self, view: LiveView, title: str, note: str, quitting: bool) -> None:
        from memprobe.live.view import render

        if not self._open:
            return
        columns, lines = self._terminal_size()
        rows = height(lines)
        setup = ""
        if (columns, lines) != self._size or self._resized:
            # Resized: the terminal has reset the scroll region, and moved the lines (the view's
            # and the job's) where it chose: nothing is cleared by where the view was, which may
            # be the job's lines now. What is below the job's cursor is not the job's (it writes
            # at its cursor): the old view, cleared from there (ESC[J).
            self._resized = True
            release = self._release()
            self._resized = False
            if not fits(lines):  # no room: the job's output only, until there is again
                self._open = self._write(release, keep=True)
                if not self._said_short:
                    self._said_short = True
                    self.outlet.say(
                        self.stream,
                        f"memprobe: the terminal is too short for the live view ({lines} lines; it needs "
                        f"{LINES_NEEDED}): it comes back once the terminal is taller",
                    )
                return
            # The whole screen scrolling, what is below the job's cursor cleared, then room at the
            # foot: the job's last lines scroll up by the view's height.
            setup += release + "\x1b[J" + "\n" * rows + f"\x1b[{rows}A"
            # Setting the region moves the cursor home: saved and put back.
            setup += f"{SAVE}\x1b[1;{lines - rows}r{RESTORE}"
            self._size, self._rows = (columns, lines), rows
        drawn = render(
            view,
            title,
            columns,
            rows,
            color=self.color,
            note=note,
            quitting=quitting,
            name=self.name,
            hint=self.hint,
            compact=True,
        )
        drawn += [""] * (rows - len(drawn))
        text = (
            SAVE + "".join(f"\x1b[{lines - rows + 1 + i};1H{d}\x1b[K" for i, d in enumerate(drawn)) + RESTORE
        )
        # A new region and its first repaint in one write, never dropped; a repaint alone is
        # replaced by the next while the terminal takes no output.
        self._open = self._write(setup + text, keep=bool(setup))

    def _clear(self) -> str:
        """The view's lines cleared (the cursor kept), as the terminal was last sized."""
        if self._size is None:
            return ""
        return f"{SAVE}\x1b[{self._size[1] - self._rows + 1};1H\x1b[J{RESTORE}"

    def _release(self) -> str:
        """The whole screen scrolling again (resetting the region moves the cursor home: saved
        and put back), the view's lines cleared first where the terminal was not resized since
        they were drawn (else they may be the job's lines now: left as they are)."""
        if self._size is None:
            return ""
        same = not self._resized and self._terminal_size() == self._size
        text = (self._clear() if same else "") + f"{SAVE}\x1b[r{RESTORE}"
        self._size = None
        return text

    def close(self) -> None:
        self._write(self._release(), keep=True)
        self._open = False
        if self._ttou is not None:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGTTOU, self._ttou)  # type: ignore[arg-type]
            self._ttou = None

    def _write(self, text: str, *, keep: bool) -> bool:
        """``text`` queued for one write() to the terminal: whole, never split by the job's
        output (a repaint, or ``keep``: a setup or teardown, which drops the repaint waiting
        before it); False once the terminal went away: the recording goes on."""
        if text:
            self.outlet.put(self.stream, text, frame="panel", keep=keep)
        return self.outlet.alive(self.stream)
