"""The terminal side of `memprobe run`: progress totals, the summary table, --quick."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from memprobe.cli.console import TerminalConsole, summary_table
from memprobe.cli.run import QUICK_IMAGES, QUICK_RECORDS, _quick
from memprobe.core.summary import RunSummary
from memprobe.run.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
DECODE = REPO / "scenarios" / "decode_pillow_vs_nvimgcodec.yaml"
RECORDS = REPO / "scenarios" / "lists_vs_arrays.yaml"


def _summary(**changes: object) -> RunSummary:
    base = RunSummary(
        run_id="list-fork-w2",
        backend="list",
        mode="fork",
        workers=2,
        status="ok",
        error=None,
        items=1000,
        items_per_s=2500.0,
        time_to_first_batch_s=0.2,
        duration_s=3.0,
        total_pss_start_mb=400.0,
        total_pss_peak_mb=700.0,
        total_pss_end_mb=690.0,
        sum_rss_peak_mb=1200.0,
        rss_overcount_mb=500.0,
        worker_uss_start_mb=20.0,
        worker_uss_growth_mb=150.0,
        worker_uss_growth_max_mb=151.0,
        main_uss_growth_mb=10.0,
        growth_per_1k_items_per_worker_mb=0.3,
        growth_threshold_mb=50.0,
        verdict="growing",
        expectation="growing",
        expectation_met=True,
        explanation="",
        sampler_cpu_share=0.015,
    )
    return replace(base, **changes)


def test_progress_total_counts_images_for_decode_runs() -> None:
    scenario = load_scenario(DECODE)
    spec = scenario.runs()[0]
    assert TerminalConsole._items_target(spec) == scenario.decode.images * scenario.loader.epochs


def test_progress_total_counts_records_for_the_builtin_backends() -> None:
    scenario = load_scenario(RECORDS)
    spec = scenario.runs()[0]
    assert TerminalConsole._items_target(spec) == scenario.dataset.records * scenario.loader.epochs


def test_quick_caps_decode_images_and_records() -> None:
    decode = _quick(load_scenario(DECODE))
    assert decode.decode.images == min(QUICK_IMAGES, load_scenario(DECODE).decode.images)
    assert all(r.decode.images == decode.decode.images for r in decode.runs())
    records = _quick(load_scenario(RECORDS))
    assert records.dataset.records == QUICK_RECORDS
    assert [r.run_id for r in records.runs()] == [r.run_id for r in load_scenario(RECORDS).runs()]


def test_summary_table_has_a_row_per_run_with_its_figures() -> None:
    table = summary_table(
        [
            _summary(),
            _summary(run_id="arrow-fork-w2", verdict="flat", expectation="flat", worker_uss_growth_mb=2.0),
        ]
    )
    lines = table.splitlines()
    assert len(lines) == 4 and "decoder" not in lines[0] and "MB/s" not in lines[0]
    assert "list-fork-w2" in lines[2] and "+150 MB" in lines[2] and "growing met" in lines[2]
    assert "1,200 MB" in lines[2] and "2,500" in lines[2]
    assert "arrow-fork-w2" in lines[3] and "+2 MB" in lines[3]


def test_summary_table_shows_the_decoder_that_ran_and_mb_per_s_for_decode_runs() -> None:
    rows = [
        _summary(
            run_id="nvimgcodec-thread-w2",
            backend="nvimgcodec",
            workload="decode",
            decoder_backend="nvimgcodec-cpu",
            mb_per_s=42.25,
        ),
        _summary(
            run_id="nvimgcodec-fork-w2",
            backend="nvimgcodec",
            workload="decode",
            status="failed",
            decoder_backend=None,
            mb_per_s=None,
            items_per_s=None,
        ),
    ]
    lines = summary_table(rows).splitlines()
    assert "decoder" in lines[0] and "MB/s" in lines[0]
    assert "nvimgcodec-cpu" in lines[2] and "42.2" in lines[2]
    assert "failed" in lines[3]


def test_summary_table_marks_the_main_process_growth_of_runs_without_worker_processes() -> None:
    table = summary_table(
        [
            _summary(
                run_id="list-thread-w2",
                mode="thread",
                worker_uss_growth_mb=None,
                main_uss_growth_mb=-19.0,
                verdict="flat",
                expectation="flat",
            )
        ]
    )
    assert "-19 MB (main)" in table.splitlines()[2]


def test_modes_and_workers_flags_narrow_a_scenario_file_and_one_off_flags_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`memprobe run FILE --modes fork --workers 1` runs that matrix (the flags were ignored with a
    file: every mode ran); --items and --batch-size with a file are refused, naming where the file
    sets them; a bad mode is refused as the file's own would be."""
    import argparse

    from memprobe.cli import main
    from memprobe.cli.run import _scenario

    def args(**given: object) -> argparse.Namespace:
        base = {"scenario": str(RECORDS), "dataset": None, "kwargs": None, "items": None, "batch_size": None}
        return argparse.Namespace(**{**base, "modes": None, "workers": None, **given})

    whole = _scenario(args())
    narrowed = _scenario(args(modes="fork", workers="1,3"))
    assert {r.mode for r in narrowed.runs()} == {"fork"} and {r.workers for r in narrowed.runs()} == {1, 3}
    assert {r.backend for r in narrowed.runs()} == {r.backend for r in whole.runs()}
    assert narrowed.text == whole.text  # the folder keeps the file as written
    assert main(["run", str(RECORDS), "--items", "5"]) == 2
    assert "--items: sets a one-off --dataset run; a scenario file sets it itself" in capsys.readouterr().err
    assert main(["run", str(RECORDS), "--modes", "fork,frok"]) == 2
    assert "modes': got 'frok'; allowed: fork, spawn" in capsys.readouterr().err
