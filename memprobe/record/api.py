"""Record a command from Python (and from pytest): ``memprobe.record_command(argv)``, the guard for
what a dataset profile cannot see: a training loop's own growth (a loss kept with its graph, a
list of outputs), the sampler's index list, shared memory kept::

    def test_training_loop_stays_flat(memprobe):  # memprobe's pytest fixture
        result = memprobe.record(["python", "train.py", "--max-steps", "300"])
        result.assert_flat(max_main_growth_mb=20)

The command runs under ``memprobe record`` in a process of its own (the user's code never runs in
the caller's process, and a command that hangs is ended at ``timeout_s``, what was sampled
saved); the result is the recording's summary, as summary.json holds it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memprobe.core import cures
from memprobe.core.errors import UsageError
from memprobe.core.summary import RunSummary
from memprobe.core.text import printable
from memprobe.core.vocabulary import PARENT_KINDS

RECORD_BASE = Path(tempfile.gettempdir()) / "memprobe"  # without ``out``: a new record-<name>-<time> here
STOP_GRACE_S = 30.0  # after Ctrl-C at the timeout, memprobe's time to save before it is killed
_FIELDS = {f.name for f in dataclasses.fields(RunSummary)}


@dataclass(frozen=True)
class RecordedJob:
    """The outcome of :func:`record_command`: the recording's summary, the command's exit code,
    what ``memprobe record`` printed, and its results folder (``memprobe report DIR`` renders it)."""

    summary: RunSummary | None
    exit_code: int
    output: str
    results_dir: Path
    timed_out: bool = False

    @property
    def verdict(self) -> str | None:
        return self.summary.verdict if self.summary else None

    def assert_ok(self) -> None:
        """Fail unless the command ran to its end with exit code 0 and was recorded."""
        __tracebackhide__ = True  # pytest: show the user's line and the message, not this frame
        if self.timed_out:
            raise AssertionError(f"memprobe record: the command did not end in time\n{self._tail()}")
        if self.summary is None:
            raise AssertionError(f"memprobe record: no summary was written\n{self._tail()}")
        if self.exit_code != 0 or self.summary.status != "ok":
            raise AssertionError(
                f"memprobe record: the command exited with {self.exit_code} ({self.summary.status})\n{self._tail()}"
            )

    def assert_flat(
        self, *, max_worker_growth_mb: float | None = None, max_main_growth_mb: float | None = None
    ) -> None:
        """Fail unless every worker grew at most ``max_worker_growth_mb`` of its own, and every
        main process, rank and launcher at most ``max_main_growth_mb`` (each by default the
        verdict's threshold, 50 MB), naming who grew, the verdict in words and what to do."""
        __tracebackhide__ = True  # pytest: show the user's line and the message, not this frame
        self.assert_ok()
        assert self.summary is not None  # assert_ok
        s = self.summary
        limits = {
            "worker": s.growth_threshold_mb if max_worker_growth_mb is None else max_worker_growth_mb,
            "parent": s.growth_threshold_mb if max_main_growth_mb is None else max_main_growth_mb,
        }
        judged = [p for p in s.processes or [] if p.get("judged") and p.get("growth_mb") is not None]
        if not judged:  # nothing measured is not flat: a guard that cannot fail guards nothing
            raise AssertionError(
                f"memprobe record: no process of the job could be judged ({printable(s.culprit or 'no verdict')}); "
                f"a job this short needs a larger share of a core for exact readings: "
                f"record_command(..., pss_budget=0.05)\nresults: {printable(str(self.results_dir))}"
            )
        over = [p for p in judged if p["growth_mb"] > limits[_side(p)]]
        if over:
            raise AssertionError(self._message(max(over, key=lambda p: p["growth_mb"]), limits, judged))

    def _message(self, worst: dict, limits: dict[str, float], judged: list[dict]) -> str:
        s = self.summary
        assert s is not None
        limit = limits[_side(worst)]
        head = f"{printable(worst['role'])} (pid {worst['pid']}) grew {worst['growth_mb']:+.1f} MB of its own; limit {limit:g} MB"
        rows = [f"  {'process':<16} {'pid':>8} {'own growth':>11}"]
        rows += [
            f"  {printable(p['role']):<16} {p['pid']:>8} {p['growth_mb']:>+8.1f} MB"
            f"{'  <-- over' if p['growth_mb'] > limits[_side(p)] else ''}"
            for p in judged
        ]
        advice = cures.text_lines(cures.causes_of(s))
        return "\n".join(
            [
                head,
                "",
                printable(s.culprit or ""),
                "",
                *rows,
                *advice,
                "",
                f"results: {printable(str(self.results_dir))}",
            ]
        )

    def _tail(self) -> str:
        lines = self.output.rstrip().splitlines()[-20:]
        return "\n".join([*map(printable, lines), f"results: {printable(str(self.results_dir))}"])


def _side(process: dict) -> str:
    """Which limit a process is held to: a parent's (main, rank, launcher) or a worker's."""
    return "parent" if process.get("kind") in PARENT_KINDS else "worker"


def record_command(
    argv: Sequence[str],
    *,
    out: str | Path | None = None,
    growth_threshold_mb: float = 50.0,
    timeout_s: float = 600.0,
    cwd: str | Path | None = None,
    pss_budget: float = 0.01,
) -> RecordedJob:
    """Run ``argv`` under ``memprobe record`` (its whole process tree sampled from outside, as the
    command line does) and return the recording. ``timeout_s``: past it the command is stopped
    the Ctrl-C way and what was sampled is kept (``timed_out``). ``out``: the results folder,
    new or empty (by default a new ``<temp>/memprobe/record-<name>-<UTC time>``). ``pss_budget``:
    the sampler's share of one core (``--pss-budget``): a job of a few seconds on a slow machine
    needs more than the default for its exact readings."""
    argv = [str(a) for a in argv]
    if not argv:
        raise UsageError("record_command(): no command given")
    for name, number in (("growth_threshold_mb", growth_threshold_mb), ("timeout_s", timeout_s)):
        if (
            isinstance(number, bool)
            or not isinstance(number, (int, float))
            or not math.isfinite(number)
            or number < 0
        ):
            raise UsageError(f"record_command(): {name}={number!r}; allowed: a finite number >= 0")
    if (
        isinstance(pss_budget, bool)
        or not isinstance(pss_budget, (int, float))
        or not 0.001 <= pss_budget <= 1
    ):
        raise UsageError(f"record_command(): pss_budget={pss_budget!r}; allowed: a number from 0.001 to 1")
    if out is None:
        RECORD_BASE.mkdir(parents=True, exist_ok=True)
        name = "".join(c if c.isalnum() else "-" for c in Path(argv[0]).name)[:40] or "command"
        out = Path(tempfile.mkdtemp(prefix=f"record-{name}-", dir=RECORD_BASE))
    out = Path(out)
    cmd = [
        sys.executable,
        "-m",
        "memprobe",
        "record",
        "-o",
        str(out),
        "--threshold",
        repr(float(growth_threshold_mb)),
        "--pss-budget",
        repr(float(pss_budget)),
    ]
    proc = subprocess.Popen(
        [*cmd, "--", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        start_new_session=True,  # the Ctrl-C at the timeout reaches memprobe, not the caller
    )
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGINT)  # memprobe forwards it, saves, exits 130
        try:
            output, _ = proc.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return RecordedJob(_summary(out), proc.returncode, output.decode("utf-8", "replace"), out, timed_out)


def _summary(out: Path) -> RunSummary | None:
    """The recording's summary as summary.json holds it (None where none was written)."""
    try:
        runs = json.loads((out / "summary.json").read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not runs or not isinstance(runs[0], dict):
        return None
    return RunSummary(**{k: v for k, v in runs[0].items() if k in _FIELDS})
