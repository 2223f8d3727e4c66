"""ProfileResult.assert_flat / assert_ok: what passes, and what a failure says (no run needed;
tests/integration/test_pytest_plugin.py checks the same through pytest on real runs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from memprobe.analysis import RunSummary
from memprobe.api import ProfileResult, WorkerGrowth, profile


def _summary(**changes: object) -> RunSummary:
    fields: dict = dict(
        run_id="build-fork-w2", backend="build", mode="fork", workers=2, status="ok", error=None,
        items=20_032, items_per_s=9000.0, time_to_first_batch_s=1.0, duration_s=5.0,
        total_pss_start_mb=300.0, total_pss_peak_mb=350.0, total_pss_end_mb=340.0, sum_rss_peak_mb=900.0,
        rss_overcount_mb=550.0, worker_uss_start_mb=9.0, worker_uss_growth_mb=20.0,
        worker_uss_growth_max_mb=42.0, main_uss_growth_mb=1.0, growth_per_1k_items_per_worker_mb=2.0,
        growth_threshold_mb=50.0, verdict="flat", expectation=None, expectation_met=None, explanation="",
        sampler_cpu_share=0.01)
    fields.update(changes)
    return RunSummary(**fields)


def _result(workers: tuple[WorkerGrowth, ...], main: WorkerGrowth | None = None, **changes: object) -> ProfileResult:
    return ProfileResult(summary=_summary(**changes), workers=workers, main=main, results_dir=Path("/r/x"))


W0 = WorkerGrowth(pid=2511, role="worker 0", uss_start_mb=9.4, uss_end_mb=51.4, growth_mb=42.0)
W1 = WorkerGrowth(pid=2517, role="worker 1", uss_start_mb=9.3, uss_end_mb=12.3, growth_mb=3.0)


def test_a_grown_worker_fails_with_a_headline_a_table_and_the_cause() -> None:
    with pytest.raises(AssertionError) as info:
        _result((W0, W1)).assert_flat(max_worker_growth_mb=5)
    lines = str(info.value).splitlines()
    assert lines[0] == ("worker 0 (pid 2511) grew 42.0 MB over 20,032 items (fork, 2 workers, dataset build); "
                        "limit 5 MB")
    table = "\n".join(lines[1:5])
    assert "USS start" in table and "growth" in table
    over = [line for line in lines if "<-- over" in line]
    assert len(over) == 1 and "worker 0" in over[0] and "+42.0 MB" in over[0]
    assert any("worker 1" in line and "+3.0 MB" in line for line in lines)
    assert "copy-on-access" in str(info.value) and "results: /r/x" in lines[-1]


def test_workers_within_the_limit_pass_and_the_default_limit_is_the_threshold() -> None:
    _result((W0, W1)).assert_flat(max_worker_growth_mb=42.0)
    _result((W0, W1)).assert_flat()  # 50 MB
    with pytest.raises(AssertionError, match="limit 40 MB"):
        _result((W0, W1), growth_threshold_mb=40.0).assert_flat()


def test_thread_runs_check_the_main_process() -> None:
    main = WorkerGrowth(pid=7, role="main", uss_start_mb=100.0, uss_end_mb=130.0, growth_mb=30.0)
    result = _result((), main, mode="thread")
    result.assert_flat(max_worker_growth_mb=30)
    with pytest.raises(AssertionError, match=r"^main \(pid 7\) grew 30\.0 MB .*\(thread, 2 workers"):
        result.assert_flat(max_worker_growth_mb=10)


def test_a_failed_run_or_no_window_fails_saying_so() -> None:
    with pytest.raises(AssertionError, match="memprobe run failed: dataset factory 'm:f' raised"):
        _result((W0,), status="failed", error="dataset factory 'm:f' raised OSError: gone").assert_flat()
    with pytest.raises(AssertionError, match="no memory samples in the iteration window"):
        _result(()).assert_flat()


def test_profile_rejects_a_bad_mode_before_running() -> None:
    from memprobe.errors import UsageError

    with pytest.raises(UsageError, match="mode 'threads'; allowed: fork, spawn"):
        profile("m:f", mode="threads")
