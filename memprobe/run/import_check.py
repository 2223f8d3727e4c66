"""Importing users' dataset factories in a process of their own, within a time limit, before a
command runs anything: what `memprobe run` (a scenario's factories, `--dataset`) and
`memprobe cure` do first, so a wrong name or a module that cannot be imported stops the command
at once with one line (:class:`memprobe.core.errors.FactoryError`, exit 2) and nothing written.

The user's module is never imported in memprobe's own process: there, an import that raises
anything (SystemExit and KeyboardInterrupt too) would end memprobe with a traceback or the
module's own exit code, one that prints would write into memprobe's output, and one that never
returns would hang it with no timeout that applies. Here it is imported by
``python -m memprobe.run.import_check`` in a process group of its own (which ends with the
command, however the command ends: run/supervised.py's ``end_with_supervisor``), within
``timeout_s`` for each module; what it prints is kept apart (the last lines are named where they
help: a process that ended without a word). Whatever happens, the check's process and anything
it started are ended before :func:`check_imports` returns or raises.

The factories are only imported here, not called: calling one builds the dataset, which the
run's process does (within the run's timeout) and the supervisor names if it fails there.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

from memprobe.core.errors import FactoryError, MemprobeError
from memprobe.run import factory
from memprobe.run.child import Events
from memprobe.run.supervised import SUPERVISOR_ENV, end_with_supervisor
from memprobe.session.group import OWN_PROCESS_GROUP, end_group, wait_exited

EVENT_FD = "MEMPROBE_EVENT_FD"
OUTPUT_TAIL = 4096  # bytes of the check's output kept (its last lines, for a process that ended silently)
# memprobe's own start in the check's process (before the first import, no user code yet): not
# the user's time, so bounded apart, generously (a loaded machine).
START_S = 60.0
EXIT_S = 5.0  # for the check's process to exit by itself once it has said it is done


def check_imports(refs: Iterable[str], sys_path: Iterable[str], timeout_s: float, limit: str) -> None:
    """Import each of ``refs`` ("module:callable") in a process of its own, with ``sys_path``
    first on its path, each within ``timeout_s`` seconds (``limit`` names that bound for the
    message: "--timeout"); return when each names a callable, else raise a
    :class:`FactoryError` for the first that does not. Each reference is checked as text first,
    here (nothing started for a name that cannot be one)."""
    refs = list(dict.fromkeys(refs))
    for ref in refs:
        factory.parse_ref(ref)
    if not refs:
        return
    events_r, events_w = os.pipe()
    output_r, output_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=output_w,
            stderr=output_w,
            pass_fds=(events_w,),
            env={**os.environ, EVENT_FD: str(events_w), SUPERVISOR_ENV: str(os.getpid())},
            **OWN_PROCESS_GROUP,
        )
    except BaseException:
        for fd in (events_r, events_w, output_r, output_w):
            os.close(fd)
        raise
    os.close(events_w)
    os.close(output_w)
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"refs": refs, "sys_path": list(sys_path)}).encode() + b"\n")
            proc.stdin.close()
        except OSError:
            pass  # it is gone already: its exit status says why
        _Watch(proc, events_r, output_r, refs[0], timeout_s, limit).wait()
        wait_exited(proc, EXIT_S)
    finally:
        end_group(proc)  # whatever happened (Ctrl-C too): nothing of it left running
        os.close(events_r)
        os.close(output_r)


class _Watch:
    """The check's process watched: its events read, its output's tail kept, its time bounded."""

    def __init__(
        self, proc: subprocess.Popen, events: int, output: int, first: str, timeout_s: float, limit: str
    ) -> None:
        self.proc, self.events, self.output = proc, events, output
        self.timeout_s, self.limit = timeout_s, limit
        self.ref, self.phase = first, "start"  # what the process is doing
        self.deadline = time.monotonic() + max(timeout_s, START_S)
        self.tail = b""
        self._buf = b""

    def wait(self) -> None:
        fds = [self.events, self.output]
        while self.events in fds:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0 and self.phase == "start":
                raise MemprobeError(
                    f"memprobe's import check did not start within {START_S:g} s (before importing "
                    f"{self.ref!r}): is this machine overloaded?"
                )
            if remaining <= 0:
                raise FactoryError(
                    f"dataset factory {self.ref!r}: {self._doing()} did not return within "
                    f"{self.timeout_s:g} s ({self.limit})"
                )
            ready, _, _ = select.select(fds, [], [], remaining)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    fds.remove(fd)
                elif fd == self.output:
                    self.tail = (self.tail + chunk)[-OUTPUT_TAIL:]
                elif self._feed(chunk):
                    return
        self._ended()

    def _feed(self, chunk: bytes) -> bool:
        """Handle the events in ``chunk``; True once every reference was imported."""
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            ev = json.loads(line)
            if ev["event"] == "factory":
                self.ref, self.phase = ev["ref"], ev["phase"]
                self.deadline = time.monotonic() + self.timeout_s  # each import gets the whole bound
            elif ev["event"] == "error":
                raise FactoryError(ev["message"])
            elif ev["event"] == "done":
                return True
        return False

    def _doing(self) -> str:
        if self.phase == "start":
            return "starting (before importing anything)"
        return factory.doing(self.ref, self.phase)

    def _ended(self) -> None:
        """The process closed its events without a word: it exited or was killed."""
        self.proc.wait()  # its events are closed: it is exiting, not hung
        code = self.proc.returncode
        how = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        lines = [line for line in self.tail.decode("utf-8", "replace").splitlines() if line.strip()]
        said = f"; its last output: {lines[-1].strip()}" if lines else "; it printed nothing"
        raise FactoryError(
            f"dataset factory {self.ref!r}: the process importing it ended ({how}) while "
            f"{self._doing()}{said}"
        )


def main() -> int:
    """The check's process: import each reference it is given, telling the command as it goes."""
    end_with_supervisor()
    events = Events(int(os.environ[EVENT_FD]))
    request = json.loads(sys.stdin.readline())
    sys.path[:0] = [p for p in request["sys_path"] if p not in sys.path]
    factory.tell_phases(lambda ref, phase: events.send("factory", ref=ref, phase=phase))
    for ref in request["refs"]:
        try:
            factory.load_factory(ref)
        except FactoryError as exc:
            events.send("error", ref=ref, message=str(exc))
            return 1
    events.send("done")
    return 0


if __name__ == "__main__":
    code = main()
    # Not the interpreter's exit: it would wait for threads the user's module started and run
    # its at-exit handlers, either of which can hang or print.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream the user's module closed: nothing to flush
            stream.flush()
    os._exit(code)
