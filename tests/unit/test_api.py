"""ProfileResult.assert_flat / assert_ok: what passes, and what a failure says (no run needed;
tests/integration/test_pytest_plugin.py checks the same through pytest on real runs)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from memprobe.core.errors import UsageError
from memprobe.core.summary import RunSummary
from memprobe.run.api import ProfileResult, WorkerGrowth, factory_ref, process_kind, profile, unwrap_partial


def _summary(**changes: object) -> RunSummary:
    fields: dict = {
        "run_id": "build-fork-w2",
        "backend": "build",
        "mode": "fork",
        "workers": 2,
        "status": "ok",
        "error": None,
        "items": 20_032,
        "items_per_s": 9000.0,
        "time_to_first_batch_s": 1.0,
        "duration_s": 5.0,
        "total_pss_start_mb": 300.0,
        "total_pss_peak_mb": 350.0,
        "total_pss_end_mb": 340.0,
        "sum_rss_peak_mb": 900.0,
        "rss_overcount_mb": 550.0,
        "worker_uss_start_mb": 9.0,
        "worker_uss_growth_mb": 20.0,
        "worker_uss_growth_max_mb": 42.0,
        "main_uss_growth_mb": 1.0,
        "growth_per_1k_items_per_worker_mb": 2.0,
        "growth_threshold_mb": 50.0,
        "verdict": "flat",
        "expectation": None,
        "expectation_met": None,
        "explanation": "",
        "sampler_cpu_share": 0.01,
    }
    fields.update(changes)
    return RunSummary(**fields)


def _result(
    workers: tuple[WorkerGrowth, ...], main: WorkerGrowth | None = None, **changes: object
) -> ProfileResult:
    return ProfileResult(summary=_summary(**changes), workers=workers, main=main, results_dir=Path("/r/x"))


W0 = WorkerGrowth(
    pid=2511,
    role="worker 0",
    uss_start_mb=9.4,
    uss_end_mb=51.4,
    growth_mb=42.0,
    kind="DataLoader worker, fork",
)
W1 = WorkerGrowth(
    pid=2517,
    role="worker 1",
    uss_start_mb=9.3,
    uss_end_mb=12.3,
    growth_mb=3.0,
    kind="DataLoader worker, fork",
)


def test_a_grown_worker_fails_with_a_headline_a_table_and_the_cause() -> None:
    with pytest.raises(AssertionError) as info:
        _result((W0, W1)).assert_flat(max_worker_growth_mb=5)
    lines = str(info.value).splitlines()
    assert lines[0] == (
        "worker 0 (DataLoader worker, fork; pid 2511) grew 42.0 MB over 20,032 items (fork, 2 workers, "
        "dataset build); limit 5 MB"
    )
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
    main = WorkerGrowth(
        pid=7,
        role="main",
        uss_start_mb=100.0,
        uss_end_mb=130.0,
        growth_mb=30.0,
        kind=process_kind("main", "thread", 2),
    )
    result = _result((), main, mode="thread")
    result.assert_flat(max_worker_growth_mb=30)
    with pytest.raises(
        AssertionError,
        match=r"^main \(main process, 2 worker threads; pid 7\) grew 30\.0 MB .*\(thread, 2 workers",
    ):
        result.assert_flat(max_worker_growth_mb=10)


def test_a_failed_run_or_no_window_fails_saying_so() -> None:
    with pytest.raises(AssertionError, match="memprobe run failed: dataset factory 'm:f' raised"):
        _result((W0,), status="failed", error="dataset factory 'm:f' raised OSError: gone").assert_flat()
    with pytest.raises(AssertionError, match="no memory samples in the iteration window"):
        _result(()).assert_flat()


def test_profile_rejects_a_bad_mode_before_running() -> None:
    with pytest.raises(UsageError, match="mode 'threads'; allowed: fork, spawn"):
        profile("m:f", mode="threads")


# -- what profile() can take: imported by name in the run's process, never pickled -----------------


def build(records: int = 10, *, floats: int = 4, seed: int = 0) -> list:
    return [{"id": i} for i in range(records)]


def build_many(*parts: int, scale: int = 1) -> list:
    return list(parts)


def build_kw(records: int = 10, **options: object) -> list:
    return [options] * records


class Builders:
    @classmethod
    def from_size(cls, records: int = 10) -> list:
        return [0] * records

    @staticmethod
    def plain(records: int = 10) -> list:
        return [0] * records

    def bound(self, records: int = 10) -> list:
        return [0] * records


def test_a_partial_is_its_function_with_its_arguments_as_keywords() -> None:
    func, kwargs = unwrap_partial(functools.partial(build, 500, floats=8), None)
    assert func is build and kwargs == {"records": 500, "floats": 8}
    assert factory_ref(func) == "test_api:build"
    # Keywords given to profile() win, as they would in a call of the partial.
    assert unwrap_partial(functools.partial(build, records=5, seed=1), {"seed": 2})[1] == {
        "records": 5,
        "seed": 2,
    }
    assert unwrap_partial(functools.partial(build_kw, 3, shuffle=True), None)[1] == {
        "records": 3,
        "shuffle": True,
    }
    assert unwrap_partial(build, {"records": 1}) == (build, {"records": 1})


def test_a_partial_that_cannot_travel_is_refused_saying_why() -> None:
    with pytest.raises(UsageError, match=r"positional arguments that go to \*parts have no name"):
        unwrap_partial(functools.partial(build_many, 1, 2), None)
    with pytest.raises(
        UsageError, match=r"argument 'records' is a set; the run's process gets arguments as JSON"
    ):
        unwrap_partial(functools.partial(build, {1, 2}), None)
    with pytest.raises(UsageError, match="its arguments do not fit the function"):
        unwrap_partial(functools.partial(build, 1, 2, 3), None)


def test_classmethods_and_staticmethods_are_importable() -> None:
    assert factory_ref(Builders.from_size) == "test_api:Builders.from_size"
    assert factory_ref(Builders.plain) == "test_api:Builders.plain"


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        (lambda: [1], "a lambda has no name to import it by"),
        (Builders().bound, r"a bound method carries its object \(Builders instance\)"),
        (functools.partial(build, 1), "profile\\(\\) unwraps a functools.partial"),
    ],
)
def test_what_cannot_be_imported_by_name_is_refused_in_words(factory: object, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        factory_ref(factory)


def test_local_functions_callable_objects_and_main_are_refused() -> None:
    def local() -> list:
        return []

    class Callable_:
        def __call__(self) -> list:
            return []

    with pytest.raises(UsageError, match="defined inside a function"):
        factory_ref(local)
    with pytest.raises(UsageError, match="object has no name to import it by"):
        factory_ref(Callable_())
    build.__module__ = "__main__"
    try:
        with pytest.raises(UsageError, match="defined in __main__, which the run's process cannot import"):
            factory_ref(build)
    finally:
        build.__module__ = __name__


def test_the_process_kind_in_words() -> None:
    assert process_kind("worker 1", "spawn", 2) == "DataLoader worker, spawn"
    assert process_kind("main", "torch-thread", 1) == "main process, 1 worker thread"
    assert process_kind("main", "single", 0) == "main process, no workers"


def test_profile_runs_a_partial_as_its_function_with_keywords(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = []
    monkeypatch.setattr("memprobe.run.api._execute", lambda spec, root: seen.append(spec))
    profile(functools.partial(build, 2_000, floats=8), kwargs={"seed": 3}, out=tmp_path)
    factory = seen[0].factory
    assert factory.factory == "test_api:build" and factory.name == "build"
    assert factory.kwargs == {"records": 2_000, "floats": 8, "seed": 3}


@pytest.mark.parametrize(
    "arguments, words",
    [
        ({"workers": 10000}, ["workers=10000", "at most", "per CPU", "no_limits=True"]),
        ({"workers": -1}, ["workers=-1", ">= 0"]),
        ({"batch_size": 0}, ["batch_size=0", ">= 1"]),
        ({"items": 0}, ["items=0", "None"]),
        ({"epochs": True}, ["epochs=True", "whole number"]),
        ({"timeout_s": float("nan")}, ["timeout_s=nan", "finite"]),
        ({"growth_threshold_mb": -5}, ["growth_threshold_mb=-5", ">= 0"]),
        ({"seed": 2**40}, ["seed=1099511627776", "4,294,967,295"]),
    ],
)
def test_profile_refuses_numbers_no_run_can_take_before_anything_runs(tmp_path, arguments, words) -> None:
    out = tmp_path / "out"
    with pytest.raises(UsageError) as caught:
        profile("memprobe.datasets.records:build", out=out, **arguments)
    assert all(w in str(caught.value) for w in words), str(caught.value)
    assert not out.exists()  # refused before anything was written
