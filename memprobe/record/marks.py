"""``memprobe.mark(n)``: tell ``memprobe record`` that ``n`` items were processed.

Items per second cannot be seen from outside a process, so a user who wants them adds one line
to the training loop::

    import memprobe
    ...
    for batch in loader:
        ...
        memprobe.mark(len(batch))

When memprobe is not recording, ``mark`` does nothing and costs one global lookup and a compare:
the environment is read once, on the first call. ``memprobe record`` sets ``MEMPROBE_MARK_FILE``
to a file in the run's folder; each call then appends one whole line
``<CLOCK_MONOTONIC seconds> <n> <pid>`` with a single ``write()`` on an ``O_APPEND`` descriptor,
so calls from DataLoader worker processes (forked or spawned: the variable is inherited) and from
threads never interleave. ``mark`` never raises: on any error it turns itself off.

``memprobe watch`` cannot inject the variable into a process that is already running; a job
started with ``MEMPROBE_MARK_FILE=/some/file`` set by hand is picked up by ``watch`` though.
"""

from __future__ import annotations

import contextlib
import os
import time

ENV = "MEMPROBE_MARK_FILE"

_UNSET, _OFF = -2, -1
_fd = _UNSET  # -2: environment not read yet; -1: off; else an O_APPEND descriptor


def mark(n: int = 1) -> None:
    """Record that ``n`` items were processed; a no-op unless ``memprobe record`` is recording."""
    if _fd == _OFF:
        return
    _mark(n)


def _mark(n: int) -> None:
    try:
        if _fd == _UNSET:
            _open()
            if _fd == _OFF:
                return
        # One write() of one whole line: O_APPEND makes it land at the end, never interleaved.
        os.write(_fd, f"{time.monotonic():.6f} {int(n)} {os.getpid()}\n".encode())
    except Exception:  # noqa: BLE001  (a failed mark never reaches the user's training loop)
        _disable()


def _open() -> None:
    global _fd
    path = os.environ.get(ENV)
    # A forked worker inherits the open descriptor (shared, still O_APPEND); a spawned one
    # imports this module afresh and opens its own from the inherited environment.
    _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644) if path else _OFF


def _disable() -> None:
    global _fd
    fd, _fd = _fd, _OFF
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def _reset() -> None:
    """Forget the state so that the next call reads the environment again (for tests)."""
    global _fd
    _disable()
    _fd = _UNSET
