"""``memprobe record`` on trees whose processes say odd things about themselves: environment
values that are no rank, processes memprobe may not read (issue 23, items 4 and 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def _memprobe(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memprobe", *args], capture_output=True, text=True, timeout=120, **kwargs
    )


def test_rank_variables_that_are_no_rank_leave_the_results_whole(tmp_path: Path) -> None:
    """RANK=99999999999999999999 in a child's environment made pyarrow raise OverflowError while
    the results were gathered: a traceback, exit 1, the manifest ``complete`` but no Parquet and no
    report, and ``memprobe report`` failed the same way. " 2", an Arabic-Indic 3 and "1_0" became
    ranks 2, 3 and 10. None is a rank: each child is a worker of the shell."""
    out = tmp_path / "out"
    values = ["99999999999999999999", " 2", "\u0663", "1_0"]
    job = " ".join(f"RANK='{v}' sleep 2 &" for v in values) + " wait"
    done = _memprobe("record", "-o", str(out), "--", "sh", "-c", job)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    for name in ("samples.parquet", "summary.json", "report.html"):
        assert (out / name).is_file(), name
    samples = pd.read_parquet(out / "samples.parquet")
    sleeps = samples[samples["kind"] == "exec"]
    assert sleeps["pid"].nunique() == len(values)
    assert set(sleeps["rank"].dropna().astype(int)) == {-1}
    roles = {r["role"] for r in json.loads((out / "summary.json").read_text())["runs"][0]["processes"]}
    assert roles == {"main", "worker 0", "worker 1", "worker 2", "worker 3"}
    again = _memprobe("report", str(out))
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
