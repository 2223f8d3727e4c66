"""Results on disk, written by hand here: crash-safe while running, consolidation, hostile folders
(folders written by real runs are tested in tests/integration/test_results_folder.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from memprobe import results
from memprobe.errors import ResultsWriteError
from memprobe.results import SCHEMA_VERSION, ResultSet, RunWriter, read_jsonl, write_json_atomic

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
    with pytest.raises(ResultsWriteError, match=r"meta\.json: disk full"):
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
    w._files["samples"] = open(tmp_path / "samples.jsonl", encoding="utf-8")  # noqa: SIM115  (w.close() closes it)
    with pytest.raises(ResultsWriteError, match=r"samples\.jsonl"):
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
        tmp_path / "samples.parquet", index=False
    )
    loaded = ResultSet.load(tmp_path).tables["samples"]
    assert loaded.groupby("run_id").size().to_dict() == {"a": 3, "b": 3}
    results.consolidate(tmp_path)
    assert pd.read_parquet(tmp_path / "samples.parquet").groupby("run_id").size().to_dict() == {
        "a": 3,
        "b": 3,
    }
    assert not list(tmp_path.glob("runs/*/samples.jsonl"))


def test_write_json_atomic_handles_numpy_scalars(tmp_path: Path) -> None:
    import numpy as np

    write_json_atomic(tmp_path / "x.json", {"a": np.float64(1.5), "b": np.int64(3)})
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1.5, "b": 3}


def test_load_requires_a_results_folder(tmp_path: Path) -> None:
    from memprobe.errors import UsageError

    with pytest.raises(UsageError, match=r"manifest\.json"):
        ResultSet.load(tmp_path)


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


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("manifest.json", b'{"schema_version": 1, "sta', "damaged or truncated"),
        ("manifest.json", b"[1, 2]", "expected an object"),
        ("manifest.json", b"\xff\xfe", "damaged or truncated"),
        ("samples.parquet", b"PAR1 not really", "truncated or damaged"),
    ],
)
def test_a_damaged_file_is_named_not_a_traceback(
    tmp_path: Path, name: str, content: bytes, words: str
) -> None:
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
