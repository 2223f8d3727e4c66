"""Long recordings: rows gathered in chunks, long runs read back reduced, a killed folder read
once, durations in the unit that fits (the measurements: benchmarks/bench_finish.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from memprobe.probe.procfs import process_identity
from memprobe.results import files, gather, parquet, reduce
from memprobe.results import folder as results
from memprobe.results.files import RunWriter, read_jsonl, write_json_atomic
from memprobe.results.folder import SCHEMA_VERSION, ResultSet


def _rows(n_ticks: int, pids: tuple[int, ...] = (1, 2, 3), dt: float = 0.2) -> list[dict]:
    """Sample rows as the tree sampler writes them: the first tick with every column (empty ones
    as null), later rows without their empty fields; an exact reading every 10th tick."""
    rows = []
    for i in range(n_ticks):
        for pid in pids:
            exact = i % 10 == pid % 10
            row = {
                "t": round(0.001 + i * dt, 4),
                "pid": pid,
                "role": "main" if pid == 1 else f"worker {pid - 2}",
                "worker": -1 if pid == 1 else pid - 2,
                "tier": "pss" if exact else "cheap",
                "missing": False,
                "reason": None,
                "rss_mb": 100.0 + pid + (i % 7),
                "cpu_s": round(i * dt * 0.1, 4),
                "pss_mb": 50.0 + pid + (i % 5) if exact else None,
                "uss_mb": 20.0 + pid + (i % 3) if exact else None,
                "uss_est_mb": None if exact else 20.0 + pid,
            }
            rows.append(row if i == 0 else {k: v for k, v in row.items() if v is not None})
    return rows


def _folder(root: Path, rows: list[dict], runs: tuple[str, ...] = ("a",)) -> Path:
    write_json_atomic(root / "manifest.json", {"schema_version": SCHEMA_VERSION, "runs": list(runs)})
    for index, run in enumerate(runs):
        w = RunWriter(root / "runs" / run)
        w.append("samples", rows)
        w.write_meta({"run_id": run, "index": index, "status": "ok", "spec": SPEC})
        w.close()
    return root


# A run record as memprobe record writes one, with the fields every run record has.
SPEC = {"backend": "python", "mode": "record", "workers": 2, "verdict": {"growth_threshold_mb": 50.0}}


# -- gathering ---------------------------------------------------------------------------------


def _row_groups(path: Path) -> list[int]:
    gathered = pq.ParquetFile(path)
    return [gathered.metadata.row_group(i).num_rows for i in range(gathered.num_row_groups)]


def test_gathering_writes_the_json_lines_chunk_by_chunk_with_the_same_rows(
    tmp_path: Path, monkeypatch
) -> None:
    """The rows go to Parquet a chunk at a time (with row groups of one chunk, none holds more
    than GATHER_ROWS), and read back as the whole table used to be: the same columns, types and
    values."""
    rows = _rows(40)
    root = _folder(tmp_path, rows, runs=("a", "b"))
    whole = pd.concat(
        [pd.DataFrame(read_jsonl(root / "runs" / r / "samples.jsonl")).assign(run_id=r) for r in ("a", "b")],
        ignore_index=True,
    )
    monkeypatch.setattr(gather, "GATHER_ROWS", 25)
    monkeypatch.setattr(gather, "GROUP_BYTES", 1)
    gather.consolidate(root)
    sizes = _row_groups(root / "samples.parquet")
    assert max(sizes) <= 25 and sum(sizes) == 2 * 40 * 3
    loaded = pd.read_parquet(root / "samples.parquet")
    expected = whole[["run_id", *[c for c in whole.columns if c != "run_id"]]]
    pd.testing.assert_frame_equal(loaded, expected, check_dtype=False)
    assert loaded["worker"].dtype.kind == "i" and loaded["pss_mb"].dtype.kind == "f"
    assert not list(root.glob("runs/*/samples.jsonl")) and not list(root.glob(".*spool"))


def test_a_long_table_is_gathered_in_fewer_row_groups_than_chunks(tmp_path: Path, monkeypatch) -> None:
    """Parquet's footer describes every row group, and whoever opens the file holds it whole: a
    table whose JSON lines make more than MAX_GROUPS groups of LEAST_GROUP_BYTES is written in
    about MAX_GROUPS groups of several chunks, so the footer stops growing with the job's length;
    a short one in groups of LEAST_GROUP_BYTES. The same rows either way."""
    monkeypatch.setattr(gather, "GATHER_ROWS", 25)  # 48 chunks of 1,200 rows
    monkeypatch.setattr(gather, "LEAST_GROUP_BYTES", 1)
    (tmp_path / "short").mkdir()
    (tmp_path / "long").mkdir()
    short = _folder(tmp_path / "short", _rows(200), runs=("a", "b"))
    gather.consolidate(short)
    assert _row_groups(short / "samples.parquet") == [25] * 48
    monkeypatch.setattr(gather, "MAX_GROUPS", 3)  # as if the job were long
    long = _folder(tmp_path / "long", _rows(200), runs=("a", "b"))
    gather.consolidate(long)
    sizes = _row_groups(long / "samples.parquet")
    assert 2 <= len(sizes) <= 4 and sum(sizes) == 2 * 200 * 3
    parts = list(parquet.parquet_groups(long / "samples.parquet"))
    loaded = pd.concat([p.to_pandas() for p in parts], ignore_index=True)
    pd.testing.assert_frame_equal(loaded, pd.read_parquet(short / "samples.parquet"))


def test_row_groups_are_sized_in_bytes_not_by_the_rows_parsed_at_once(tmp_path: Path, monkeypatch) -> None:
    """The lines are parsed a few thousand rows at a time (the fewer, the less of Python's memory
    stays pinned after the gathering), but a row group is not written per chunk parsed: a table
    of 1,200 rows parsed 25 at a time is one group, as parsed whole, with the same rows."""
    monkeypatch.setattr(gather, "GATHER_ROWS", 25)
    root = _folder(tmp_path, _rows(200), runs=("a", "b"))
    gather.consolidate(root)
    assert _row_groups(root / "samples.parquet") == [2 * 200 * 3]


def test_chunks_that_type_a_column_differently_join_under_one_schema(tmp_path: Path, monkeypatch) -> None:
    """A compact chunk can lack a column, or type it otherwise (all empty; ints where a later
    chunk has floats; text appearing late): the gathered table holds every value, widened."""
    rows = [{"t": 0.1 * i, "pid": 1, "reason": None, "minflt": 5} for i in range(4)]
    rows += [{"t": 0.4 + 0.1 * i, "pid": 1, "minflt": 5.5} for i in range(4)]
    rows += [{"t": 0.8 + 0.1 * i, "pid": 1, "reason": "exited", "minflt": 6, "extra": True} for i in range(4)]
    root = _folder(tmp_path, rows)
    monkeypatch.setattr(gather, "GATHER_ROWS", 4)
    gather.consolidate(root)
    loaded = pd.read_parquet(root / "samples.parquet")
    assert len(loaded) == 12 and list(loaded["t"]) == pytest.approx([0.1 * i for i in range(12)])
    assert list(loaded["minflt"]) == [5, 5, 5, 5, 5.5, 5.5, 5.5, 5.5, 6, 6, 6, 6]
    assert list(loaded["reason"].iloc[8:]) == ["exited"] * 4 and loaded["reason"].iloc[:8].isna().all()
    assert loaded["extra"].iloc[:8].isna().all() and list(loaded["extra"].iloc[8:]) == [True] * 4
    assert not list(root.glob(".*spool"))


def test_memprobe_report_reads_a_killed_recordings_lines_once_and_its_tables_once(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Recovering a folder whose memprobe was killed: every JSON line parsed once (gathered
    into Parquet), the folder loaded once (the report is drawn from the same tables)."""
    from memprobe.cli import main

    root = tmp_path / "killed"
    folder = results.ResultsFolder.create(
        root,
        kind="record",
        name="n",
        description="d",
        environment={"cpu_count": 2},
        runs=["a"],
        writer=process_identity(os.getpid()),
    )
    folder.manifest["writer"] = {**folder.manifest["writer"], "pid": 0}  # nobody writes it any more
    folder.save()
    w = RunWriter(root / "runs" / "a")
    w.append("samples", _rows(30))
    w.write_meta(
        {
            "run_id": "a",
            "index": 0,
            "kind": "record",
            "status": "running",
            "milestones": {},
            "spec": {
                "backend": "python",
                "mode": "record",
                "workers": 2,
                "verdict": {"growth_threshold_mb": 50.0},
            },
        }
    )
    w.close()
    parsed: list[str] = []
    loads = json.loads
    monkeypatch.setattr(
        files.json,
        "loads",
        lambda s, *a, **k: (parsed.append(s if isinstance(s, str) else s.decode()), loads(s, *a, **k))[1],
    )
    opened: list[Path] = []
    of = ResultSet.of.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(ResultSet, "of", classmethod(lambda cls, f: (opened.append(f.root), of(cls, f))[1]))
    assert main(["report", str(root)]) == 0
    assert "ended before finishing" in capsys.readouterr().err
    sample_lines = [s for s in parsed if s.startswith('{"t"')]
    assert len(sample_lines) == 30 * 3 and len(set(sample_lines)) == 30 * 3
    assert opened == [root]
    assert len(pd.read_parquet(root / "samples.parquet")) == 90 and (root / "report.html").exists()


# -- a long run read back reduced ----------------------------------------------------------------


@pytest.fixture
def long_run(tmp_path: Path, monkeypatch) -> tuple[Path, pd.DataFrame]:
    """A run of 600 ticks x 3 processes, with a short run beside it, gathered; 'long' is what
    the reduction applies to here (the limits made small)."""
    rows = _rows(600)
    peak = next(r for r in rows if r["pid"] == 3 and r["t"] == round(0.001 + 333 * 0.2, 4))
    peak["rss_mb"] = 900.0  # one spike, between two exact readings
    root = _folder(tmp_path, rows, runs=("long",))
    w = RunWriter(root / "runs" / "short")
    w.append("samples", _rows(5))
    w.write_meta({"run_id": "short", "index": 1, "status": "ok", "spec": SPEC})
    w.close()
    gather.consolidate(root)
    monkeypatch.setattr(reduce, "REDUCE_ABOVE_ROWS", 100)
    monkeypatch.setattr(reduce, "BUCKETS", 20)
    monkeypatch.setattr(reduce, "EXACT_TICKS", 60)
    return root, pd.read_parquet(root / "samples.parquet")


def test_a_long_run_is_read_reduced_to_whole_ticks_keeping_each_process_s_extremes(long_run) -> None:
    root, whole = long_run
    loaded = ResultSet.load(root).tables["samples"]
    short = loaded[loaded["run_id"] == "short"]
    pd.testing.assert_frame_equal(
        short.reset_index(drop=True), whole[whole["run_id"] == "short"].reset_index(drop=True)
    )
    kept, full = loaded[loaded["run_id"] == "long"], whole[whole["run_id"] == "long"]
    assert len(kept) < len(full) / 4
    # whole ticks: every process's row at a kept time, each row as saved
    assert (kept.groupby("t")["pid"].nunique() == 3).all()
    pd.testing.assert_frame_equal(
        kept.reset_index(drop=True), full[full["t"].isin(set(kept["t"]))].reset_index(drop=True)
    )
    for pid, rows in full.groupby("pid"):
        mine = kept[kept["pid"] == pid]
        assert mine["t"].min() == rows["t"].min() and mine["t"].max() == rows["t"].max()
        assert mine["rss_mb"].max() == rows["rss_mb"].max() and mine["pss_mb"].max() == rows["pss_mb"].max()
        exact, kept_exact = rows[rows["tier"] == "pss"], mine[mine["tier"] == "pss"]
        assert kept_exact["t"].min() == exact["t"].min() and kept_exact["t"].max() == exact["t"].max()
        assert len(kept_exact) >= 10  # exact readings spread over the run, for its growth
    assert kept["rss_mb"].max() == 900.0


def test_a_long_run_reads_back_the_same_whatever_its_row_groups(tmp_path: Path, monkeypatch) -> None:
    """A long table's row groups grow with its length and are read a slice at a time: the rows
    kept do not depend on where the groups or slices are cut (a value's largest, repeated every
    7 ticks here, keeps its earliest tick, as its smallest does)."""
    monkeypatch.setattr(reduce, "REDUCE_ABOVE_ROWS", 100)
    monkeypatch.setattr(reduce, "BUCKETS", 20)
    monkeypatch.setattr(reduce, "EXACT_TICKS", 60)
    monkeypatch.setattr(gather, "GATHER_ROWS", 90)
    loaded = []
    for name, group_bytes, read_rows in (("whole", 1 << 30, 1 << 20), ("cut", 1, 200)):
        (tmp_path / name).mkdir()
        root = _folder(tmp_path / name, _rows(600))
        monkeypatch.setattr(gather, "GROUP_BYTES", group_bytes)
        monkeypatch.setattr(reduce, "READ_ROWS", read_rows)
        gather.consolidate(root)
        assert len(_row_groups(root / "samples.parquet")) == (1 if name == "whole" else 20)
        loaded.append(ResultSet.load(root).tables["samples"])
    assert len(loaded[0]) < 600 * 3 / 4
    pd.testing.assert_frame_equal(loaded[0], loaded[1])


def test_the_ticks_around_the_runs_milestones_are_kept(long_run) -> None:
    root, _ = long_run
    meta_path = root / "runs" / "long" / "meta.json"
    meta = json.loads(meta_path.read_text())
    write_json_atomic(
        meta_path, {**meta, "milestones": {"warm": 50.05}, "processes": [{"pid": 2, "end_t": 70.0}]}
    )
    kept = set(ResultSet.load(root).tables["samples"]["t"])
    # the last tick at or before each moment, and the first after it
    assert {50.001, 50.201, 69.801, 70.001} <= {round(t, 3) for t in kept}


def test_a_short_run_reads_exactly_as_saved(tmp_path: Path) -> None:
    root = _folder(tmp_path, _rows(50))
    gather.consolidate(root)
    pd.testing.assert_frame_equal(
        ResultSet.load(root).tables["samples"], pd.read_parquet(root / "samples.parquet")
    )


# -- durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (3.82, "3.82 s"),
        (12.34, "12.3 s"),
        (250, "4 min 10 s"),
        (5 * 3600 + 12 * 60 + 10, "5 h 12 min"),
        (4330 * 60 + 10, "3 days 0 h"),  # a 72-hour job: was "4330 min 10 s"
        (None, "–"),
    ],
)
def test_a_duration_reads_in_the_unit_that_fits(seconds: float | None, text: str) -> None:
    from memprobe.report import format as fmt

    assert fmt.seconds(seconds) == text


@pytest.mark.parametrize(
    ("start", "end", "text"),
    [
        (-0.002, 3.8, "0.0–3.8 s"),
        (1.5, 5718.0, "0.0–95.3 min"),
        (3600.0, 8 * 3600.0, "1.0–8.0 h"),
        (0.0, 259810.3, "0.0–3.0 days"),  # was "0.0-259810.3 s"
    ],
)
def test_a_process_s_life_reads_in_the_unit_that_fits_its_end(start: float, end: float, text: str) -> None:
    from memprobe.report import format as fmt

    assert fmt.span(start, end) == text


def test_the_terminal_and_the_page_say_a_long_process_s_life_in_hours() -> None:
    from memprobe.cli.recording import process_rows
    from memprobe.report import record_tables

    row = {
        "pid": 7,
        "role": "main",
        "kind": "main",
        "rank": -1,
        "worker": -1,
        "start_t": -0.002,
        "first_t": 0.0,
        "last_t": 8 * 3600.0,
        "end_t": 8 * 3600.0 + 0.2,
        "pss_samples": 3,
        "uss_start_mb": 10.0,
        "uss_end_mb": 12.0,
        "growth_mb": 2.0,
    }
    head, line = process_rows([row]).splitlines()[:2]
    assert "alive" in head and "0.0-8.0 h" in line
    assert record_tables.process_row(row, 50.0, has_workers=False).alive == "0.0–8.0 h"


def _with_system(root: Path, ticks: int, low_at: int) -> Path:
    """A gathered folder whose run has a system row every 0.2 s for ``ticks`` ticks, available
    memory at its lowest (5,000 MB) at tick ``low_at``."""
    _folder(root, _rows(5))
    w = RunWriter(root / "runs" / "a")
    w.append(
        "system",
        [
            {"t": 0.2 * i, "mem_available_mb": 5000.0 if i == low_at else 9000.0 - i % 3, "processes": 3}
            for i in range(ticks)
        ],
    )
    w.close()
    gather.consolidate(root)
    return root


def test_a_long_system_table_keeps_the_lowest_available_memory_of_each_slice(
    tmp_path: Path, monkeypatch
) -> None:
    root = _with_system(tmp_path, 6000, low_at=4321)
    monkeypatch.setattr(reduce, "REDUCE_ABOVE_ROWS", 100)
    monkeypatch.setattr(reduce, "BUCKETS", 20)
    system = ResultSet.load(root).tables["system"]
    assert len(system) < 200 and system["mem_available_mb"].min() == 5000.0
    assert system["t"].min() == 0.0 and system["t"].max() == pytest.approx(0.2 * 5999)


def test_a_report_of_a_long_session_still_going_reads_its_lines_reduced_and_moves_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    """`memprobe report` while memprobe still records: the rows are only in JSON lines; beyond
    LIVE_GATHER_BYTES they are streamed (once) into a temporary Parquet file and read reduced."""
    root = tmp_path / "live"
    folder = results.ResultsFolder.create(
        root,
        kind="record",
        name="n",
        description="d",
        environment={},
        runs=["a"],
        writer=process_identity(os.getpid()),  # this process: alive
    )
    w = RunWriter(root / "runs" / "a")
    rows = _rows(600)
    w.append("samples", rows)
    w.write_meta({"run_id": "a", "index": 0, "status": "running", "spec": SPEC})
    w.close()
    monkeypatch.setattr(gather, "LIVE_GATHER_BYTES", 1000)
    monkeypatch.setattr(reduce, "REDUCE_ABOVE_ROWS", 100)
    monkeypatch.setattr(reduce, "BUCKETS", 20)
    monkeypatch.setattr(reduce, "EXACT_TICKS", 60)
    samples = folder.load().tables["samples"]
    assert 0 < len(samples) < len(rows) / 4 and samples["rss_mb"].max() == max(r["rss_mb"] for r in rows)
    assert samples["t"].max() == max(r["t"] for r in rows)
    assert sorted(p.name for p in root.iterdir()) == ["manifest.json", "runs"]  # nothing gathered in it
    assert len(read_jsonl(root / "runs" / "a" / "samples.jsonl")) == len(rows)


def test_the_system_table_of_a_few_hours_is_read_reduced_like_the_samples(tmp_path: Path) -> None:
    """One row per tick: 25,000 rows (1.4 h at 0.2 s), far below the samples' limit, are read
    reduced with the default limits, so what the finish holds of it does not grow with the job's
    length; the lowest available memory, the first and last tick kept."""
    root = _with_system(tmp_path, 25_000, low_at=14321)
    system = ResultSet.load(root).tables["system"]
    # at most (1 + 2 x numeric columns) ticks a slice, and the run's first and last
    assert len(system) <= 5 * reduce.BUCKETS + 2
    assert system["mem_available_mb"].min() == 5000.0
    assert system["t"].min() == 0.0 and system["t"].max() == pytest.approx(0.2 * 24_999)


# -- what the finish holds does not grow with the job's length ---------------------------------
# The finish's memory at 64 processes grew from 1 to 8 hours of job, its rows analysed did not
# (docs/performance.md, "Round 4"): these pin the two bounds it rests on.

BOUND_PIDS = (1, 2, 3, 4)


def _kept(root: Path, ticks: int) -> tuple[int, int]:
    """The sample rows, and the exact ones, a run of ``ticks`` ticks keeps once gathered and loaded."""
    root.mkdir()
    gather.consolidate(_folder(root, _rows(ticks, BOUND_PIDS)))
    samples = ResultSet.load(root).tables["samples"]
    return len(samples), int((samples["tier"] == "pss").sum())


def test_the_rows_a_reduced_run_keeps_do_not_grow_with_its_length(tmp_path: Path, monkeypatch) -> None:
    """Exact readings come every 10 ticks of each process, so a run 4 times longer has 4 times
    as many; what the analysis holds of it stays within the reduction's bound (whole ticks, at
    most 2 x BUCKETS + EXACT_TICKS + 26 per process, times the processes), the exact rows too."""
    monkeypatch.setattr(reduce, "REDUCE_ABOVE_ROWS", 100)
    monkeypatch.setattr(reduce, "BUCKETS", 20)
    monkeypatch.setattr(reduce, "EXACT_TICKS", 60)
    bound = (2 * reduce.BUCKETS + reduce.EXACT_TICKS + 26 * len(BOUND_PIDS)) * len(BOUND_PIDS)
    short_rows, short_exact = _kept(tmp_path / "short", 500)
    long_rows, long_exact = _kept(tmp_path / "long", 2000)
    assert short_rows <= bound and long_rows <= bound
    assert long_exact < 2000 * len(BOUND_PIDS) / 10 / 4  # a quarter of the exact readings at most
    # the same order of rows kept at 500 and at 2,000 ticks, not 4 times as many
    assert long_rows < 1.5 * short_rows and long_exact < 1.5 * short_exact


def test_a_gathered_tables_row_groups_stop_growing_with_its_length(tmp_path: Path, monkeypatch) -> None:
    """Whoever writes or opens a Parquet file holds ~27 KB per row group of the samples (its
    footer), so the groups are a MAX_GROUPS-th of the table at least: about as many groups for a
    table 4 times as long (as long as a group stays below GROUP_BYTES)."""
    monkeypatch.setattr(gather, "GATHER_ROWS", 20)
    monkeypatch.setattr(gather, "LEAST_GROUP_BYTES", 1)
    monkeypatch.setattr(gather, "MAX_GROUPS", 5)
    groups = {}
    for ticks in (150, 600):
        root = tmp_path / str(ticks)
        root.mkdir()
        gather.consolidate(_folder(root, _rows(ticks, BOUND_PIDS)))
        sizes = _row_groups(root / "samples.parquet")
        assert sum(sizes) == ticks * len(BOUND_PIDS)
        groups[ticks] = len(sizes)
    assert groups[600] <= gather.MAX_GROUPS and groups[600] <= groups[150] + 1
