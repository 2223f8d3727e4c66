"""Stop signals taken note of, for a whole session (a scenario's runs, a recording): the handlers
only note the signal and wake the waiting loop through a pipe, so ending the process group and
saving are never cut short, not even by a second Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

from memprobe.core.vocabulary import signal_name


class StopSignals:
    """SIGINT (Ctrl-C), SIGTERM and SIGHUP end a session gracefully, whenever they come.

    The handlers only take note (and wake the supervisor through a pipe): the run in progress
    is ended at the supervisor's next step, within a fraction of a second, and what follows -
    ending its process group, saving the results, writing the report - is never cut short, not
    even by a second Ctrl-C. Handlers can only be set in the main thread; elsewhere this notes
    nothing and signals act as they would without it.
    """

    def __init__(
        self, signums: Iterable[int] = (signal.SIGINT,), on_signal: Callable[[int, int], None] | None = None
    ) -> None:
        self.signums = tuple(signums)
        self.on_signal = on_signal
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._pipe = (r, w)
            self._previous = {s: signal.signal(s, self._note) for s in self.signums}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        if self._pipe:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def _note(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if self._pipe:
            with contextlib.suppress(OSError):  # the pipe is full: the supervisor has been woken already
                os.write(self._pipe[1], b"!")
        if self.on_signal:
            self.on_signal(signum, len(self.received))

    def fileno(self) -> int | None:
        """Readable once a signal came: for select() next to the run's event pipe."""
        return self._pipe[0] if self._pipe else None

    @property
    def first(self) -> str | None:
        return signal_name(self.received[0]) if self.received else None
