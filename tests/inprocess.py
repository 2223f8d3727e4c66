"""`memprobe ARGS` called in the test's own process (``memprobe.cli.main``): for what a command
says, writes and exits with when a test asks of its arguments, messages and pages, where a process
of its own adds only its start (1-3 CPU-s of imports: pandas, pyarrow, torch). What happens at the
process boundary (signals, rlimits, what is imported) keeps a real process.

Used by tests/conftest.py's ``cli`` fixture and tests/integration/test_faults.py's
``Memprobe.inline``; each captures the output its own way. ``load_tool`` imports a script of tools/
(the checks `make check-code` runs, the install's bytecode warm-up) for its unit tests.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_tool(name: str):
    """tools/<name>.py imported as the module ``name`` (registered in sys.modules: a dataclass
    of its own looks its module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Hung(BaseException):
    """An in-process command ran past its time (a BaseException: no ``except Exception`` of
    memprobe's takes it for a refusal)."""


@contextlib.contextmanager
def _cut_after(seconds: float | None, what: str) -> Iterator[None]:
    if not seconds:
        yield
        return

    def hung(signum: int, frame: object) -> None:
        raise Hung(f"{what}: still running after {seconds} s")

    before = signal.signal(signal.SIGALRM, hung)  # pytest and its xdist workers: the main thread
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def call_memprobe(*args: object, cwd: Path | None = None, timeout: float | None = None) -> int:
    """The exit code of ``memprobe ARGS`` run here (from ``cwd`` when given); argparse's
    ``SystemExit`` (--help, refusals) is an exit code too; a hang is cut after ``timeout`` s
    (:class:`Hung`). Any other exception propagates to the caller."""
    from memprobe.cli import main

    argv = [str(a) for a in args]
    with contextlib.chdir(cwd or os.getcwd()), _cut_after(timeout, "memprobe " + " ".join(argv)):
        try:
            return main(argv)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
