"""memprobe.mark() across processes: forked workers and threads write whole lines, and the
package attribute needs neither torch nor pandas (a fresh interpreter checks it)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from memprobe.record.marks import ENV, mark

pytestmark = pytest.mark.usefixtures("fresh_marks")


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()]


def test_memprobe_mark_is_a_plain_attribute_without_torch() -> None:
    """The README spelling, memprobe.mark(n), must not go through the package's lazy
    __getattr__ on every call (that costs microseconds per batch), nor import torch."""
    import subprocess
    import sys

    code = (
        "import sys, memprobe; assert 'mark' in vars(memprobe); "
        "assert memprobe.mark is sys.modules['memprobe.record.marks'].mark; "
        "assert 'torch' not in sys.modules and 'pandas' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_threads_and_forked_workers_write_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "marks.txt"
    monkeypatch.setenv(ENV, str(path))
    mark(1)  # opened in the parent: forked children share the O_APPEND descriptor

    def burst() -> None:
        for _ in range(500):
            mark(2)

    threads = [threading.Thread(target=burst) for _ in range(4)]
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:  # a child that marks, like a DataLoader worker
            try:
                for _ in range(500):
                    mark(3)
            finally:
                os._exit(0)
        kids.append(pid)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for pid in kids:
        os.waitpid(pid, 0)
    rows = _lines(path)
    assert len(rows) == 1 + 4 * 500 + 2 * 500
    assert all(len(r) == 3 for r in rows)
    assert sum(int(r[1]) for r in rows) == 1 + 4 * 500 * 2 + 2 * 500 * 3
    assert {r[2] for r in rows} == {str(os.getpid()), *map(str, kids)}
