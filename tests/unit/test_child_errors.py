"""A run's process reports its error even when a dead worker's SIGCHLD comes while it reports."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from memprobe.run import child

DEAD_WORKER = "DataLoader worker (pid 381) is killed by signal: Killed. "


@pytest.fixture
def torch_sigchld():
    """A SIGCHLD handler that behaves as torch's (raises for a dead worker on every SIGCHLD) and is
    named as torch's: the real one is installed once per process, for good."""
    calls: list[int] = []

    def handler(signum: int, frame: object) -> None:
        calls.append(signum)
        raise RuntimeError(DEAD_WORKER)

    handler.__module__ = child.TORCH_SIGCHLD_MODULE
    previous = signal.signal(signal.SIGCHLD, handler)
    try:
        yield calls
    finally:
        signal.signal(signal.SIGCHLD, previous)


def test_a_worker_s_sigchld_while_the_error_is_reported_does_not_lose_the_report(
    torch_sigchld: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen in CI: the transport saw a killed spawn worker first (a connection reset), its SIGCHLD
    # was handled inside the reporting, torch's handler raised there, and the run ended with
    # exit code 1 and no error at all.
    # No loader here to name a dead worker: no wait for one (a unit test does not sleep).
    monkeypatch.setattr(child, "DEAD_WORKER_WAIT_S", 0.0)
    monkeypatch.setattr(child.time, "sleep", lambda seconds: None)
    child.keep_errors_reportable()
    sent: list[tuple[str, dict]] = []
    events = SimpleNamespace(send=lambda event, **fields: sent.append((event, fields)))
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except BaseException as exc:  # as the run's process catches it
        signal.raise_signal(signal.SIGCHLD)  # the dead worker's signal, handled a moment later
        child._report_error(events, exc)
    assert [(event, fields["type"]) for event, fields in sent] == [("error", "ConnectionResetError")]
    assert "Connection reset by peer" in sent[0][1]["message"]


def test_a_dead_worker_still_fails_the_loop_at_once_as_under_torch(torch_sigchld: list[int]) -> None:
    child.keep_errors_reportable()
    with pytest.raises(RuntimeError, match="killed by signal"):
        signal.raise_signal(signal.SIGCHLD)
    assert torch_sigchld == [signal.SIGCHLD]


def test_a_dataset_s_own_sigchld_handler_is_left_as_it_is() -> None:
    def mine(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGCHLD, mine)
    try:
        child.keep_errors_reportable()
        assert signal.getsignal(signal.SIGCHLD) is mine
    finally:
        signal.signal(signal.SIGCHLD, previous)
