"""Every ThreadDataLoader test ends with no worker thread left running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from threadtest import wait_no_worker_threads


@pytest.fixture(autouse=True)
def no_leftover_worker_threads() -> Iterator[None]:
    yield
    alive = wait_no_worker_threads()
    assert not alive, f"worker threads still running: {[t.name for t in alive]}"
