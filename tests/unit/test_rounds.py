"""Repeated runs, one mechanism (memprobe/core/rounds.py): `memprobe run`'s `repeats` and
`memprobe cure`'s `--rounds` run in interleaved rounds, and a figure of the repeats is its
median with its spread."""

from __future__ import annotations

import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from memprobe.core.errors import UsageError
from memprobe.core.rounds import interleaved, median_of, spread
from memprobe.run import cure
from memprobe.run.scenario import parse_scenario

SWEEP = """\
name: sweep
backends: [list, arrow]
modes: [fork]
workers: [0, 2]
repeats: 3
"""


def test_interleaved_runs_every_item_each_round_before_the_next_round() -> None:
    assert list(interleaved(["a", "b"], 3)) == [(1, "a"), (1, "b"), (2, "a"), (2, "b"), (3, "a"), (3, "b")]


def test_a_scenarios_repeats_interleave_the_whole_matrix() -> None:
    ids = [r.run_id for r in parse_scenario(SWEEP, "s.yaml").runs()]
    matrix = ["list-single-w0", "list-fork-w2", "arrow-single-w0", "arrow-fork-w2"]
    assert ids == [f"{run}-r{r}" for r in (1, 2, 3) for run in matrix]


def test_one_repeat_keeps_the_run_ids_as_they_were() -> None:
    ids = [r.run_id for r in parse_scenario(SWEEP.replace("repeats: 3", "repeats: 1"), "s.yaml").runs()]
    assert ids == ["list-single-w0", "list-fork-w2", "arrow-single-w0", "arrow-fork-w2"]


@pytest.mark.parametrize("bad", ["0", "-2", "2.5", "many", "101"])
def test_a_bad_repeats_names_the_file_the_key_and_what_is_allowed(bad: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_scenario(SWEEP.replace("repeats: 3", f"repeats: {bad}"), "s.yaml")
    assert info.value.exit_code == 2
    assert "s.yaml: key 'repeats'" in str(info.value) and "integer >= 1 and <= 100" in str(info.value)


def test_the_repeats_flag_is_refused_out_of_range_before_anything_runs(tmp_path: Path) -> None:
    from memprobe.cli import _parser
    from memprobe.cli import run as run_cli

    path = tmp_path / "s.yaml"
    path.write_text(SWEEP)
    args = _parser().parse_args(["run", str(path), "--repeats", "0"])
    with pytest.raises(UsageError, match=r"--repeats: got 0; allowed: a number >= 1 and <= 100"):
        run_cli.main(args)


def test_cure_rounds_run_in_the_same_interleaved_order(tmp_path: Path, monkeypatch) -> None:
    """`memprobe cure --rounds 2`: round 1 runs every variant, then round 2."""
    import memprobe.run.api as api

    calls: list[str] = []

    def profile(ref, *, out, **kwargs):
        calls.append(Path(out).name)
        return SimpleNamespace(summary=SimpleNamespace(status="ok"))

    monkeypatch.setattr(api, "profile", profile)
    cure.run_variants("m:f", {}, tmp_path, rounds=2, only=("as-is", "gc-freeze", "threads"))
    assert calls == [f"r{r}-{v}" for r in (1, 2) for v in ("as-is", "gc-freeze", "threads")]


def test_spread_is_the_median_the_sample_std_and_the_range_of_the_known_values() -> None:
    values = [10.0, None, 14.0, 11.0, float("nan"), 20.0]
    s = spread(values)
    assert s is not None
    assert (s.n, s.median, s.min, s.max) == (4, 12.5, 10.0, 20.0)
    assert s.std == pytest.approx(statistics.stdev([10.0, 14.0, 11.0, 20.0]))
    assert spread([3.0]).std is None  # one value: no spread to state
    assert spread([None]) is None and median_of([]) is None and median_of([1.0, 5.0, 2.0]) == 2.0


def test_quick_keeps_fewer_and_shorter_repeats_of_a_repeated_scenario() -> None:
    """`memprobe run num_workers --quick`: the same matrix, 3 repeats of 20 batches; a scenario
    that is not repeated keeps its items (its quick look is a smaller dataset)."""
    from memprobe.cli.run import QUICK_BATCHES, QUICK_REPEATS, _quick
    from memprobe.run.scenario import load_scenario

    shipped = Path(__file__).resolve().parents[2] / "scenarios"
    full = load_scenario(shipped / "num_workers.yaml")
    quick = _quick(full)
    assert (full.repeats, full.loader.items) == (5, 6400)
    assert (quick.repeats, quick.loader.items) == (QUICK_REPEATS, QUICK_BATCHES * 64) == (3, 1280)
    assert [r.run_id for r in quick.runs()] == [
        r.run_id for r in full.runs() if not r.run_id.endswith(("-r4", "-r5"))
    ]
    user = load_scenario(shipped / "user_datasets.yaml")
    assert _quick(user).loader.items == user.loader.items == 200_000


def test_a_one_off_dataset_sweeps_its_workers_repeated(tmp_path: Path) -> None:
    """`memprobe run --dataset m:f --workers 0,1,2,4 --repeats 5`: the main process alone once
    per round, each mode at 1, 2 and 4 workers, 5 interleaved rounds."""
    from memprobe.cli import _parser
    from memprobe.cli import run as run_cli

    args = _parser().parse_args(
        ["run", "--dataset", "mypkg.data:build", "--workers", "0,1,2,4", "--repeats", "5", "--modes", "fork"]
    )
    scenario = run_cli.with_repeats(run_cli._scenario(args), args)
    matrix = ["build-single-w0", "build-fork-w1", "build-fork-w2", "build-fork-w4"]
    assert [r.run_id for r in scenario.runs()] == [f"{m}-r{r}" for r in range(1, 6) for m in matrix]
