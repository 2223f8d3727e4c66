"""memprobe's output while a recording runs, written by a thread of its own: a terminal that
stops taking output never stops the recording.

A terminal paused with Ctrl-S (XOFF), one whose reader stalls (an ssh connection that hangs, a
terminal emulator that stopped reading) and a pipe nobody reads (``memprobe top PID | less``,
the pager left alone) block a write() until they take the bytes. Written by the recording's
main thread, such a write held the whole recording with it: the polls, the duration, the job's
end (``memprobe top --duration 10``, paused: still running 30 s later, nothing saved). Here the
caller only queues; one thread writes, in order, with an ordinary blocking write. (Never
O_NONBLOCK on the descriptor: that flag belongs to the open file, which ``record``'s job shares
for its own output, and would make the job's writes fail.)

* a line (memprobe's messages): kept until written; at most MAX_PENDING bytes of them wait, and
  the lines beyond are counted and said in one line once the terminal takes output again;
* a repaint (``frame``: a live view's screen, a line every ``--every`` seconds): a newer one
  replaces the one still waiting, so the view shows now, not the seconds the terminal was
  paused; the view's setup and teardown (``keep``: the alternate screen, the scroll region) drop
  the repaints waiting before them and are never dropped themselves;
* a descriptor whose write fails (the terminal gone, a pipe closed): its output ends, what waits
  for it is dropped, and ``alive`` says so.

A command waits (:meth:`Outlet.wait`) for all of it before its summary: the results are saved
by then, and the summary waits for the terminal as any program's output does. The kernel writes
one write() to a terminal whole, holding the terminal's write lock while it waits for room, so a
repaint of ``record --live`` is never split by the job's own output, paused or not. The writing
thread blocks every signal: they go to the main thread, and none cuts a write in two.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections import deque
from dataclasses import dataclass
from typing import TextIO

from memprobe.core.text import printable_lines

MAX_PENDING = 1 << 20  # bytes of memprobe's lines that may wait for a terminal that takes none


@dataclass
class _Item:
    fd: int
    data: bytes
    frame: str | None = None  # a repaint of this view: a newer one replaces it while it waits
    lines: int = 0  # memprobe's lines it holds, counted against MAX_PENDING (0: a repaint, a setup)


class Outlet:
    """Writes queued text to terminals and pipes in order, from a thread of its own (see the
    module's docstring). Thread-safe; nothing here blocks but :meth:`wait`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._pending = 0  # bytes of lines waiting (repaints aside: one per view at most)
        self._dropped: dict[int, int] = {}  # lines not kept, per descriptor
        self._dead: set[int] = set()  # descriptors whose write failed
        self._writer: threading.Thread | None = None
        self._writing = False

    def say(self, stream: TextIO | None, text: str) -> None:
        """A line of memprobe's, its foreign strings escaped (as ``console.say`` prints one)."""
        self.put(stream, printable_lines(text) + "\n")

    def put(self, stream: TextIO | None, text: str, *, frame: str | None = None, keep: bool = False) -> None:
        """``text`` for ``stream``, as it is (escape sequences and all). ``frame``: a repaint of
        that view, dropping the one still waiting; ``keep``: written even so (its setup, its
        teardown). A stream without a descriptor (in memory) is written at once."""
        fd = _fileno(stream)
        if fd is None:
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.write(text)
            return
        data = text.encode(getattr(stream, "encoding", None) or "utf-8", "backslashreplace")
        lines = text.count("\n") if frame is None else 0
        with self._cond:
            if fd in self._dead:
                return
            if frame is not None:
                self._drop_frame(frame)
            if lines and self._pending + len(data) > MAX_PENDING:
                self._dropped[fd] = self._dropped.get(fd, 0) + lines
                return
            self._pending += len(data) if lines else 0
            self._queue.append(_Item(fd, data, None if keep else frame, lines))
            if self._writer is None:
                self._writer = threading.Thread(target=self._write, name="memprobe-output", daemon=True)
                self._writer.start()
            self._cond.notify_all()

    def discard(self, frame: str) -> None:
        """The repaint of ``frame`` still waiting, dropped (the view closes)."""
        with self._cond:
            self._drop_frame(frame)

    def _drop_frame(self, frame: str) -> None:
        self._queue = deque(i for i in self._queue if i.frame != frame)

    def alive(self, stream: TextIO | None) -> bool:
        """False once a write to ``stream`` failed (the terminal went away, a pipe was closed)."""
        fd = _fileno(stream)
        with self._cond:
            return fd not in self._dead

    def wait(self, timeout: float | None = None) -> bool:
        """Until everything queued is written (or dropped: its descriptor failed); False if
        ``timeout`` seconds passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._writing, timeout)

    def _write(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        while True:
            with self._cond:
                if not self._queue:
                    self._writer = None
                    self._cond.notify_all()
                    return
                item = self._queue.popleft()
                self._writing = True
            ok = _write_all(item.fd, item.data)
            with self._cond:
                self._writing = False
                if item.lines:
                    self._pending -= len(item.data)
                if not ok:
                    self._dead.add(item.fd)
                    gone = [i for i in self._queue if i.fd == item.fd]
                    self._queue = deque(i for i in self._queue if i.fd != item.fd)
                    self._pending -= sum(len(i.data) for i in gone if i.lines)
                elif self._dropped.get(item.fd) and not any(i.fd == item.fd and i.lines for i in self._queue):
                    n = self._dropped.pop(item.fd)
                    note = f"memprobe: {n} line(s) of its output not shown: the terminal took no output for a while\n"
                    self._queue.appendleft(_Item(item.fd, note.encode(), lines=1))
                    self._pending += len(note)
                self._cond.notify_all()


def _fileno(stream: TextIO | None) -> int | None:
    try:
        return stream.fileno() if stream is not None else None
    except (OSError, ValueError, AttributeError):  # in memory, or closed
        return None


def _write_all(fd: int, data: bytes) -> bool:
    """``data`` written whole to ``fd``, waiting for it as long as it takes; False if the
    descriptor failed. A descriptor someone made non-blocking (the job shares it) is waited for
    with select."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            with contextlib.suppress(OSError, ValueError):
                select.select([], [fd], [], 1.0)
        except (OSError, ValueError):
            return False
    return True
