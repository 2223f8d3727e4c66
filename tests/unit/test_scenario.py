"""Scenario files: every mistake stops before anything runs, with a message naming the file,
the key, the bad value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from memprobe.core.errors import UsageError
from memprobe.run.scenario import (
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
    assert ids == [
        "list-single-w0",
        "list-fork-w2",
        "list-thread-w2",
        "arrow-single-w0",
        "arrow-fork-w2",
        "arrow-thread-w2",
    ]
    runs = {r.run_id: r for r in s.runs()}
    assert runs["list-single-w0"].mode == SINGLE and runs["list-single-w0"].workers == 0
    assert runs["list-fork-w2"].expect == "growing"
    assert runs["list-thread-w2"].expect is None  # no entry matches list x thread
    assert runs["arrow-thread-w2"].expect == "flat" and runs["arrow-single-w0"].expect == "flat"
    assert all(r.timeout_s == 30.0 and r.loader.batch_size == 32 for r in s.runs())


def test_later_expectation_wins() -> None:
    s = parse_scenario(
        "backends: [list]\nmodes: [fork]\nworkers: [2]\nexpect:\n"
        "  - {verdict: growing}\n  - {backend: list, mode: fork, verdict: flat}\n",
        PATH,
    )
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


@pytest.mark.parametrize(
    "text, key, bad, allowed",
    [
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
    ],
)
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


@pytest.mark.parametrize(
    "text, key, bad, allowed",
    [
        (
            "expect: [{backend: list, verdict: shrinking}]\n",
            "expect[0].verdict",
            "'shrinking'",
            "flat, growing",
        ),
        ("expect: [{backend: list}]\n", "expect[0].verdict", "None", "flat, growing"),
        (
            "expect: [{verdict: flat}, {mode: fork2, verdict: flat}]\n",
            "expect[1].mode",
            "'fork2'",
            "forkserver",
        ),
        ("expect: [{backend: lists, verdict: flat}]\n", "expect[0].backend", "'lists'", "numpy"),
        ("expect: [{verdict: [flat, growing]}]\n", "expect[0].verdict", "growing", "exactly one"),
        ("expect: {backend: list}\n", "expect", "{'backend': 'list'}", "a list"),
    ],
)
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


# -- hostile input (issue 13) ------------------------------------------------------------------


def _bomb(levels: int) -> str:
    nodes = ['&a0 "lolololololololololololololololololol"']
    nodes += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return f"description: [{', '.join(nodes)}]\n"


def test_aliases_that_expand_past_the_limit_are_refused_naming_the_key() -> None:
    msg = _error(_bomb(8))  # 1.3 KB of text, 351 MB once expanded
    assert "key 'description'" in msg and "more than 1,000,000 characters" in msg
    assert len(msg) < 300


def test_an_alias_bomb_under_any_key_is_refused_naming_that_key() -> None:
    from memprobe.run.scenario import _TOP_KEYS

    for key in _TOP_KEYS:
        msg = _error(_bomb(8).replace("description:", f"{key}:"))
        assert f"key '{key}'" in msg and "aliases expand" in msg


def test_aliases_within_the_limit_are_fine() -> None:
    s = parse_scenario("modes: &m [fork, thread]\nexpect: [{mode: *m, verdict: flat}]\n", PATH)
    assert s.modes == ("fork", "thread") and s.expect[0].modes == ("fork", "thread")
    assert parse_scenario(_bomb(3), PATH).description.startswith("[")  # 729 references, ~30 KB expanded


def test_a_recursive_alias_is_refused() -> None:
    msg = _error("modes: &m [fork, *m]\n")
    assert "line 1" in msg and "'modes[1]'" in msg and "recursive alias" in msg


def test_a_key_given_twice_is_refused_with_both_lines() -> None:
    msg = _error("name: a\nloader:\n  batch_size: 8\n  epochs: 2\n  batch_size: 64\n")
    assert "line 5" in msg and "'loader.batch_size' appears twice" in msg and "first on line 3" in msg
    assert "appears twice" in _error("loader: {epochs: 1, epochs: 2}\n")


def test_merge_keys_may_be_overridden() -> None:
    s = parse_scenario("name: m\nloader: {<<: {batch_size: 8, epochs: 2}, epochs: 3}\n", PATH)
    assert (s.loader.batch_size, s.loader.epochs) == (8, 3)


def test_deep_nesting_is_refused() -> None:
    assert "nested" in _error("description: " + "[" * 60 + "]" * 60 + "\n")
    assert "nested too deeply" in _error("description: " + "[" * 5000 + "]" * 5000 + "\n")


@pytest.mark.parametrize(
    "text, key",
    [
        ("timeout_s: .nan\n", "timeout_s"),
        ("timeout_s: .inf\n", "timeout_s"),
        ("sampling: {interval_s: .inf}\n", "sampling.interval_s"),
        ("verdict: {growth_threshold_mb: .nan}\n", "verdict.growth_threshold_mb"),
        ("dataset: {seed: 4294967296}\n", "dataset.seed"),
        ("sampling: {pss_cpu_budget: 2}\n", "sampling.pss_cpu_budget"),
    ],
)
def test_numbers_must_be_finite_and_in_range(text: str, key: str) -> None:
    assert f"'{key}'" in _error(text)


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".", "x" * 101, "tab\there"])
def test_a_name_must_fit_a_folder_name(name: str) -> None:
    assert "'name'" in _error(f"name: {name!r}\n".replace("'", '"'))


def test_error_messages_show_a_short_value() -> None:
    msg = _error(f"modes: [{'x' * 100_000}]\n")
    assert "'modes'" in msg and len(msg) < 400 and "characters)" in msg


def test_factories_import_from_the_scenario_folder_then_the_current_directory(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = parse_scenario("dataset: {factory: 'mymod:build'}\n", "elsewhere/s.yaml", base_dir="/elsewhere")
    assert s.sys_path == ("/elsewhere", str(tmp_path))
    assert all(r.sys_path == s.sys_path for r in s.runs())


def test_load_scenario_refuses_what_is_not_a_small_utf8_file(tmp_path: Path) -> None:
    import os

    cases = {}
    (tmp_path / "bin.yaml").write_bytes(b"\x89PNG\r\n\x1a\n")
    cases["bin.yaml"] = "byte 0x89 at offset 0"
    (tmp_path / "big.yaml").write_bytes(b"#" * 1_000_001)
    cases["big.yaml"] = "larger than 1,000,000 bytes"
    os.mkfifo(tmp_path / "fifo.yaml")
    cases["fifo.yaml"] = "a FIFO"
    for name, words in cases.items():
        with pytest.raises(UsageError) as info:
            load_scenario(tmp_path / name)
        assert name in str(info.value) and words in str(info.value)
    with pytest.raises(UsageError) as info:
        load_scenario("/dev/null")
    assert "a character device" in str(info.value)


def test_load_scenario_reads_a_bom_and_names_a_path_that_is_not_utf8(tmp_path: Path) -> None:
    import os

    (tmp_path / "bom.yaml").write_bytes("\ufeffname: bom\n".encode())
    assert load_scenario(tmp_path / "bom.yaml").name == "bom"
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/\xff.yaml")
    with open(odd, "w") as f:
        f.write("modes: [threads]\n")
    with pytest.raises(UsageError) as info:
        load_scenario(odd)
    assert "\\xff.yaml" in str(info.value)  # the byte shown escaped
    str(info.value).encode("utf-8")  # printable: no lone surrogate


# -- limits of the machine ---------------------------------------------------------------------

from memprobe.run.limits import Machine, check_limits, planned_memory_mb  # noqa: E402

SMALL_MACHINE = Machine(cpus=2, memory_mb=24_000)


def test_workers_above_the_machine_are_refused_unless_lifted() -> None:
    assert SMALL_MACHINE.max_workers == 16
    assert Machine(cpus=64, memory_mb=2048).max_workers == 8  # memory bounds it: 256 MB each
    s = parse_scenario("workers: [2, 10000]\ndataset: {records: 100000}\nloader: {batch_size: 1}\n", PATH)
    with pytest.raises(UsageError) as info:
        check_limits(s, SMALL_MACHINE)
    msg = str(info.value)
    assert (
        PATH in msg and "'workers'" in msg and "10000" in msg and "at most 16" in msg and "--no-limits" in msg
    )
    check_limits(parse_scenario("workers: [16]\ndataset: {records: 100000}\n", PATH), SMALL_MACHINE)
    check_limits(s, SMALL_MACHINE, lifted=True)


def test_a_dataset_whose_copies_do_not_fit_is_refused_unless_lifted() -> None:
    s = parse_scenario("dataset: {records: 20000000}\nworkers: [2]\n", PATH)
    assert planned_memory_mb(s) > SMALL_MACHINE.memory_mb * 0.8  # 650 B x 3 copies x 20M
    with pytest.raises(UsageError) as info:
        check_limits(s, SMALL_MACHINE)
    assert "'dataset.records'" in str(info.value) and "20,000,000" in str(info.value)
    check_limits(s, SMALL_MACHINE, lifted=True)
    default = load_scenario(REPO / "scenarios" / "lists_vs_arrays.yaml")
    check_limits(default, SMALL_MACHINE)


def test_decode_counts_encoded_images_and_decoded_batches() -> None:
    s = parse_scenario("decode: {images: 100, width: 8192, height: 8192}\nloader: {batch_size: 50}\n", PATH)
    with pytest.raises(UsageError) as info:
        check_limits(s, SMALL_MACHINE)
    assert "'decode.images'" in str(info.value)


def test_a_batch_size_leaving_a_worker_without_a_batch_is_refused_even_when_lifted() -> None:
    # 100 items in batches of 34 make 3 batches (34, 34, 32): the fourth worker gets none.
    s = parse_scenario("dataset: {records: 100}\nworkers: [4]\nloader: {batch_size: 34}\n", PATH)
    for lifted in (False, True):
        with pytest.raises(UsageError) as info:
            check_limits(s, SMALL_MACHINE, lifted=lifted)
        assert "'loader.batch_size'" in str(info.value) and "at most 33" in str(info.value)
    check_limits(
        parse_scenario("dataset: {records: 100}\nworkers: [4]\nloader: {batch_size: 33}\n", PATH),
        SMALL_MACHINE,
    )
    s = parse_scenario("dataset: {records: 1000}\nloader: {batch_size: 64, items: 60}\n", PATH)
    with pytest.raises(UsageError):
        check_limits(s, SMALL_MACHINE)  # the item budget ends the epoch after one batch
    check_limits(
        parse_scenario("datasets: [{factory: 'm:f'}]\nloader: {batch_size: 100000}\n", PATH), SMALL_MACHINE
    )  # a user dataset's length is known only once built


def test_shipped_scenarios_are_within_the_limits_of_a_small_machine() -> None:
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        check_limits(load_scenario(path), SMALL_MACHINE)
