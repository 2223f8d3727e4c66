"""A page of a session so far is written only while the session runs, never over its own:
:meth:`ResultsFolder.write_while_running` and the lock :meth:`ResultsFolder.finish` takes."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

import pytest

from memprobe.probe.procfs import process_identity
from memprobe.report import session
from memprobe.results import folder as results


def _create(out: Path) -> results.ResultsFolder:
    return results.ResultsFolder.create(
        out,
        kind="record",
        name="n",
        description="d",
        environment={},
        runs=["a"],
        writer=process_identity(os.getpid()),
    )


def test_a_page_so_far_is_written_while_running_and_not_once_finished(tmp_path: Path) -> None:
    folder = _create(tmp_path / "out")
    written: list[str] = []
    assert folder.write_while_running(lambda: written.append("so far"))
    assert written == ["so far"]
    # Another process (the recorder) finished the folder: the reader's copy of the manifest is stale.
    results.ResultsFolder.open(tmp_path / "out").finish("complete")
    assert not folder.write_while_running(lambda: written.append("late"))
    assert written == ["so far"]


def test_finishing_waits_for_a_page_so_far_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder's status change waits for the lock the reader holds while it writes: a page
    so far is written before the session's own, never after (over) it."""
    folder = _create(tmp_path / "out")
    waiting = threading.Event()
    real_flock = fcntl.flock

    def flock(fd: int, op: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            waiting.set()  # the finishing thread is about to wait for the lock
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    finisher = threading.Thread(
        target=lambda: results.ResultsFolder.open(tmp_path / "out").finish("complete")
    )

    def write() -> None:
        finisher.start()
        waiting.wait()
        status = json.loads((tmp_path / "out" / "manifest.json").read_text())["status"]
        assert status == "running"  # it cannot change while the page is being written

    assert folder.write_while_running(write)
    finisher.join()
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["status"] == "complete"


def test_the_banner_of_a_session_seen_running_says_still_recording_as_of() -> None:
    manifest = {"status": "running", "runs": ["a"], "seen_running": {"as_of": 1795720035.5, "writer_pid": 42}}
    level, text = session.banner(manifest, [])
    assert level == "warn" and text.startswith("Still recording, as of 19:07:15 UTC (memprobe pid 42")
    # Without the reader's word that the writer runs, running may mean crashed: said as before.
    level, text = session.banner({"status": "running", "runs": ["a"]}, [])
    assert level == "error" and "still running or it crashed" in text
