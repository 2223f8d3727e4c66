"""`memprobe compare` and `memprobe report` as a user runs them: the page each writes, where,
what they write in the folders they read, and their errors.

The folders here hold only a manifest (a session stopped before any run), or are copies of the
version-1 folders (tests/data/results-v1), so no loader runs; the pages' contents from real runs
are tested in tests/unit/test_report.py. The command runs in-process (the ``cli`` fixture,
tests/conftest.py) but where a closed pipe or a read-only file system (a mount namespace of its
own, ``unshare``) is what is tested.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


V1 = REPO / "tests" / "data" / "results-v1"


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and when it was last written."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def killed_mid_run(run: Path) -> None:
    """A run's record as memprobe leaves it when killed while the run was going."""
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "status": "running"}))


def test_o_never_writes_the_page_over_a_file_of_a_folder_read(cli, tmp_path: Path) -> None:
    """`memprobe report N0 N1 -o N0/manifest.json`, `compare A B -o A/manifest.json`: refused in
    one line naming the folder and the file, exit 2, the folders untouched (before: the manifest
    replaced by HTML, exit 0, the folder unreadable). The same through a link to the folder; a
    page at a folder's top level is a page, and written."""
    import shutil

    n0, n1 = (Path(shutil.copytree(V1 / "record", tmp_path / f"node{k}")) for k in (0, 1))
    cli("report", n0)  # each finished and with its own page once, as a user's folders are
    cli("report", n1)
    (tmp_path / "link").symlink_to(n0)
    before = snapshot(tmp_path)
    for args in (
        ("report", n0, n1, "-o", n0 / "manifest.json"),
        ("report", n0, "-o", n0 / "runs" / "job" / "meta.json"),
        ("report", n1, n1, "-o", n0 / "runs" / "page.html"),  # a results folder not read
        ("report", n0, n1, "-o", tmp_path / "link" / "samples.parquet"),
        ("compare", n0, n1, "-o", n0 / "manifest.json"),
        ("compare", n1, n1, "-o", tmp_path / "link" / "summary.json"),
    ):
        r = cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        assert f"-o {args[-1]}: a file of the results folder {n0} (" in r.stderr, r.stderr
        assert "allowed: the path of an HTML file outside any results folder" in r.stderr
        assert snapshot(tmp_path) == before
    assert cli("report", n0, n1, "-o", n0 / "job.html").returncode == 0
    assert (n0 / "job.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert cli("compare", n0, n1, "-o", n1 / "vs.html").returncode == 0
    assert json.loads((n0 / "manifest.json").read_text())["kind"] == "record"


def test_o_into_a_new_folder_makes_it_and_o_a_folder_says_so(cli, tmp_path: Path) -> None:
    """`-o` into a folder that is not there yet: made, the page written (before, for a job:
    "its folder was deleted or moved while memprobe was writing"); `-o` a folder: "is a folder"
    (before: "free some space"). For one folder, a job's folders, and compare alike."""
    import shutil

    n0, n1 = (Path(shutil.copytree(V1 / "record", tmp_path / f"node{k}")) for k in (0, 1))
    for k, args in enumerate([("report", n0), ("report", n0, n1), ("compare", n0, n1)]):
        page = tmp_path / f"new{k}" / "deeper" / "page.html"
        r = cli(*args, "-o", page)
        assert r.returncode == 0, r.stderr
        assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        r = cli(*args, "-o", tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.startswith(
            f"memprobe: error: -o {tmp_path}: is a folder; allowed: the path of an HTML file"
        )
        assert "space" not in r.stderr


def test_report_o_of_one_folder_writes_the_page_there_and_only_reads_the_folder(cli, tmp_path: Path) -> None:
    """`memprobe report DIR -o PAGE`: the page at PAGE, nothing written in DIR (no summary.json,
    no report.html). A folder whose memprobe was killed (its manifest still says running, its rows
    in JSON lines) is shown interrupted and left as it was."""
    import shutil

    root = Path(shutil.copytree(V1 / "scenario", tmp_path / "run"))
    (root / "summary.json").unlink()
    manifest = json.loads((root / "manifest.json").read_text())
    manifest.update(status="running", finished=None, writer={"pid": 1, "start_ticks": 1, "boot_id": "gone"})
    (root / "manifest.json").write_text(json.dumps(manifest))
    killed_mid_run(root / "runs" / "list-fork-w2")
    before = snapshot(root)
    r = cli("report", root, "-o", tmp_path / "page.html")
    assert r.returncode == 0, r.stderr
    assert snapshot(root) == before
    assert (
        "ended before finishing (killed?): marked interrupted on the page; the folder is left as it was"
        in r.stderr
    )
    assert "list-fork-w2" in r.stdout and f"report: {tmp_path / 'page.html'}" in r.stdout
    assert "This session was interrupted" in (tmp_path / "page.html").read_text(encoding="utf-8")


def in_read_only(folder: Path, *args: object) -> subprocess.CompletedProcess:
    """``memprobe ARGS`` with ``folder`` mounted read-only over itself, in a user and mount
    namespace of its own (``unshare``; skipped where the kernel does not allow one)."""
    import shlex
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no user namespace here: {probe.stderr.decode(errors='replace').strip()}")
    d = shlex.quote(str(folder))
    command = " ".join(shlex.quote(str(a)) for a in (sys.executable, "-m", "memprobe", *args))
    script = f"mount --bind {d} {d} && mount -o remount,bind,ro {d} && exec {command}"
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_a_read_only_folder_is_reported_with_o_and_left_as_it_was(tmp_path: Path) -> None:
    """`memprobe report` of a folder on a read-only file system (before: OSError traceback):
    without -o, one line saying so and what to type, exit 2, nothing written; with -o, the page
    there. Its memprobe killed (status running): shown interrupted, the folder left as it was.
    A read-only node of a job whose memprobe was killed: reported, left as it was."""
    import shutil

    root = Path(shutil.copytree(V1 / "record", tmp_path / "job" / "node1"))
    (root / "summary.json").unlink()
    manifest = json.loads((root / "manifest.json").read_text())
    manifest.update(status="running", finished=None)
    (root / "manifest.json").write_text(json.dumps(manifest))
    killed_mid_run(root / "runs" / "job")
    shutil.copytree(V1 / "record", tmp_path / "job" / "node0")
    before = snapshot(root)

    done = in_read_only(root, "report", root)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == (
        f"memprobe: error: {root}: cannot be written (a read-only file system); nothing was changed. "
        f"memprobe report {root} -o PAGE.html writes its page elsewhere and only reads the folder"
    )
    done = in_read_only(root, "report", root, "-o", tmp_path / "page.html")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "marked interrupted on the page; the folder is left as it was" in done.stderr
    assert (tmp_path / "page.html").is_file()

    done = in_read_only(root, "report", tmp_path / "job")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "the folder is left as it was (a read-only file system)" in done.stderr
    assert "interrupted: reported up to then" in done.stdout
    assert (tmp_path / "job" / "report.html").is_file()
    assert snapshot(root) == before
