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


def test_compare_of_two_recordings_prints_their_figures_and_what_changed(cli, tmp_path: Path) -> None:
    """Issue 40: two `memprobe record` folders are compared as recordings, in the terminal too
    (a folder of an older version among them: version 1's recording)."""
    import shutil

    v1 = REPO / "tests" / "data" / "results-v1" / "record"
    b = Path(shutil.copytree(v1, tmp_path / "again"))
    r = cli("compare", v1, b)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "A: record: .venv/bin/python /tmp/results-fx/job.py"
    assert lines[1] == "B: again: .venv/bin/python /tmp/results-fx/job.py"
    assert any(line.startswith("total PSS peak ") and line.endswith("+0.0 MB (+0%)") for line in lines)
    assert lines[-2] == "what changed: Total PSS peak 22 MB → 22 MB (+0.0 MB, +0%); both flat."
    assert lines[-1] == f"compare: {b / 'compare.html'}"
    assert not any(line.startswith("items/s") for line in lines)  # counted, but too few for a rate
    assert "two recordings" in (b / "compare.html").read_text(encoding="utf-8")


def test_compare_of_a_recording_with_scenario_runs_is_refused_in_one_line(cli, tmp_path: Path) -> None:
    data = REPO / "tests" / "data" / "results-v1"
    out = tmp_path / "pages" / "compare.html"
    r = cli("compare", data / "record", data / "scenario", "-o", out)
    assert r.returncode == 2 and r.stdout == ""
    said = (
        f"memprobe: error: cannot compare {data / 'record'} (a recording, of memprobe record or watch) with "
        f"{data / 'scenario'} (scenario runs, of memprobe run or profile()): they measured different things; "
        "allowed: two recordings, or two folders of scenario runs"
    )
    assert r.stderr.strip().splitlines() == [said]
    assert not out.exists()
