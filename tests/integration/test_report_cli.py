"""`memprobe compare` as a user runs it: the page it writes, where, and its errors.

The folders here hold only a manifest (a session stopped before any run), so no loader runs;
the pages' contents from real runs are tested in tests/unit/test_report.py. The command runs
in-process (the ``cli`` fixture, tests/conftest.py) but where a closed pipe is what is tested.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memprobe.results.folder import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]


def results_folder(path: Path, scenario: str) -> Path:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "scenario": scenario,
                "status": "complete",
                "runs": [],
                "started": 1.0,
                "finished": 2.0,
                "environment": {},
            }
        )
    )
    return path


def test_compare_writes_into_b_by_default_and_to_o_when_given(cli, tmp_path: Path) -> None:
    a, b = results_folder(tmp_path / "before", "old"), results_folder(tmp_path / "after", "new")
    r = cli("compare", a, b)
    assert r.returncode == 0, r.stderr
    page = b / "compare.html"
    assert r.stdout.strip() == f"compare: {page}"
    html = page.read_text(encoding="utf-8")
    assert "A: before" in html and "B: after" in html and "No run of A has a partner in B" in html
    out = tmp_path / "pages" / "before-vs-after.html"
    assert cli("compare", a, b, "-o", out).returncode == 0 and out.exists()


def test_compare_of_a_folder_that_is_not_results_exits_2(cli, tmp_path: Path) -> None:
    a = results_folder(tmp_path / "before", "old")
    r = cli("compare", a, tmp_path / "typo")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{tmp_path / 'typo'}: not a memprobe results folder (no manifest.json)" in r.stderr
    assert not (tmp_path / "typo").exists()


def test_compare_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`memprobe compare A B | head -0`: the page is written and memprobe ends with 0, no
    BrokenPipeError (issue 23 item 11)."""
    import shutil

    v1 = REPO / "tests" / "data" / "results-v1" / "scenario"
    b = Path(shutil.copytree(v1, tmp_path / "b"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "memprobe", "compare", str(v1), str(b)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # what head -0 does: nothing will read what memprobe prints
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert (b / "compare.html").is_file()
