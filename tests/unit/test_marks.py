"""memprobe.mark(): a no-op without MEMPROBE_MARK_FILE, whole lines with it, never an exception;
and the reading side (memprobe.record.mark_reader.MarkReader)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import memprobe
from memprobe.record import marks as mark_module
from memprobe.record.mark_reader import MarkReader
from memprobe.record.marks import ENV, mark

pytestmark = pytest.mark.usefixtures("fresh_marks")


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()]


def test_without_the_variable_mark_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert mark(10) is None
    assert mark_module._fd == mark_module._OFF
    monkeypatch.setenv(ENV, str(tmp_path / "late.txt"))  # read once: setting it later changes nothing
    mark(5)
    assert list(tmp_path.iterdir()) == []
    t0 = time.thread_time()  # CPU time: what a call costs, not how long a loaded machine took
    for _ in range(100_000):
        mark(1)
    assert time.thread_time() - t0 < 0.5  # ~0.1 µs a call


def test_with_the_variable_each_call_appends_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "marks.txt"
    monkeypatch.setenv(ENV, str(path))
    before = time.monotonic()
    mark(256)
    mark(7)
    memprobe.mark(3)  # the package attribute is the function, also after memprobe.record.marks was imported
    memprobe.mark(4)
    rows = _lines(path)
    assert [r[1] for r in rows] == ["256", "7", "3", "4"]
    assert all(r[2] == str(os.getpid()) for r in rows)
    assert before <= float(rows[0][0]) <= time.monotonic()


def test_mark_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))  # a directory: cannot be opened for writing
    mark(1)
    assert mark_module._fd == mark_module._OFF
    mark_module._reset()
    monkeypatch.setenv(ENV, str(tmp_path / "m.txt"))
    mark(object())  # not a number: turns itself off, no exception
    assert mark_module._fd == mark_module._OFF
    mark(1)


def test_mark_reader_sums_marks_and_keeps_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "marks.txt"
    t0 = time.monotonic()
    reader = MarkReader(path, t0)
    assert reader.poll() == []  # no file yet
    path.write_text(f"{t0 + 1:.6f} 10 1\n{t0 + 2:.6f} 20 2\n{t0 + 3:.6f} 3")
    (row,) = reader.poll()
    assert row["items"] == 30 and row["batches"] == 2 and row["t"] == pytest.approx(2.0)
    with open(path, "a") as f:
        f.write("0 1\ngarbage\n")
    (row,) = reader.poll()
    assert row["items"] == 60 and row["batches"] == 3 and row["t"] == pytest.approx(3.0)
    assert reader.first_t == pytest.approx(1.0)
    assert reader.poll() == []
    late = MarkReader(path, t0, from_end=True)  # watch: only marks written from now on
    assert late.poll() == []


def test_mark_reader_counts_and_names_lines_that_are_not_marks(tmp_path: Path) -> None:
    """Garbage, a count that is not a whole number >= 0, a time that is not finite (NaN would
    become a time no table joins on): ignored, counted and named; the marks around them count."""
    path = tmp_path / "marks.txt"
    t0 = time.monotonic()
    path.write_text(
        f"{t0 + 1:.6f} 10 1\nnot a mark\n1.0 lots 1\nnan 3 1\ninf 3 1\n1.0 -4 1\n\n{t0 + 2:.6f} 5 1\n"
    )
    reader = MarkReader(path, t0)
    (row,) = reader.poll()
    assert row["items"] == 15 and row["batches"] == 2 and row["t"] == pytest.approx(2.0)
    assert reader.ignored == 5
    note = reader.note()
    assert note is not None and "5 line(s) ignored that are not marks" in note and "'not a mark'" in note
    assert MarkReader(tmp_path / "none.txt", t0).note() is None
