"""`memprobe cure` end to end on a small list-of-dicts dataset (cure_datasets.py, imported by name
by the runs' processes): the dataset as it is grows under fork, its SharedList variant stays flat,
and the change to make is printed; a factory that raises exits 2 in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import Memprobe

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow


def _cure(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memprobe", "cure", *args, "-o", str(out)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _row(stdout: str, variant: str) -> str:
    """The table's row for ``variant`` (its verdict last)."""
    return next(line for line in stdout.splitlines() if line.startswith(f"{variant} "))


def test_cure_shows_the_shared_list_flat_where_the_list_grows(tmp_path: Path) -> None:
    # 200,000 records, each worker reading half of them: measured (2 cores, loaded) each worker of
    # the list grew +37.8 MB, of the SharedList +0.5 MB: a 10 MB threshold tells them apart.
    r = _cure("cure_datasets:annotations", "--threshold", "10", "--batch-size", "256", out=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert _row(r.stdout, "as is (fork)").endswith("growing"), r.stdout
    assert _row(r.stdout, "SharedList / Arrow (fork)").endswith("flat"), r.stdout
    assert "self.records: list of 200,000 dict -> memprobe.SharedList" in r.stdout
    assert "    self.records = memprobe.SharedList(self.records)" in r.stdout
    for variant in ("as-is", "converted", "gc-freeze", "threads", "spawn"):
        assert (tmp_path / "c" / f"r1-{variant}" / "summary.json").is_file()


def test_a_factory_that_raises_exits_2_in_one_line(tmp_path: Path) -> None:
    # `memprobe cure` called in this process (its run of the dataset as it is still a process
    # of its own, where the factory raises): a process for the command would add only its start.
    r = Memprobe(HERE).inline(
        "cure",
        "cure_datasets:broken",
        "--kwargs",
        '{"split": "trian"}',
        "-o",
        tmp_path / "b",
        timeout=600,
    )
    assert r.code == 2
    errors = [line for line in r.err.splitlines() if line.startswith("memprobe: error:")]
    expected = (
        "memprobe: error: dataset factory 'cure_datasets:broken' raised ValueError: "
        "no annotations for split 'trian'; at cure_datasets.py:43 in broken "
        '(raise ValueError(f"no annotations for split {split!r}")) '
        f"(results: {tmp_path / 'b' / 'r1-as-is'}); no other variant was run"
    )
    assert errors == [expected], r.err
    assert "Traceback" not in r.err and r.out == ""
    assert r.left == []


def test_a_dataset_that_relies_on_its_list_fails_in_the_converted_variant_and_says_why(
    tmp_path: Path,
) -> None:
    # The two variants the test reads (--only): the other three are the first test's.
    r = _cure("cure_datasets:needs_a_list", "--items", "500", "--only", "as-is,converted", out=tmp_path / "n")
    assert r.returncode == 0, r.stderr
    row = _row(r.stdout, "SharedList / Arrow (fork)")
    assert "failed: AttributeError" in row and "'SharedList' object has no attribute 'append'" in row, (
        r.stdout
    )
    assert _row(r.stdout, "as is (fork)").endswith("flat"), r.stdout
    assert "    self.records = memprobe.SharedList(self.records)" not in r.stdout
    assert [v for v in ("gc.freeze() (fork)", "threads", "spawn (as is)") if f"\n{v} " in r.stdout] == []
    assert sorted(p.name for p in (tmp_path / "n").iterdir() if p.is_dir()) == ["r1-as-is", "r1-converted"]
