"""Results on disk: crash-safe while running, one Parquet table each and summary.json after."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from memprobe import results
from memprobe.probe.sampler import SAMPLE_COLUMNS
from memprobe.errors import ResultsWriteError
from memprobe.results import SCHEMA_VERSION, ResultSet, RunWriter, read_jsonl, write_json_atomic

SUMMARY_KEYS = ("run_id", "backend", "mode", "workers", "status", "error", "items", "items_per_s",
                "total_pss_start_mb", "total_pss_peak_mb", "total_pss_end_mb", "sum_rss_peak_mb",
                "worker_uss_growth_mb", "verdict", "expectation", "expectation_met")


# -- crash safety ------------------------------------------------------------------------------

def test_read_jsonl_skips_a_torn_last_line(tmp_path: Path) -> None:
    f = tmp_path / "samples.jsonl"
    f.write_text('{"t": 0.1, "pid": 1}\n{"t": 0.2, "pid": 1}\n{"t": 0.3, "pi')
    assert read_jsonl(f) == [{"t": 0.1, "pid": 1}, {"t": 0.2, "pid": 1}]


def test_read_jsonl_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "nope.jsonl") == []


def test_run_writer_flushes_every_append(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "run")
    try:
        w.append("samples", [{"t": 0.1, "pid": 7}, {"t": 0.2, "pid": 7}])
        w.append("samples", [])
        # Readable at once by another reader, before close: a crash loses nothing written.
        assert read_jsonl(tmp_path / "run" / "samples.jsonl") == [{"t": 0.1, "pid": 7}, {"t": 0.2, "pid": 7}]
    finally:
        w.close()


def test_write_json_atomic_keeps_the_old_file_when_writing_fails(tmp_path: Path, monkeypatch) -> None:
    meta = tmp_path / "meta.json"
    write_json_atomic(meta, {"status": "running", "n": 1})
    assert json.loads(meta.read_text()) == {"status": "running", "n": 1}

    def torn_dump(data, f, **kw):
        f.write('{"status": "o')
        raise OSError("disk full")

    monkeypatch.setattr(results.json, "dump", torn_dump)
    with pytest.raises(ResultsWriteError, match="meta.json: disk full"):
        write_json_atomic(meta, {"status": "ok"})
    monkeypatch.undo()
    assert json.loads(meta.read_text()) == {"status": "running", "n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]  # no half-written temporary left
    write_json_atomic(meta, {"status": "ok"})
    assert json.loads(meta.read_text()) == {"status": "ok"}
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_a_failed_append_names_the_file(tmp_path: Path) -> None:
    w = RunWriter(tmp_path)
    w._files["samples"].close()  # writing now fails as it would on a full disk
    w._files["samples"] = open(tmp_path / "samples.jsonl", "r", encoding="utf-8")
    with pytest.raises(ResultsWriteError, match="samples.jsonl"):
        w.append("samples", [{"t": 1.0}])
    w.close()


def test_consolidation_stopped_part_way_does_not_count_rows_twice(tmp_path: Path) -> None:
    """A full disk can stop consolidation after a table's Parquet file was written but before
    the JSON lines were removed: loading (and consolidating again) must not double the rows."""
    write_json_atomic(tmp_path / "manifest.json", {"schema_version": SCHEMA_VERSION, "runs": ["a", "b"]})
    for run in ("a", "b"):
        w = RunWriter(tmp_path / "runs" / run)
        w.append("samples", [{"t": float(i), "pid": 1, "rss_mb": 10.0} for i in range(3)])
        w.write_meta({"run_id": run, "index": 0 if run == "a" else 1, "spec": {}})
        w.close()
    # As if consolidation wrote samples.parquet with run "a" only, then stopped.
    pd.DataFrame([{"run_id": "a", "t": float(i), "pid": 1, "rss_mb": 10.0} for i in range(3)]).to_parquet(
        tmp_path / "samples.parquet", index=False)
    loaded = ResultSet.load(tmp_path).tables["samples"]
    assert loaded.groupby("run_id").size().to_dict() == {"a": 3, "b": 3}
    results.consolidate(tmp_path)
    assert pd.read_parquet(tmp_path / "samples.parquet").groupby("run_id").size().to_dict() == {"a": 3, "b": 3}
    assert not list(tmp_path.glob("runs/*/samples.jsonl"))


def test_write_json_atomic_handles_numpy_scalars(tmp_path: Path) -> None:
    import numpy as np

    write_json_atomic(tmp_path / "x.json", {"a": np.float64(1.5), "b": np.int64(3)})
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1.5, "b": 3}


def test_load_requires_a_results_folder(tmp_path: Path) -> None:
    from memprobe.errors import UsageError

    with pytest.raises(UsageError, match="manifest.json"):
        ResultSet.load(tmp_path)


@pytest.mark.slow
def test_load_a_folder_whose_runs_were_never_consolidated(tmp_path: Path) -> None:
    """What a crash of the supervising process leaves: meta.json and JSON lines, no Parquet."""
    from memprobe.analysis import summarize_all
    from memprobe.runner import execute
    from memprobe.scenario import parse_scenario

    scenario = parse_scenario("dataset: {records: 5000}\nbackends: [numpy]\nmodes: [thread]\n"
                              "workers: [2]\nloader: {batch_size: 64}\ntimeout_s: 60\n", "c.yaml")
    (spec,) = scenario.runs()
    write_json_atomic(tmp_path / "manifest.json", {"schema_version": SCHEMA_VERSION, "scenario": "c",
                                                   "status": "running", "runs": [spec.run_id]})
    state = execute(spec, tmp_path / "runs" / spec.run_id)
    assert state.status == "ok"
    assert not list(tmp_path.glob("*.parquet"))
    # A torn line at the end of the samples, as if the supervisor died mid-write.
    with open(tmp_path / "runs" / spec.run_id / "samples.jsonl", "a") as f:
        f.write('{"t": 99.0, "pid": 1, "rss_')

    rs = ResultSet.load(tmp_path)
    assert [m["run_id"] for m in rs.metas] == [spec.run_id] and rs.metas[0]["status"] == "ok"
    samples = rs.run_table("samples", spec.run_id)
    assert len(samples) > 5 and (samples["t"] < 99).all()
    assert set(samples["role"]) >= {"main"}
    assert rs.run_table("progress", spec.run_id)["items"].max() == 5000
    assert "done" in set(rs.tables["events"]["event"])
    (summary,) = summarize_all(rs)
    assert summary.status == "ok" and summary.items == 5000 and summary.verdict in ("flat", "growing")


# -- after a session: summary.json and Parquet (shared small scenario) -------------------------

def test_summary_json_has_one_entry_per_run_with_the_documented_fields(small_results) -> None:
    summary = json.loads((small_results.root / "summary.json").read_text())
    assert summary["schema_version"] == SCHEMA_VERSION
    assert summary["status"] == "complete"
    runs = summary["runs"]
    assert sorted(r["run_id"] for r in runs) == sorted(small_results.summaries)
    for r in runs:
        missing = [k for k in SUMMARY_KEYS if k not in r]
        assert not missing, (r["run_id"], missing)
        assert r["status"] == "ok" and r["error"] is None and r["workers"] == 2
        assert r["items"] == 200_000 and r["items_per_s"] > 0
        assert 0 < r["total_pss_start_mb"] <= r["total_pss_peak_mb"]
        assert r["total_pss_end_mb"] <= r["total_pss_peak_mb"]
        assert r["sum_rss_peak_mb"] >= r["total_pss_peak_mb"]
        assert r["verdict"] in ("flat", "growing")
        if r["expectation"] is not None:
            assert r["expectation_met"] is (r["expectation"] == r["verdict"])
        else:
            assert r["expectation_met"] is None
    by_id = {r["run_id"]: r for r in runs}
    assert by_id["list-fork-w2"]["expectation"] == "growing"
    assert by_id["arrow-fork-w2"]["expectation"] == "flat"
    assert by_id["list-thread-w2"]["expectation"] is None
    assert by_id["list-thread-w2"]["worker_uss_growth_mb"] is None  # threads: no worker processes


def test_manifest_describes_the_session(small_results) -> None:
    manifest = json.loads((small_results.root / "manifest.json").read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION and manifest["status"] == "complete"
    assert manifest["finished"] >= manifest["started"]
    env = manifest["environment"]
    assert env["cpu_count"] >= 1 and env["torch"] and env["python"]
    assert (small_results.root / "scenario.yaml").read_text().startswith("name: small")


@pytest.mark.parametrize("table", ["samples", "progress", "system", "runs"])
def test_parquet_tables_are_readable_by_pandas_and_pyarrow(small_results, table: str) -> None:
    path = small_results.root / f"{table}.parquet"
    df = pd.read_parquet(path)
    t = pq.read_table(path)
    assert t.num_rows == len(df) > 0
    assert set(df["run_id"]) == set(small_results.summaries)
    if table == "samples":
        assert set(SAMPLE_COLUMNS) <= set(df.columns)
        assert df["pss_mb"].dtype.kind == "f" and df["missing"].dtype == bool
    if table == "progress":
        assert (df.groupby("run_id")["items"].max() == 200_000).all()


def test_consolidation_removed_the_json_lines(small_results) -> None:
    for run in (small_results.root / "runs").iterdir():
        assert (run / "meta.json").exists()
        assert not (run / "samples.jsonl").exists() and not (run / "progress.jsonl").exists()


# -- hostile folders (issue 13) ----------------------------------------------------------------

def test_of_two_writers_racing_for_one_manifest_exactly_one_gets_it(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from memprobe.results import write_json_exclusive

    path = tmp_path / "manifest.json"
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: write_json_exclusive(path, {"writer": i}), range(8)))
    assert won.count(True) == 1
    assert json.loads(path.read_text())["writer"] == won.index(True)  # whole, the winner's
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary file left


@pytest.mark.parametrize("name, content, words", [
    ("manifest.json", b'{"schema_version": 1, "sta', "damaged or truncated"),
    ("manifest.json", b"[1, 2]", "expected an object"),
    ("manifest.json", b"\xff\xfe", "damaged or truncated"),
    ("samples.parquet", b"PAR1 not really", "truncated or damaged"),
])
def test_a_damaged_file_is_named_not_a_traceback(tmp_path: Path, name: str, content: bytes, words: str) -> None:
    from memprobe.errors import UsageError

    write_json_atomic(tmp_path / "manifest.json", {"schema_version": 1, "status": "complete"})
    (tmp_path / name).write_bytes(content)
    with pytest.raises(UsageError) as info:
        ResultSet.load(tmp_path)
    assert str(tmp_path / name) in str(info.value) and words in str(info.value)


def test_a_run_record_edited_by_hand_is_named(tmp_path: Path) -> None:
    from memprobe.errors import UsageError

    write_json_atomic(tmp_path / "manifest.json", {"schema_version": 1})
    (tmp_path / "runs" / "a").mkdir(parents=True)
    write_json_atomic(tmp_path / "runs" / "a" / "meta.json", {"run_id": "a", "status": "ok", "spec": {}})
    with pytest.raises(UsageError) as info:
        results.check_run_records(tmp_path)
    assert "meta.json" in str(info.value) and "spec.backend" in str(info.value)


def test_a_parquet_file_that_is_not_memprobes_is_named(tmp_path: Path) -> None:
    from memprobe.errors import UsageError

    write_json_atomic(tmp_path / "manifest.json", {"schema_version": 1})
    pd.DataFrame({"x": [1, 2]}).to_parquet(tmp_path / "progress.parquet")
    with pytest.raises(UsageError) as info:
        ResultSet.load(tmp_path)
    assert "progress.parquet" in str(info.value) and "run_id" in str(info.value)


def test_tables_consolidate_into_a_folder_whose_name_is_not_utf8(tmp_path: Path) -> None:
    import os

    root = Path(os.fsdecode(os.fsencode(tmp_path) + b"/r\xff"))
    w = RunWriter(root / "runs" / "a")
    w.append("samples", [{"t": 0.1, "pid": 7, "rss_mb": 1.0}])
    w.write_meta({"run_id": "a", "index": 0, "status": "ok", "spec": {}})
    w.close()
    write_json_atomic(root / "manifest.json", {"schema_version": 1})
    results.consolidate(root)
    assert list(ResultSet.load(root).tables["samples"]["pid"]) == [7]


def test_a_write_error_says_what_to_do_for_its_cause(tmp_path: Path) -> None:
    import errno

    full = ResultsWriteError(tmp_path / "x", OSError(errno.ENOSPC, "No space left on device"))
    gone = ResultsWriteError(tmp_path / "x", OSError(errno.ENOENT, "No such file or directory"))
    denied = ResultsWriteError(tmp_path / "x", OSError(errno.EACCES, "Permission denied"))
    assert "free some space" in str(full)
    assert "deleted or moved" in str(gone) and "space" not in str(gone)
    assert "may not write there" in str(denied)
