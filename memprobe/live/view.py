"""The live view of a recording (``memprobe top``, ``record --live``): :class:`Live`, the
recording's observer, feeds the model (:class:`memprobe.live.model.LiveModel`) from the sampler's
rows and shows it every ``REFRESH_S`` on a display: :class:`Screen` (the alternate screen, as
``top`` draws it), :class:`Lines` (one line every few seconds where the output is no terminal) or
:class:`memprobe.live.panel.Panel` (the foot of the terminal a job shares). What is written goes
through :class:`memprobe.live.outlet.Outlet`, so a terminal that takes no output never holds the
sampling. Every line is cut in the columns a terminal shows, its foreign strings escaped.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from memprobe.core.text import clip, columns, pad, printable
from memprobe.live.outlet import Outlet

if TYPE_CHECKING:
    from memprobe.live.model import LiveView
    from memprobe.live.panel import Panel
    from memprobe.record.recording import Recording

REFRESH_S = 1.0
QUIT_KEYS = b"qQ"
# Stopped with Ctrl-Z, memprobe gives the terminal back first (the view's teardown written) for
# up to this long; Ctrl-Z resumes a terminal paused with Ctrl-S, so it takes it at once.
SUSPEND_WAIT_S = 1.0
RED, GREEN, BOLD, REVERSE, RESET = "\x1b[31m", "\x1b[32m", "\x1b[1m", "\x1b[7m", "\x1b[0m"


class Live:
    """The recording's observer (:class:`memprobe.record.recording.Observer`): feeds the model
    from the sampler's rows, shows a view every REFRESH_S, reads the quit key. Its own failure
    ends the view, never the sampling."""

    def __init__(self, display: Screen | Lines | Panel, log: Callable[[str], None]) -> None:
        from memprobe.live.model import LiveModel

        self.display = display
        # Made now: the sampler's first tick (every process's first exact reading) comes before
        # the first poll; its threshold and limit are set at that poll (the recording's).
        self.model = LiveModel(0.0, None, "")
        self.quit = False
        self._log = log
        self._held: list[str] = []  # log lines while the screen is shown: said when it closes
        self._next = 0.0
        self._title = ""
        self._failed = False
        self._entered: object = None  # the job's memory cgroup whose limit the view shows

    def log(self, line: str) -> None:
        if self.display.open_now():
            self._held.append(line)
        else:
            self._log(line)

    def rows(self, table: str, rows: list[dict]) -> None:
        if not self._failed:
            try:
                self.model.feed(table, rows)
            except Exception as exc:  # noqa: BLE001  (the view's trouble never stops the sampling)
                self._fail(exc)

    def poll(self, recording: Recording) -> None:
        if self._failed:
            return
        try:
            if not self._title:
                self._start(recording)
            self._follow(recording)
            if self.display.key_pressed(QUIT_KEYS) and not self.quit:
                self.quit = True
                os.kill(os.getpid(), signal.SIGINT)  # the watch stops and saves as on Ctrl-C
            now = time.monotonic()
            due = self.display.due()  # at every poll: the display notes what changed (the size)
            if (now >= self._next or self.quit) and due:
                self._next = now + REFRESH_S
                assert recording.sampler is not None
                view = self.model.view(recording.sampler.ledger.processes.get)
                self.display.show(view, self._title, self._held[-1] if self._held else "", self.quit)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _start(self, recording: Recording) -> None:
        self.model.threshold_mb = recording.verdict.growth_threshold_mb
        self._follow(recording)
        command = " ".join(recording.info.get("command") or [])
        self._title = f"pid {recording.root} ({clip(printable(command), 60)})"
        self.display.open()

    def _follow(self, recording: Recording) -> None:
        """The limit of the job's memory cgroup, again where the job moved into another as it
        started (the sampler follows it: cgexec, systemd-run --scope)."""
        from memprobe.analysis.limit import memory_limit

        entered = recording.sampler.cgroup if recording.sampler is not None else None
        if self._title and entered is self._entered:
            return
        self._entered = entered
        env = recording.folder.manifest.get("environment") or {}
        meta = recording.cgroup_meta()
        limit_mb, words = memory_limit(meta, env.get("mem_total_mb"))
        group = meta.get("cgroup") or {}
        self.model.entered(limit_mb, words, group.get("since_t") or 0.0, group.get("oom_kills_at_start"))

    def suspend(self) -> None:
        self.display.close()
        self.display.outlet.wait(SUSPEND_WAIT_S)  # the terminal given back before memprobe stops

    def resume(self) -> None:
        if not self._failed and self._title:
            self.display.open()

    def _fail(self, exc: Exception) -> None:
        self._failed = True
        self.close()
        self._log(f"memprobe: the live view failed ({printable(repr(exc))}); sampling goes on")

    def close(self) -> None:
        self.display.close()
        held, self._held = self._held, []
        for line in held:
            self._log(line)


# -- the terminal ---------------------------------------------------------------------------------


class Screen:
    """The view on a terminal: the alternate screen redrawn whole each time (plain ANSI), keys
    read without echo (Ctrl-C still interrupts), everything given back as it was on close, and
    while memprobe is stopped (Ctrl-Z): the view comes back when it is in the foreground again."""

    def __init__(self, stream: TextIO, outlet: Outlet, *, color: bool) -> None:
        self.stream = stream
        self.outlet = outlet
        self.color = color
        self._open = False
        self._keys: int | None = None  # stdin, when it is our terminal in the foreground
        self._saved: list | None = None
        self._suspended = False  # left for a Ctrl-Z: to be drawn again once in the foreground
        self._tstp: object = None  # SIGTSTP's handler before ours

    def open_now(self) -> bool:
        return self._open or self._suspended

    def open(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._tstp = signal.signal(signal.SIGTSTP, self._stop)
        self._enter()

    def _enter(self) -> None:
        import termios
        import tty

        with contextlib.suppress(OSError, termios.error):
            if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
                self._saved = termios.tcgetattr(0)
                # Keys one at a time, not echoed; ISIG kept: Ctrl-C is SIGINT. Now, not once the
                # output is drained (TCSAFLUSH, TCSADRAIN): a paused terminal never drains.
                tty.setcbreak(0, termios.TCSANOW)
                self._keys = 0
        self._open = self._write("\x1b[?1049h\x1b[?25l", keep=True)

    def _stop(self, signum: int, frame: object) -> None:
        """Ctrl-Z: the terminal given back as it was, then stopped as any program is; on SIGCONT
        the view is drawn again once memprobe is in the foreground (see show)."""
        self._leave()
        self.outlet.wait(SUSPEND_WAIT_S)
        self._suspended = True
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT (fg, bg)
        signal.signal(signal.SIGTSTP, self._stop)

    def due(self) -> bool:
        if self._suspended and _foreground(self.stream):
            self._suspended = False
            self._enter()
        return self._open

    def key_pressed(self, keys: bytes) -> bool:
        if self._keys is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            while select.select([self._keys], [], [], 0)[0]:
                got = os.read(self._keys, 64)
                if not got:
                    self._keys = None
                    return False
                if any(k in keys for k in got):
                    return True
        return False

    def show(self, view: LiveView, title: str, note: str, quitting: bool) -> None:
        if not self._open:
            return
        try:  # the terminal's own size now (COLUMNS, LINES may be stale: it can be resized)
            size = os.get_terminal_size(self.stream.fileno())
        except (OSError, ValueError):
            size = shutil.get_terminal_size()
        lines = render(view, title, size.columns, size.lines, color=self.color, note=note, quitting=quitting)
        self._open = self._write("\x1b[H" + "\x1b[K\r\n".join(lines) + "\x1b[K\x1b[J", keep=False)

    def close(self) -> None:
        self._suspended = False
        if self._tstp is not None:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGTSTP, self._tstp)  # type: ignore[arg-type]
            self._tstp = None
        self._leave()

    def _leave(self) -> None:
        if self._saved is not None:
            import termios

            with contextlib.suppress(OSError, termios.error):
                termios.tcsetattr(0, termios.TCSANOW, self._saved)
            self._saved, self._keys = None, None
        if self._open:
            self._open = False
            self._write("\x1b[?25h\x1b[?1049l", keep=True)

    def _write(self, text: str, *, keep: bool) -> bool:
        """Queued for the terminal (a repaint, or ``keep``: the screen's setup and teardown,
        never dropped); False once the terminal went away: the recording goes on."""
        self.outlet.put(self.stream, text, frame="screen", keep=keep)
        return self.outlet.alive(self.stream)


def _foreground(stream: TextIO) -> bool:
    """Whether memprobe is in its terminal's foreground (again)."""
    with contextlib.suppress(OSError, ValueError):
        fd = stream.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    return False


class Lines:
    """The view where stdout is not a terminal: one line every ``every`` seconds."""

    def __init__(
        self,
        stream: TextIO,
        every: float,
        *,
        outlet: Outlet,
        clock: Callable[[], float] = time.monotonic,
        name: str = "memprobe top",
    ) -> None:
        self.stream, self.every, self.outlet, self.clock, self.name = stream, every, outlet, clock, name
        self._last: float | None = None

    def open_now(self) -> bool:
        return False

    def open(self) -> None:
        pass

    def key_pressed(self, keys: bytes) -> bool:
        return False

    def due(self) -> bool:
        """Whether a line is due (the view is not even computed between lines)."""
        return self._last is None or self.clock() - self._last >= self.every

    def show(self, view: LiveView, title: str, note: str, quitting: bool) -> None:
        if not view.rows or not self.due():  # nothing sampled yet: nothing to say
            return
        self._last = self.clock()
        # A line nobody reads yet (a full pipe) is replaced by the next one.
        self.outlet.put(self.stream, printable(line(view, self.name)) + "\n", frame="lines")

    def close(self) -> None:
        pass


# -- what is shown ------------------------------------------------------------------------------


def num(v: float | None, sign: bool = False) -> str:
    return "-" if v is None else (f"{v:+,.1f}" if sign else f"{v:,.1f}")


def totals_words(view: LiveView) -> str:
    from memprobe.core.units import mb

    t = view.totals
    pss = mb(t.total_pss_mb, true_minus=False, missing="not read yet")
    if t.unread and t.total_pss_mb is not None:
        pss += f" (+ {t.unread} process(es) not read yet)"
    words = f"total PSS {pss}  sum of RSS {mb(t.sum_rss_mb, true_minus=False)}"
    if t.cgroup_mb is not None:
        words += f"  cgroup charge {mb(t.cgroup_mb, true_minus=False)}"
    if t.limit_mb is not None:
        words += f"  limit {mb(t.limit_mb, true_minus=False)} ({t.limit_words})"
    if t.oom_kills:
        words += f"  OOM kills: {t.oom_kills}"
    return words


def line(view: LiveView, name: str = "memprobe top") -> str:
    """The view in one line (stdout not a terminal)."""
    return (
        f"{name}: {view.t:.0f} s: {view.totals.processes} process(es): {totals_words(view)}; "
        f"{view.verdict}; {view.limit}"
    )


LEGEND = (
    "USS is: exact (read this second) or est. (the sampler's estimate)  PSS: its latest exact reading "
    "carried to now  MB/min: own growth over the last 30 s  grown: a worker's USS since its start"
)
HEAD = (
    "pid",
    "role",
    "kind",
    "rank",
    "worker",
    "gen",
    "USS MB",
    "USS is",
    "PSS MB",
    "RSS MB",
    "MB/min",
    "grown MB",
)


def render(
    view: LiveView,
    title: str,
    width: int,
    height: int,
    *,
    color: bool,
    note: str = "",
    quitting: bool = False,
    name: str = "memprobe top",
    hint: str = "q: quit and save",
    compact: bool = False,
) -> list[str]:
    """The screen's lines, each at most ``width`` terminal columns (escape sequences aside), at most
    ``height`` of them; colour and attributes only where ``color``. ``compact``: no blank line,
    no legend (the panel under a job's own output, :mod:`memprobe.live.panel`)."""

    def paint(text: str, code: str) -> str:
        return f"{code}{text}{RESET}" if color and text else text

    def fit(text: str) -> str:  # every line holds strings from outside: roles, paths, commands
        return clip(printable(text), width)

    minutes, seconds = divmod(int(view.t), 60)
    head = f"{name}  {title}  {minutes}:{seconds:02d}  " + (
        "quitting: saving what was sampled..." if quitting else hint
    )
    grows = view.verdict.startswith("GROWING")
    top = [
        paint(fit(head), BOLD),
        fit(totals_words(view)),
        fit(view.limit),
        paint(fit(view.verdict), RED if grows else GREEN),
        "",
    ]
    table = [HEAD] + [
        (
            str(r.pid),
            printable(r.role),
            printable(r.kind or "-"),
            "-" if r.rank < 0 else str(r.rank),
            "-" if r.worker < 0 else str(r.worker),
            "-" if r.generation is None else str(r.generation),
            num(r.uss_mb),
            "exact" if r.exact else ("est." if r.uss_mb is not None else "-"),
            num(r.pss_mb),
            num(r.rss_mb),
            num(r.rate_mb_min, sign=True),
            num(r.grown_mb, sign=True),
        )
        for r in view.rows
    ]
    widths = [max(columns(row[i]) for row in table) for i in range(len(HEAD))]
    text = [
        "  ".join(
            pad(c, w, right=i not in (1, 2, 7)) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    ]
    if compact:
        top.pop()  # the blank line
    room = max(height - len(top) - (1 if compact else 3), 1)
    if compact and len(text) - 1 > room:
        room = max(room - 1, 1)  # the last line says how many more
    body = [paint(fit(text[0]), REVERSE)] + [fit(t) for t in text[1 : 1 + room]]
    if len(text) - 1 > room:
        body.append(fit(f"... and {len(text) - 1 - room} more process(es)"))
    if compact:
        return (top + body)[:height]
    foot = ["", fit(LEGEND)]
    if view.ended:
        foot.append(fit(f"{view.ended} process(es) of the tree ended so far"))
    if note:
        foot.append(fit(note))
    return (top + body + foot)[:height]
