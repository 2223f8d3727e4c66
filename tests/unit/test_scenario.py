"""Scenario files: every mistake stops before anything runs, with a message naming the file,
the key, the bad value and what is allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from memprobe.errors import UsageError
from memprobe.scenario import (
    BACKENDS,
    MODES,
    SINGLE,
    RunSpec,
    load_scenario,
    parse_scenario,
    with_overrides,
)

REPO = Path(__file__).resolve().parents[2]
PATH = "scenarios/mine.yaml"

GOOD = """\
name: mine
description: a test
dataset: {records: 1000, floats: 3, seed: 7}
backends: [list, arrow]
modes: [fork, thread]
workers: [0, 2]
loader: {batch_size: 32, epochs: 2, shuffle: false, prefetch_factor: 3, items: 500}
sampling: {interval_s: 0.2, pss_cpu_budget: 0.02, pss_min_interval_s: 0.5}
verdict: {growth_threshold_mb: 40}
expect:
  - {backend: list, mode: fork, verdict: growing}
  - {backend: arrow, verdict: flat}
timeout_s: 30
"""


def _error(text: str, path: str = PATH) -> str:
    with pytest.raises(UsageError) as info:
        parse_scenario(text, path)
    assert info.value.exit_code == 2
    return str(info.value)


# -- good files --------------------------------------------------------------------------------

def test_good_scenario_expands_to_the_matrix() -> None:
    s = parse_scenario(GOOD, PATH)
    assert s.name == "mine" and s.description == "a test"
    assert (s.dataset.records, s.dataset.floats, s.dataset.seed) == (1000, 3, 7)
    assert s.loader.batch_size == 32 and s.loader.items == 500 and s.loader.shuffle is False
    assert s.sampling.interval_s == 0.2 and s.verdict.growth_threshold_mb == 40.0
    assert s.timeout_s == 30.0
    ids = [r.run_id for r in s.runs()]
    # workers: 0 runs once per backend (no mode), workers: 2 once per mode.
    assert ids == ["list-single-w0", "list-fork-w2", "list-thread-w2",
                   "arrow-single-w0", "arrow-fork-w2", "arrow-thread-w2"]
    runs = {r.run_id: r for r in s.runs()}
    assert runs["list-single-w0"].mode == SINGLE and runs["list-single-w0"].workers == 0
    assert runs["list-fork-w2"].expect == "growing"
    assert runs["list-thread-w2"].expect is None  # no entry matches list x thread
    assert runs["arrow-thread-w2"].expect == "flat" and runs["arrow-single-w0"].expect == "flat"
    assert all(r.timeout_s == 30.0 and r.loader.batch_size == 32 for r in s.runs())


def test_later_expectation_wins() -> None:
    s = parse_scenario("backends: [list]\nmodes: [fork]\nworkers: [2]\nexpect:\n"
                       "  - {verdict: growing}\n  - {backend: list, mode: fork, verdict: flat}\n", PATH)
    assert [r.expect for r in s.runs()] == ["flat"]


def test_name_defaults_to_file_stem_and_scalars_become_lists() -> None:
    s = parse_scenario("backends: numpy\nmodes: spawn\nworkers: 3\n", "dir/lovely.yaml")
    assert s.name == "lovely"
    assert [r.run_id for r in s.runs()] == ["numpy-spawn-w3"]


def test_runspec_round_trips_through_json_dict() -> None:
    import json

    spec = parse_scenario(GOOD, PATH).runs()[1]
    again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec


def test_shipped_scenarios_are_valid() -> None:
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        s = load_scenario(path)
        assert s.runs(), path


def test_quick_override_replaces_only_given_fields() -> None:
    s = parse_scenario(GOOD, PATH)
    t = with_overrides(s, timeout_s=5.0, dataset=None)
    assert t.timeout_s == 5.0 and t.dataset == s.dataset


# -- mistakes ----------------------------------------------------------------------------------

def test_unknown_top_level_key() -> None:
    msg = _error("name: x\nbackend: [list]\n")
    assert PATH in msg and "'backend'" in msg
    assert "backends" in msg and "modes" in msg  # the allowed keys


def test_unknown_nested_key() -> None:
    msg = _error("dataset: {records: 10, recrods: 5}\n")
    assert PATH in msg and "dataset.recrods" in msg
    assert "records" in msg and "floats" in msg and "seed" in msg


def test_unknown_nested_key_in_loader() -> None:
    msg = _error("loader: {batchsize: 10}\n")
    assert "loader.batchsize" in msg and "batch_size" in msg


@pytest.mark.parametrize("text, key, bad, allowed", [
    ("dataset: {records: many}\n", "dataset.records", "'many'", "integer"),
    ("dataset: {records: 0}\n", "dataset.records", "0", ">= 1"),
    ("dataset: {records: 2.5}\n", "dataset.records", "2.5", "integer"),
    ("loader: {shuffle: 1}\n", "loader.shuffle", "1", "true or false"),
    ("loader: {batch_size: true}\n", "loader.batch_size", "True", "integer"),
    ("loader: 5\n", "loader", "5", "batch_size"),
    ("sampling: {interval_s: fast}\n", "sampling.interval_s", "'fast'", "number"),
    ("workers: [2, -1]\n", "workers", "-1", ">= 0"),
    ("timeout_s: 0.5\n", "timeout_s", "0.5", ">= 1"),
    ("name: 5\n", "name", "5", "string"),
])
def test_wrong_type_or_range(text: str, key: str, bad: str, allowed: str) -> None:
    msg = _error(text)
    assert PATH in msg and f"'{key}'" in msg and bad in msg and allowed in msg


def test_unknown_mode_names_the_value_and_the_allowed_modes() -> None:
    msg = _error("modes: [fork, vfork]\n")
    assert PATH in msg and "'modes'" in msg and "'vfork'" in msg
    for mode in MODES:
        assert mode in msg


def test_unknown_backend_names_the_value_and_the_allowed_backends() -> None:
    msg = _error("backends: parquet\n")
    assert PATH in msg and "'backends'" in msg and "'parquet'" in msg
    for backend in BACKENDS:
        assert backend in msg


def test_empty_lists_are_rejected() -> None:
    assert "'modes'" in _error("modes: []\n")
    assert "'workers'" in _error("workers: []\n")


@pytest.mark.parametrize("text, key, bad, allowed", [
    ("expect: [{backend: list, verdict: shrinking}]\n", "expect[0].verdict", "'shrinking'", "flat, growing"),
    ("expect: [{backend: list}]\n", "expect[0].verdict", "None", "flat, growing"),
    ("expect: [{verdict: flat}, {mode: fork2, verdict: flat}]\n", "expect[1].mode", "'fork2'", "forkserver"),
    ("expect: [{backend: lists, verdict: flat}]\n", "expect[0].backend", "'lists'", "numpy"),
    ("expect: [{verdict: [flat, growing]}]\n", "expect[0].verdict", "growing", "exactly one"),
    ("expect: {backend: list}\n", "expect", "{'backend': 'list'}", "a list"),
])
def test_bad_expect_entry(text: str, key: str, bad: str, allowed: str) -> None:
    msg = _error(text)
    assert PATH in msg and f"'{key}'" in msg and bad in msg and allowed in msg


def test_unknown_key_in_expect_entry() -> None:
    msg = _error("expect: [{backend: list, verdict: flat, mod: fork}]\n")
    assert "expect[0].mod" in msg and "backend, mode, verdict" in msg


def test_invalid_yaml_names_the_file_and_the_line() -> None:
    msg = _error("name: x\nmodes: [fork\n")
    assert PATH in msg and "YAML" in msg and "line" in msg


def test_invalid_yaml_points_at_the_line_and_column_of_the_problem() -> None:
    msg = _error("name: x\n  bad: [\n")
    assert msg == f"{PATH}: line 2, column 6: not valid YAML: mapping values are not allowed here"


def test_empty_file() -> None:
    msg = _error("")
    assert PATH in msg and "empty" in msg


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(UsageError) as info:
        load_scenario(missing)
    assert str(missing) in str(info.value) and "no such" in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        load_scenario(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_load_scenario_reports_the_real_path(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("modes: [fork, threads]\n")
    with pytest.raises(UsageError) as info:
        load_scenario(f)
    assert str(f) in str(info.value) and "'threads'" in str(info.value)
