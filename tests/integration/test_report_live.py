"""``memprobe report DIR`` while ``memprobe record`` still writes DIR: the page so far, and the
recording undisturbed (it finishes its own folder, summary and page afterwards).

The job allocates 120 MB, says so, and waits for a file the test creates: no step of the test
depends on how fast the machine is."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

JOB = textwrap.dedent("""
    import os, sys, time
    held = bytearray(120 * 2**20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    print("allocated", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    print("job done", flush=True)
""")


def _wait_for(what: str, check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _samples(out: Path) -> list[dict]:
    """The run's samples written so far (a line being written is left for later)."""
    rows = []
    for path in (out / "runs").glob("*/samples.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def _sampled_rss_mb(out: Path) -> float:
    return max((r.get("rss_mb") or 0 for r in _samples(out)), default=0.0)


def test_report_of_a_live_recording_shows_it_so_far_and_the_recording_finishes_its_own(
    tmp_path: Path,
) -> None:
    script, go, out = tmp_path / "job.py", tmp_path / "go", tmp_path / "out"
    script.write_text(JOB)
    record = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memprobe",
            "record",
            "-o",
            str(out),
            "--",
            sys.executable,
            str(script),
            str(go),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert record.stdout is not None
        assert record.stdout.readline() == "allocated\n"
        _wait_for("a sample of the allocated job", lambda: _sampled_rss_mb(out) >= 120)

        mid = subprocess.run(
            [sys.executable, "-m", "memprobe", "report", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert mid.returncode == 0, mid.stderr
        assert "still being written by memprobe" in mid.stderr
        assert "still recording, as of" in mid.stdout and "Traceback" not in mid.stderr
        page = (out / "report.html").read_text()
        assert "Still recording, as of" in page and f"pid {record.pid} writes this folder" in page
        so_far = json.loads((out / "summary.json").read_text())
        assert so_far["status"] == "running" and so_far["runs"][0]["sum_rss_peak_mb"] >= 120
        # Nothing was moved or marked: the recorder's folder is as it left it.
        assert json.loads((out / "manifest.json").read_text())["status"] == "running"
        assert list(out.glob("*.parquet")) == [] and list((out / "runs").glob("*/samples.jsonl"))
        assert record.poll() is None
        rows_at_report = len(_samples(out))
    finally:
        go.touch()
    stdout, stderr = record.communicate(timeout=120)

    # The job's fate and output are its own; the recording finished its folder as if never read.
    assert record.returncode == 0, stderr
    assert stdout == "job done\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and "ended" not in manifest
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["runs"][0]["status"] == "ok"
    assert "Still recording" not in (out / "report.html").read_text()
    assert (out / "samples.parquet").exists() and not list((out / "runs").glob("*/samples.jsonl"))
    import pandas as pd

    assert len(pd.read_parquet(out / "samples.parquet")) > rows_at_report  # sampled on after the report
