"""pytest plugin: the ``memprobe`` fixture, so a test can assert that a dataset stays flat, or
that a short run of the training loop does::

    def test_my_dataset_stays_flat(memprobe):
        result = memprobe.profile(build_dataset, mode="fork", workers=2, items=20_000)
        result.assert_flat(max_worker_growth_mb=5)

    def test_training_loop_stays_flat(memprobe):
        result = memprobe.record(["python", "train.py", "--max-steps", "300"])
        result.assert_flat(max_main_growth_mb=20)

Registered through the ``pytest11`` entry point when memprobe is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


class MemprobeFixture:
    """``profile`` and ``record`` bound to the test's temporary folder, so results stay inspectable."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._count = 0

    def profile(self, factory: Callable[..., Any] | str, **options: Any) -> Any:
        # pytest loads this plugin in every session: pandas and the runner only when a test profiles.
        from memprobe.run.api import profile

        self._count += 1
        options.setdefault("out", self.base / f"memprobe-{self._count}")
        return profile(factory, **options)

    def record(self, argv: list[str], **options: Any) -> Any:
        """``memprobe.record_command(argv, ...)``: the command recorded in a process of its own."""
        from memprobe.record.api import record_command

        self._count += 1
        options.setdefault("out", self.base / f"memprobe-{self._count}")
        return record_command(argv, **options)


@pytest.fixture
def memprobe(tmp_path: Path) -> MemprobeFixture:
    """Profile a dataset's DataLoader memory in a fresh process (``memprobe.profile(...)``), or
    record a command's (``memprobe.record([...])``)."""
    return MemprobeFixture(tmp_path)
