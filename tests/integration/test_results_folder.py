"""Results folders written by real runs: one left unconsolidated by a crash loads, and after a
session summary.json, the manifest and the Parquet tables are as documented (shared small
scenario). Results written by hand are tested in tests/unit/test_results.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from memprobe.probe.sampler import SAMPLE_COLUMNS
from memprobe.results.files import write_json_atomic
from memprobe.results.folder import SCHEMA_VERSION, ResultSet

SUMMARY_KEYS = (
    "run_id",
    "backend",
    "mode",
    "workers",
    "status",
    "error",
    "items",
    "items_per_s",
    "total_pss_start_mb",
    "total_pss_peak_mb",
    "total_pss_end_mb",
    "sum_rss_peak_mb",
    "worker_uss_growth_mb",
    "verdict",
    "expectation",
    "expectation_met",
)


# -- what a crash of the supervisor leaves ----------------------------------------------------


@pytest.mark.slow
def test_load_a_folder_whose_runs_were_never_consolidated(tmp_path: Path) -> None:
    """What a crash of the supervising process leaves: meta.json and JSON lines, no Parquet."""
    from memprobe.analysis.runs import summarize_all
    from memprobe.run.runner import execute
    from memprobe.run.scenario import parse_scenario

    scenario = parse_scenario(
        "dataset: {records: 5000}\nbackends: [numpy]\nmodes: [thread]\n"
        "workers: [2]\nloader: {batch_size: 64}\ntimeout_s: 60\n",
        "c.yaml",
    )
    (spec,) = scenario.runs()
    write_json_atomic(
        tmp_path / "manifest.json",
        {"schema_version": SCHEMA_VERSION, "scenario": "c", "status": "running", "runs": [spec.run_id]},
    )
    state = execute(spec, tmp_path / "runs" / spec.run_id)
    assert state.status == "ok"
    assert not list(tmp_path.glob("*.parquet"))
    # A torn line at the end of the samples, as if the supervisor died mid-write.
    with open(tmp_path / "runs" / spec.run_id / "samples.jsonl", "a") as f:
        f.write('{"t": 99.0, "pid": 1, "rss_')

    rs = ResultSet.load(tmp_path)
    assert [m["run_id"] for m in rs.metas] == [spec.run_id] and rs.metas[0]["status"] == "ok"
    assert {"warm", "done"} <= set(rs.metas[0]["milestones"]) and "marks" not in rs.metas[0]
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
    assert manifest["kind"] == "scenario" and manifest["description"]
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
