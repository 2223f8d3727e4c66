"""What `memprobe record` / `watch` print: processes grouped by rank, and the items/s hint."""

from __future__ import annotations

import io
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from memprobe.analysis.table import order
from memprobe.cli.recording import print_result, process_rows
from memprobe.core.summary import RunSummary
from memprobe.record.recording import RecordResult


def _row(pid: int, role: str, rank: int, worker: int, first_t: float, generation: int = 1) -> dict:
    kind = "main" if role == "main" else "rank" if worker < 0 and role == f"rank {rank}" else None
    if kind is None:
        kind = "dataloader" if worker >= 0 else role.split(" ", 2)[-1]
    return {
        "pid": pid,
        "role": role,
        "kind": kind,
        "generation": generation if worker >= 0 else None,
        "rank": rank,
        "worker": worker,
        "first_t": first_t,
        "last_t": first_t + 2,
        "pss_samples": 3,
        "uss_start_mb": 10.0,
        "uss_end_mb": 12.0,
        "growth_mb": 2.0,
    }


def process_order(row: dict) -> tuple:
    """The order summary.json's per-process rows come in (the terminal prints them so)."""
    return order(SimpleNamespace(**row))


def test_processes_are_grouped_by_rank_then_ordered_by_start() -> None:
    # As seen from a torchrun job: the ranks' workers appear interleaved in time.
    rows = [
        _row(11, "rank 1 worker 0", 1, 0, 5.0),
        _row(10, "rank 0 worker 0", 0, 0, 5.0),
        _row(3, "rank 1", 1, -1, 1.0),
        _row(12, "rank 0 worker 1", 0, 1, 5.1),
        _row(20, "rank 0 worker 0", 0, 0, 9.0, generation=2),
        _row(1, "main", -1, -1, 0.0),
        _row(2, "rank 0", 0, -1, 1.0),
        _row(13, "rank 1 worker 1", 1, 1, 5.2),
        _row(4, "rank 0 resource tracker", 0, -1, 0.5),
    ]
    order = [r["role"] + f" ({r['pid']})" for r in sorted(rows, key=process_order)]
    assert order == [
        "main (1)",
        "rank 0 (2)",
        "rank 0 worker 0 (10)",
        "rank 0 worker 1 (12)",
        "rank 0 worker 0 (20)",
        "rank 0 resource tracker (4)",
        "rank 1 (3)",
        "rank 1 worker 0 (11)",
        "rank 1 worker 1 (13)",
    ]
    table = process_rows(sorted(rows, key=process_order)).splitlines()
    assert table[0].split()[:2] == ["pid", "role"] and table[1].split()[:2] == ["1", "main"]


def test_without_ranks_main_comes_first_then_each_generation() -> None:
    rows = [
        _row(8, "worker 1", -1, 1, 6.1, generation=2),
        _row(5, "worker 0", -1, 0, 1.0),
        _row(1, "main", -1, -1, 0.0),
        _row(7, "worker 0", -1, 0, 6.0, generation=2),
        _row(6, "worker 1", -1, 1, 1.1),
    ]
    assert [r["pid"] for r in sorted(rows, key=process_order)] == [1, 5, 6, 7, 8]


def test_the_items_hint_fits_record_and_watch(tmp_path: Path) -> None:
    values = {f.name: None for f in fields(RunSummary)}
    values.update(
        run_id="train",
        backend="train",
        mode="fork",
        workers=2,
        status="ok",
        items=0,
        duration_s=1.0,
        growth_threshold_mb=50.0,
        explanation="flat: ...",
    )
    summary = RunSummary(**values)
    hints = {"record": "add memprobe.mark(n_items) to the loop", "watch": "started with MEMPROBE_MARK_FILE"}
    for kind, hint in hints.items():
        out = io.StringIO()
        print_result(RecordResult(tmp_path, [summary], None, 0, "ok", [], kind), out)
        assert hint in out.getvalue(), out.getvalue()


def test_a_process_still_running_at_the_end_runs_on_and_notes_are_printed_escaped(tmp_path: Path) -> None:
    """A process that left the command's group and outlived it is shown (whatever its role) as
    running on, not as ended at the last sample; notes come after the table, control characters
    escaped; a folder that could not be finished still names where it is."""
    rows = [_row(1, "main", -1, -1, 0.0), {**_row(9, "other", -1, -1, 0.3), "kind": "exec"}]
    table = process_rows(rows, outlived={9}).splitlines()
    assert [line.split()[0] for line in table[1:]] == ["1", "9"]
    assert "0.3-, runs on" in table[2] and "0.0-2.0" in table[1]
    out = io.StringIO()
    result = RecordResult(
        tmp_path, [], None, 0, "failed", [], "record", ["memprobe: kept \x1b[2J"], saved=False
    )
    print_result(result, out)
    text = out.getvalue()
    assert "memprobe: kept \\x1b[2J" in text and "\x1b" not in text
    assert f"results: {tmp_path}" in text


def test_table_order_main_then_each_rank_its_workers_then_the_rest() -> None:
    rows = [
        _row(11, "rank 1 worker 0", 1, 0, 5.0),
        _row(2, "rank 0", 0, -1, 1.0),
        {**_row(1, "launcher", -1, -1, 0.0), "kind": "launcher"},
        _row(4, "rank 0 resource tracker", 0, -1, 0.5),
        _row(10, "rank 0 worker 0", 0, 0, 5.0),
        _row(3, "rank 1", 1, -1, 1.0),
    ]
    assert [r["pid"] for r in sorted(rows, key=process_order)] == [1, 2, 10, 4, 3, 11]


def test_assert_flat_of_a_recording_that_judged_no_process_fails_saying_why(tmp_path: Path) -> None:
    """A 3 s job recorded where the sampler's cheap ticks used the budget: one exact reading, no
    process judged, "no verdict". assert_flat passed it, a guard that could not fail; it fails
    now, naming why and the budget to raise."""
    from memprobe.record.api import RecordedJob

    values = {f.name: None for f in fields(RunSummary)}
    values.update(
        run_id="python",
        status="ok",
        growth_threshold_mb=50.0,
        culprit="no verdict: no worker or parent process has two exact readings in its window.",
        processes=[{"pid": 7, "role": "main", "kind": "main", "judged": False, "growth_mb": None}],
    )
    job = RecordedJob(RunSummary(**values), 0, "", tmp_path)
    with pytest.raises(
        AssertionError, match=r"no process of the job could be judged \(no verdict: .*pss_budget=0\.05"
    ):
        job.assert_flat()
    values["processes"] = [{"pid": 7, "role": "main", "kind": "main", "judged": True, "growth_mb": 3.0}]
    RecordedJob(RunSummary(**values), 0, "", tmp_path).assert_flat()  # judged, within its limit
