"""``memprobe record --fail-on``: CI fails on a verdict, the command's own exit code kept where it
failed by itself; real `memprobe record` runs of a loop that keeps its outputs and one that does
not (no torch: the flag is about the verdict, not the loader)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LOOP = """
import sys, time
kept = []
for step in range(300):
    out = b"x" * 400_000
    if sys.argv[1] == "keep":
        kept.append(out)  # a loop that keeps something every step: +120 MB
    time.sleep(0.01)
sys.exit(int(sys.argv[2]))
"""


def _record(tmp: Path, fail_on: str, keep: str, code: int = 0) -> subprocess.CompletedProcess:
    # A 3 s job: at the default 1 % of a core a slow machine's cheap ticks (1-2.5 ms on the build
    # VM) leave no exact reading after the first, and "no verdict" is all it can say (2 runs of 3
    # on 3.13t). This test is about the flag, not the budget: 5 % reads the loop's rise.
    argv = [sys.executable, "-m", "memprobe", "record", "--no-report", "-o", str(tmp), "--pss-budget", "0.05"]
    argv += ["--fail-on", fail_on]
    argv += ["--", sys.executable, "-c", LOOP, keep, str(code)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def test_a_growing_verdict_fails_the_run_with_exit_3(tmp_path: Path) -> None:
    done = _record(tmp_path / "r", "growing", "keep")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "memprobe: --fail-on growing: exit 3" in done.stderr
    assert "steadily while its loop ran" in " ".join(done.stderr.split())


@pytest.mark.parametrize(
    "fail_on, keep, code, expected",
    [
        ("growing", "drop", 0, 0),  # flat: the command's own 0
        ("copy-on-access", "keep", 0, 0),  # grows, but not by the cause named
        ("growing", "keep", 5, 5),  # the command failed by itself: its code, not the verdict's
    ],
    ids=["flat", "another cause", "the command's own failure"],
)
def test_the_command_s_own_exit_code_is_kept_otherwise(
    tmp_path: Path, fail_on: str, keep: str, code: int, expected: int
) -> None:
    done = _record(tmp_path / "r", fail_on, keep, code)
    assert done.returncode == expected, done.stderr[-2000:]
    assert "--fail-on" not in done.stderr


def test_a_bad_fail_on_value_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = _record(tmp_path / "r", "growing,leaky", "keep")
    assert done.returncode == 2 and not (tmp_path / "r").exists()
    assert (
        "--fail-on 'growing,leaky': 'leaky' is not a verdict or cause; allowed: growing, shared-grows"
        in done.stderr
    )
