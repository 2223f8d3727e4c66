"""What the interpreter's version changes in a real run (docs/pythons.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memprobe.run.scenario import parse_scenario
from memprobe.run.session import run_scenario

FORK_RUN = """\
name: fork-warning
dataset: {records: 4000}
backends: [list]
modes: [fork]
workers: [2]
loader: {batch_size: 64, epochs: 2}
timeout_s: 120
"""


@pytest.mark.skipif(
    sys.version_info < (3, 12), reason="CPython warns of fork() in a process with threads from 3.12 on"
)
def test_a_fork_run_s_output_holds_no_warning_about_forking_with_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every warning shown in the run's process (PYTHONWARNINGS, which it inherits): before, each
    worker of each epoch added "This process (pid=...) is multi-threaded, use of fork() may lead
    to deadlocks in the child." to child.log (import torch and import pyarrow start threads)."""
    monkeypatch.setenv("PYTHONWARNINGS", "always::DeprecationWarning")
    result = run_scenario(parse_scenario(FORK_RUN, "fork-warning.yaml"), tmp_path / "results", render=False)
    (summary,) = result.summaries
    assert summary.status == "ok"
    (log,) = (tmp_path / "results").glob("runs/*/child.log")
    assert "use of fork() may lead to deadlocks" not in log.read_text()
