"""Results on disk, written by hand here: crash-safe while running, consolidation, hostile folders
(folders written by real runs are tested in tests/integration/test_results_folder.py)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
from pathlib import Path

import pandas as pd
import pytest

import memprobe
from memprobe.core.errors import ResultsWriteError
from memprobe.probe.procfs import process_identity
from memprobe.probe.sampler import SAMPLE_COLUMNS
from memprobe.results import files, gather
from memprobe.results import folder as results
from memprobe.results.files import RunWriter, read_jsonl, write_json_atomic
from memprobe.results.folder import SCHEMA_VERSION, ResultSet

# -- crash safety ------------------------------------------------------------------------------


ROW = {**dict.fromkeys(SAMPLE_COLUMNS), "role": "main", "worker": -1, "tier": "cheap", "missing": False}


def run_record(run_id: str, **changes: object) -> dict:
    """The smallest run record (meta.json) a summary can be made of."""
    spec = {"backend": "list", "mode": "fork", "workers": 2, "verdict": {"growth_threshold_mb": 50.0}}
    return {"run_id": run_id, "index": 0, "status": "ok", "milestones": {}, "spec": spec, **changes}


def test_read_jsonl_skips_a_torn_last_line(tmp_path: Path) -> None:
    f = tmp_path / "samples.jsonl"
    f.write_text('{"t": 0.1, "pid": 1}\n{"t": 0.2, "pid": 1}\n{"t": 0.3, "pi')
    assert read_jsonl(f) == [{"t": 0.1, "pid": 1}, {"t": 0.2, "pid": 1}]


def test_read_jsonl_skips_lines_that_are_not_rows_and_refuses_a_line_over_1_mb(tmp_path: Path) -> None:
    """A line that is JSON but not an object is skipped like a torn one; one longer than
    MAX_LINE_BYTES (read in bounded pieces, never whole) means the file is not memprobe's."""
    from memprobe.core.errors import UsageError

    f = tmp_path / "samples.jsonl"
    f.write_bytes(b'{"t": 0.1}\n[1, 2]\n3\n{"t": 0.2, "who": "\\udcff"}\n')
    assert read_jsonl(f) == [{"t": 0.1}, {"t": 0.2, "who": "\\xff"}]
    with open(f, "ab") as out:
        out.truncate(1 << 30)  # a gigabyte of zeros, on no disk
    with pytest.raises(UsageError, match=r"samples\.jsonl: line 5: longer than 1,048,576 bytes"):
        read_jsonl(f)


def test_a_runs_json_lines_past_16_gib_are_gathered(tmp_path: Path) -> None:
    """72 h of 64 processes write 29.8 GB of samples.jsonl (benchmarks/gen_long_record.py): their
    rows are gathered a line at a time, not refused for their size (before: "larger than
    17,179,869,184 bytes", the finish failed and `memprobe report` exited 2)."""
    f = tmp_path / "samples.jsonl"
    f.write_bytes(b'{"t": 0.1, "pid": 1}\n{"t": 0.2, "pid": 1}\n')
    with open(f, "ab") as out:
        out.truncate(17 << 30)  # 17 GiB, on no disk: the rows at its start are read first
    assert next(gather.jsonl_chunks(f, size=2)) == [{"t": 0.1, "pid": 1}, {"t": 0.2, "pid": 1}]


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

    monkeypatch.setattr(files.json, "dump", torn_dump)
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
        w.append("samples", [{**ROW, "t": float(i), "pid": 1, "rss_mb": 10.0} for i in range(3)])
        w.write_meta({**run_record(run), "index": 0 if run == "a" else 1})
        w.close()
    # As if consolidation wrote samples.parquet with run "a" only, then stopped.
    pd.DataFrame(
        [{"run_id": "a", **ROW, "t": float(i), "pid": 1, "rss_mb": 10.0} for i in range(3)]
    ).to_parquet(tmp_path / "samples.parquet", index=False)
    loaded = ResultSet.load(tmp_path).tables["samples"]
    assert loaded.groupby("run_id").size().to_dict() == {"a": 3, "b": 3}
    gather.consolidate(tmp_path)
    assert pd.read_parquet(tmp_path / "samples.parquet").groupby("run_id").size().to_dict() == {
        "a": 3,
        "b": 3,
    }
    assert not list(tmp_path.glob("runs/*/samples.jsonl"))


def test_consolidating_again_after_a_table_with_no_rows_was_gathered_finishes(tmp_path: Path) -> None:
    """memprobe killed in its clean-up, after the tables were gathered (``progress`` with no row:
    a recorded job has none) and before the manifest said so: `memprobe report` gathers again.
    Before: the empty table's one row group of 0 rows was written back and Arrow refused it
    ("Row group size cannot be 0", a traceback; found by test_faults' SIGKILL at clean-up)."""
    write_json_atomic(tmp_path / "manifest.json", {"schema_version": SCHEMA_VERSION, "runs": ["a"]})
    w = RunWriter(tmp_path / "runs" / "a")
    w.append("samples", [{**ROW, "t": float(i), "pid": 1, "rss_mb": 10.0} for i in range(3)])
    w.write_meta({**run_record("a"), "index": 0})
    w.close()
    gather.consolidate(tmp_path)
    assert pd.read_parquet(tmp_path / "progress.parquet").empty
    gather.consolidate(tmp_path)
    assert len(pd.read_parquet(tmp_path / "samples.parquet")) == 3
    assert pd.read_parquet(tmp_path / "progress.parquet").empty


def test_write_json_atomic_handles_numpy_scalars(tmp_path: Path) -> None:
    import numpy as np

    write_json_atomic(tmp_path / "x.json", {"a": np.float64(1.5), "b": np.int64(3)})
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1.5, "b": 3}


def test_load_requires_a_results_folder(tmp_path: Path) -> None:
    from memprobe.core.errors import UsageError

    with pytest.raises(UsageError, match=r"manifest\.json"):
        ResultSet.load(tmp_path)


# -- hostile folders (issue 13) ----------------------------------------------------------------


def test_of_two_writers_racing_for_one_manifest_exactly_one_gets_it(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from memprobe.results.files import write_json_exclusive

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
    from memprobe.core.errors import UsageError

    write_json_atomic(tmp_path / "manifest.json", {"schema_version": SCHEMA_VERSION, "status": "complete"})
    (tmp_path / name).write_bytes(content)
    with pytest.raises(UsageError) as info:
        ResultSet.load(tmp_path)
    assert str(tmp_path / name) in str(info.value) and words in str(info.value)


def test_a_run_record_edited_by_hand_is_named(tmp_path: Path) -> None:
    from memprobe.core.errors import UsageError

    write_json_atomic(tmp_path / "manifest.json", {"schema_version": SCHEMA_VERSION})
    (tmp_path / "runs" / "a").mkdir(parents=True)
    write_json_atomic(tmp_path / "runs" / "a" / "meta.json", {"run_id": "a", "status": "ok", "spec": {}})
    with pytest.raises(UsageError) as info:
        files.check_run_records(tmp_path)
    assert "meta.json" in str(info.value) and "spec.backend" in str(info.value)


def test_a_parquet_file_that_is_not_memprobes_is_named(tmp_path: Path) -> None:
    from memprobe.core.errors import UsageError

    write_json_atomic(tmp_path / "manifest.json", {"schema_version": SCHEMA_VERSION})
    pd.DataFrame({"x": [1, 2]}).to_parquet(tmp_path / "progress.parquet")
    with pytest.raises(UsageError) as info:
        ResultSet.load(tmp_path)
    assert "progress.parquet" in str(info.value) and "run_id" in str(info.value)


def test_tables_consolidate_into_a_folder_whose_name_is_not_utf8(tmp_path: Path) -> None:
    import os

    root = Path(os.fsdecode(os.fsencode(tmp_path) + b"/r\xff"))
    w = RunWriter(root / "runs" / "a")
    w.append("samples", [{**ROW, "t": 0.1, "pid": 7, "rss_mb": 1.0}])
    w.write_meta(run_record("a"))
    w.close()
    write_json_atomic(root / "manifest.json", {"schema_version": SCHEMA_VERSION})
    gather.consolidate(root)
    assert list(ResultSet.load(root).tables["samples"]["pid"]) == [7]


def test_a_write_error_says_what_to_do_for_its_cause(tmp_path: Path) -> None:
    import errno

    full = ResultsWriteError(tmp_path / "x", OSError(errno.ENOSPC, "No space left on device"))
    gone = ResultsWriteError(tmp_path / "x", OSError(errno.ENOENT, "No such file or directory"))
    denied = ResultsWriteError(tmp_path / "x", OSError(errno.EACCES, "Permission denied"))
    assert "free some space" in str(full)
    assert "deleted or moved" in str(gone) and "space" not in str(gone)
    assert "may not write there" in str(denied)
    # Any other cause: its own words, no advice that does not apply (before: "free some space").
    folder = ResultsWriteError(tmp_path / "x", OSError(errno.EISDIR, "Is a directory"))
    assert str(folder) == f"cannot write {tmp_path / 'x'}: Is a directory. What was saved before is intact"


def test_two_writers_of_one_file_at_once_each_rename_a_whole_file_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `memprobe report` of one folder at once write its summary.json and report.html at
    the same moments: each writes a temporary name of its own and renames it, the last rename's
    file staying whole (before: one fixed temporary name, which the second writer removed under
    the first: "its folder was deleted or moved", 2 of 6 tries)."""
    path = tmp_path / "report.html"
    real_replace = os.replace
    others: list[str] = []

    def replace(src: Path, dst: Path) -> None:
        if not others:  # the other memprobe writes the same file, start to end, just before
            others.append("second")
            files.write_text_atomic(path, "second")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    files.write_text_atomic(path, "first")
    assert path.read_text() == "first" and others == ["second"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_gathering_a_folder_from_someone_else_writes_through_no_link_left_in_it(tmp_path: Path) -> None:
    """A killed session's folder (rows in JSON lines) holding symbolic links to a file of the
    user's at the names memprobe's gathering wrote to (``.samples.parquet.0.spool``,
    ``.runs.parquet.tmp``): gathered into files of its own, the user's file untouched (before:
    the spool was opened through the link, the samples' Parquet data written into ~/.bashrc
    and samples.parquet left a link to it)."""
    root = tmp_path / "folder"
    w = RunWriter(root / "runs" / "a")
    w.append("samples", [{**ROW, "t": 0.1, "pid": 7, "rss_mb": 1.0}])
    w.write_meta(run_record("a"))
    w.close()
    write_json_atomic(root / "manifest.json", {"schema_version": SCHEMA_VERSION})
    precious = tmp_path / "bashrc"
    precious.write_text("export KEEP=1\n")
    for name in (".samples.parquet.0.spool", ".runs.parquet.tmp", ".summary.json.tmp"):
        (root / name).symlink_to(precious)
    gather.consolidate(root)
    assert precious.read_text() == "export KEEP=1\n"
    assert not (root / "samples.parquet").is_symlink()
    assert list(ResultSet.load(root).tables["samples"]["pid"]) == [7]


# -- one owner of the folder: create, manifest, finish, open (issue 14) ------------------------

V1 = Path(__file__).resolve().parents[1] / "data" / "results-v1"  # written by schema version 1
MANIFEST_KEYS = {
    "schema_version",
    "kind",
    "scenario",
    "scenario_path",
    "description",
    "status",
    "started",
    "finished",
    "environment",
    "runs",
    "writer",
}


def _create(out: Path | None, kind: str = "scenario", **changes) -> results.ResultsFolder:
    args = {"kind": kind, "name": "n", "description": "d", "environment": {"cpu_count": 2}, "runs": ["a"]}
    args["writer"] = process_identity(os.getpid())  # this process: alive
    return results.ResultsFolder.create(out, **{**args, **changes})


@pytest.mark.parametrize("kind", results.KINDS)
def test_every_kind_of_folder_gets_the_same_manifest(tmp_path: Path, kind: str) -> None:
    folder = _create(tmp_path / kind, kind, name=f"{kind}-x", description=f"{kind} of x")
    manifest = json.loads((tmp_path / kind / "manifest.json").read_text())
    assert set(manifest) == MANIFEST_KEYS
    assert manifest["kind"] == kind and manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["status"] == "running" and manifest["finished"] is None
    assert manifest["description"] == f"{kind} of x" and manifest["runs"] == ["a"]
    folder.finish("complete")
    manifest = json.loads((tmp_path / kind / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["finished"] >= manifest["started"]


def test_a_default_folder_is_named_by_the_one_rule_and_never_shared(tmp_path: Path) -> None:
    first = _create(None, "record", name="record-train", base=tmp_path / "reports")
    second = _create(None, "record", name="record-train", base=tmp_path / "reports")
    assert first.root.parent == tmp_path / "reports"
    assert first.root.name.startswith("record-train-") and first.root.name.endswith("Z")
    assert second.root.name.startswith(first.root.name) and second.root != first.root  # ...Z-2 in one second


def test_a_folder_that_holds_results_or_other_files_is_refused(tmp_path: Path) -> None:
    from memprobe.core.errors import UsageError

    _create(tmp_path / "done")
    with pytest.raises(UsageError, match="already holds results"):
        _create(tmp_path / "done", "profile")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        _create(tmp_path / "busy", "record")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_only_the_results_folder_names_the_manifest_file() -> None:
    """One writer per file format: run, record/watch and profile() all go through ResultsFolder."""
    package = Path(memprobe.__file__).parent
    naming = sorted(
        str(p.relative_to(package)) for p in package.rglob("*.py") if '"manifest.json"' in p.read_text()
    )
    assert naming == ["results/folder.py"]


def test_the_results_package_reads_no_process() -> None:
    """memprobe.results knows files: who writes a folder and whether it still runs come from the
    caller (the probe's procfs), so it imports nothing of memprobe.probe, at any depth of a module."""
    import ast

    package = Path(memprobe.__file__).parent / "results"
    imported = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add((path.name, node.module))
            elif isinstance(node, ast.Import):
                imported.update((path.name, alias.name) for alias in node.names)
    assert not [(f, m) for f, m in imported if m.startswith("memprobe.probe")]


def test_profile_writes_the_same_manifest_and_a_summary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """profile()'s folder, with the run itself replaced by one that failed before sampling."""
    from memprobe.run import api
    from memprobe.run.runner import RunState

    def failed_run(spec, run_dir: Path, **kw) -> RunState:
        state = RunState(spec, 0, 1, status="failed", error={"type": "X", "message": "no"})
        w = RunWriter(run_dir)
        w.write_meta(state.meta())
        w.close()
        return state

    monkeypatch.setattr(api, "execute", failed_run)
    result = api.profile("memprobe.datasets.records:build", out=tmp_path / "p", workers=1)
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert set(manifest) == MANIFEST_KEYS and manifest["kind"] == "profile"
    assert manifest["status"] == "complete" and manifest["finished"] >= manifest["started"]
    assert "memprobe.datasets.records:build" in manifest["description"]
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["kind"] == "profile" and [r["status"] for r in summary["runs"]] == ["failed"]
    assert result.results_dir == tmp_path / "p" and result.summary.status == "failed"


def test_sampler_statistics_come_from_one_function() -> None:
    from memprobe.probe.sampler import Sampler, SamplerSettings

    s = Sampler(1, lambda table, rows: None, SamplerSettings())
    s.cpu_s, s.pss_round_costs, s.cheap_round_costs = 0.2, [0.01, 0.03], [0.001]
    assert s.stats(10.0) == {
        "cpu_s": 0.2,
        "cpu_share": 0.02,
        "pss_rounds": 2,
        "cheap_rounds": 1,
        "pss_round_mean_s": 0.02,
        "cheap_round_mean_s": 0.001,
    }


# -- schema versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "manifest, words",
    [
        ({"schema_version": 99}, ["schema version 99", "newer memprobe", "reads schema versions 1, 2, 3"]),
        ({"schema_version": "2"}, ["schema version '2'", "reads schema versions 1, 2, 3"]),
        ({"schema_version": True}, ["schema version True", "reads schema versions 1, 2, 3"]),
        ({"status": "complete"}, ["no schema_version", "reads schema versions 1, 2, 3"]),
    ],
)
def test_a_schema_version_this_memprobe_does_not_read_is_refused_saying_which(
    tmp_path: Path, manifest: dict, words: list[str]
) -> None:
    from memprobe.core.errors import SchemaVersionError, UsageError

    write_json_atomic(tmp_path / "manifest.json", manifest)
    with pytest.raises(SchemaVersionError) as info:
        ResultSet.load(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'manifest.json'}: ")
    assert all(w in message for w in words), message
    assert isinstance(info.value, UsageError)  # exit code 2 from the CLI


def test_memprobe_report_of_a_newer_folder_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    from memprobe.cli import main

    write_json_atomic(
        tmp_path / "manifest.json", {"schema_version": SCHEMA_VERSION + 1, "status": "complete"}
    )
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"schema version {SCHEMA_VERSION + 1}" in err and "manifest.json" in err
    assert not (tmp_path / "report.html").exists()


def _copy_v1(kind: str, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(V1 / kind, tmp_path / kind))


@pytest.mark.parametrize("kind", ["scenario", "record"])
def test_a_folder_written_by_schema_version_1_loads_with_its_milestones(tmp_path: Path, kind: str) -> None:
    from memprobe.analysis.runs import summarize_all

    loaded = ResultSet.load(_copy_v1(kind, tmp_path))
    assert loaded.manifest["schema_version"] == 1
    (meta,) = loaded.metas
    assert "marks" not in meta and {"warm", "done"} <= set(meta["milestones"])
    (summary,) = summarize_all(loaded)
    # The growth window comes from the milestones: without them no verdict and no items/s.
    assert summary.status == "ok" and summary.verdict in ("flat", "growing")
    if kind == "scenario":
        assert summary.items_per_s is not None and summary.items_per_s > 0
    else:
        assert meta["milestones"]["first_mark"] > 0 and meta["marks_recorded"] is True  # mark() counted items


def test_memprobe_report_renders_a_folder_written_by_schema_version_1(tmp_path: Path, capsys) -> None:
    from memprobe.cli import main

    root = _copy_v1("scenario", tmp_path)
    meta = (root / "runs" / "list-fork-w2" / "meta.json").read_text()
    assert main(["report", str(root)]) == 0
    page = (root / "report.html").read_text(encoding="utf-8")
    data = re.search(r'<script type="application/json" id="memprobe-data">(.*?)</script>', page, re.DOTALL)
    shapes = json.loads(data.group(1))["charts"][0]["layouts"]["time"]["shapes"]  # type: ignore[union-attr]
    # The milestones, read from version 1's "marks": the growth window shaded, dotted lines at events.
    assert {s["type"] for s in shapes} == {"rect", "line"}
    (run,) = json.loads((root / "summary.json").read_text())["runs"]
    assert run["status"] == "ok" and run["verdict"] in ("flat", "growing") and run["items_per_s"] > 0
    # Read in the new shape, never rewritten: the folder stays what version 1 wrote.
    assert json.loads((root / "manifest.json").read_text())["schema_version"] == 1
    assert (root / "runs" / "list-fork-w2" / "meta.json").read_text() == meta


# -- crash safety of the folder ----------------------------------------------------------------


def test_memprobe_report_finishes_a_folder_whose_memprobe_was_killed(tmp_path: Path, capsys) -> None:
    """What SIGKILL of memprobe mid-run leaves: status running, a dead writer, rows in JSON lines."""
    from memprobe.cli import main
    from memprobe.probe.sampler import SAMPLE_COLUMNS

    row = {"pid": 7, "role": "main", "worker": -1, "tier": "cheap", "missing": False, "rss_mb": 5.0}
    folder = _create(tmp_path / "killed", runs=["a", "b"])
    folder.manifest["writer"] = {**folder.manifest["writer"], "pid": 0}  # nobody writes it any more
    folder.save()
    w = RunWriter(folder.root / "runs" / "a")
    w.append("samples", [{**dict.fromkeys(SAMPLE_COLUMNS), **row, "t": 0.1 * i} for i in range(3)])
    w.write_meta(
        {
            "run_id": "a",
            "index": 0,
            "status": "running",
            "milestones": {},
            "spec": {
                "backend": "list",
                "mode": "fork",
                "workers": 2,
                "verdict": {"growth_threshold_mb": 50.0},
            },
        }
    )
    w.close()
    assert main(["report", str(folder.root)]) == 0
    assert "ended before finishing" in capsys.readouterr().err
    manifest = json.loads((folder.root / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["finished"] is not None
    meta = json.loads((folder.root / "runs" / "a" / "meta.json").read_text())
    assert meta["status"] == "interrupted" and "killed?" in meta["error"]["message"]
    assert len(pd.read_parquet(folder.root / "samples.parquet")) == 3  # the rows saved before are kept
    assert not (folder.root / "runs" / "a" / "samples.jsonl").exists()
    assert (folder.root / "report.html").exists()


# -- values from someone else: checked when loading, one line naming file and field (issue 23) --


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them


def _edit_table(path: Path, change) -> None:
    df = pd.read_parquet(path)
    change(df)
    df.to_parquet(path, index=False)


RUN_META = "runs/list-fork-w2/meta.json"
HAND_EDITS = {  # the cases: each was a traceback (OverflowError, TypeError, KeyError, ...)
    "items Infinity": (RUN_META, lambda m: m.update(items=float("inf")), "items: inf is out of range"),
    "workers as text": (
        RUN_META,
        lambda m: m["spec"].update(workers="2"),
        "spec.workers: '2' is not a whole number",
    ),
    "verdict empty": (
        RUN_META,
        lambda m: m["spec"].update(verdict={}),
        "spec.verdict.growth_threshold_mb: missing",
    ),
    "milestone as text": (
        RUN_META,
        lambda m: m["marks"].update(warm="2"),
        "milestones.warm: '2' is not a number",
    ),
    "run id that retitles the terminal": (
        RUN_META,
        lambda m: m.update(run_id="a\x1b]0;HACKED\x07\x1b[2J"),
        "run_id: 'a\\x1b]0;HACKED\\x07\\x1b[2J' holds control characters; allowed: printable text",
    ),
    "environment as text": (
        "manifest.json",
        lambda m: m.update(environment="x"),
        "environment: 'x' is not an object",
    ),
    "rss_mb as text": (
        "samples.parquet",
        lambda df: df.__setitem__("rss_mb", df["rss_mb"].astype(str)),
        "column 'rss_mb': holds '",
    ),
    "NaN in t": (
        "samples.parquet",
        lambda df: df.__setitem__("t", df["t"].where(df.index != 3)),
        "column 't': 1 rows without a value",
    ),
    "null items (found by the fuzz test: NaN in the page's chart data)": (
        "progress.parquet",
        lambda df: df.__setitem__("items", df["items"].where(df.index != 1)),
        "column 'items': 1 rows without a value",
    ),
    "null role (found by the fuzz test: TypeError in a recorded job)": (
        "samples.parquet",
        lambda df: df.__setitem__("role", df["role"].where(df.index != 2)),
        "column 'role': 1 rows without a value",
    ),
    "milestones null (found by the fuzz test: AttributeError)": (
        RUN_META,
        lambda m: m.update(marks=None),
        "milestones: None is not an object; allowed: an object (or no such key)",
    ),
    "items column dropped": (
        "progress.parquet",
        lambda df: df.pop("items"),
        "column 'items': missing",
    ),
}


@pytest.mark.parametrize("case", list(HAND_EDITS))
def test_a_hand_edited_value_is_refused_naming_file_and_field(tmp_path: Path, capsys, case: str) -> None:
    from memprobe.cli import main

    root = _copy_v1("scenario", tmp_path)
    name, change, words = HAND_EDITS[case]
    (_edit_table if name.endswith(".parquet") else _edit_json)(root / name, change)
    assert main(["report", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"memprobe: error: {root / name}: ") and words in err, err
    assert not (root / "report.html").exists()
    assert (root / "summary.json").read_bytes() == (V1 / "scenario" / "summary.json").read_bytes()
    assert main(["compare", str(V1 / "scenario"), str(root), "-o", str(tmp_path / "c.html")]) == 2
    assert words in capsys.readouterr().err and not (tmp_path / "c.html").exists()


def test_bytes_that_are_not_utf8_are_shown_escaped(tmp_path: Path, capsys) -> None:
    """A command line saved with a byte that is not UTF-8 (``true $'\\xff'``: JSON keeps it as
    \\udcff) and a folder named with one: the report and the terminal show ``\\xff``."""
    import os
    import shutil

    from memprobe.cli import main

    root = Path(shutil.copytree(V1 / "record", os.fsdecode(os.fsencode(tmp_path) + b"/rec\xff")))
    _edit_json(root / "runs/job/meta.json", lambda m: m["spec"].update(command=["true", "\udcff"]))
    _edit_json(root / "runs/job/meta.json", lambda m: m["processes"][0].update(command="true \udcff"))
    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    assert "rec\\xff/report.html" in out
    page = (root / "report.html").read_text(encoding="utf-8")  # strict: no lone surrogate written
    assert "true \\xff" in page
    b = Path(shutil.copytree(root, tmp_path / "b"))  # two recordings (a scenario folder is refused)
    assert main(["compare", str(root), str(b)]) == 0
    assert "A: rec\\xff: true \\xff" in capsys.readouterr().out
    compared = (b / "compare.html").read_text(encoding="utf-8")
    assert "rec\\xff" in compared and "true \\xff" in compared


def test_a_file_name_from_the_folder_is_shown_with_its_control_characters_escaped(
    tmp_path: Path, capsys
) -> None:
    """A run folder named with an escape sequence (clear the screen, retitle the terminal): the
    one-line error names it escaped, so the terminal shows it rather than obeys it."""
    from memprobe.cli import main

    root = _copy_v1("scenario", tmp_path)
    odd = root / "runs" / "x\x1b]0;HACKED\x07\x1b[2J"
    odd.mkdir()
    (odd / "meta.json").write_text("{")
    assert main(["report", str(root)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and err.count("\n") == 1
    assert "runs/x\\x1b]0;HACKED\\x07\\x1b[2J/meta.json: not a memprobe JSON file" in err


# -- a page of a session so far (memprobe report while it records) --------------------------------


def test_a_page_so_far_is_written_while_running_and_not_once_finished(tmp_path: Path) -> None:
    folder = _create(tmp_path / "out", kind="record")
    written: list[str] = []
    assert folder.write_while_running(lambda: written.append("so far"))
    assert written == ["so far"]
    # Another process (the recorder) finished the folder: the reader's copy of the manifest is stale.
    results.ResultsFolder.open(tmp_path / "out").finish("complete")
    assert not folder.write_while_running(lambda: written.append("late"))
    assert written == ["so far"]


def test_finishing_waits_for_a_page_so_far_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder's status change waits for the lock the reader holds while it writes: a page
    so far is written before the session's own, never after (over) it."""
    folder = _create(tmp_path / "out", kind="record")
    waiting = threading.Event()
    real_flock = fcntl.flock

    def flock(fd: int, op: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            waiting.set()  # the finishing thread is about to wait for the lock
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    finisher = threading.Thread(
        target=lambda: results.ResultsFolder.open(tmp_path / "out").finish("complete")
    )

    def write() -> None:
        finisher.start()
        waiting.wait()
        status = json.loads((tmp_path / "out" / "manifest.json").read_text())["status"]
        assert status == "running"  # it cannot change while the page is being written

    assert folder.write_while_running(write)
    finisher.join()
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["status"] == "complete"


def test_the_banner_of_a_session_seen_running_says_still_recording_as_of() -> None:
    from memprobe.report import session

    manifest = {
        "kind": "record",
        "status": "running",
        "runs": ["a"],
        "seen_running": {"as_of": 1795720035.5, "writer_pid": 42},
    }
    level, text = session.banner(manifest, [])
    assert level == "warn" and text.startswith("Still recording, as of 19:07:15 UTC (memprobe pid 42")
    # A scenario's memprobe run, still going: running, not recording.
    assert session.banner({**manifest, "kind": "scenario"}, [])[1].startswith(
        "Still running, as of 19:07:15 UTC"
    )
    # Without the reader's word that the writer runs, running may mean crashed: said as before.
    level, text = session.banner({"status": "running", "runs": ["a"]}, [])
    assert level == "error" and "still running or it crashed" in text


def test_a_folder_deleted_before_its_finish_is_said_as_before_not_a_lock_error(tmp_path: Path) -> None:
    """The finish's lock is no reason to fail: a folder deleted under it gets the write's own
    error (naming the file), as it did before the lock."""
    import shutil

    folder = _create(tmp_path / "gone", kind="record")
    shutil.rmtree(tmp_path / "gone")
    with pytest.raises(ResultsWriteError, match=r"manifest\.json"):
        folder.finish("complete")


def test_a_report_made_while_the_session_ends_leaves_the_sessions_own_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memprobe report` of a session still going whose memprobe finishes it meanwhile (its rows
    moved into Parquet while they were read, or its status changed before the page was written):
    no page, no summary of ours, and it says why, exit 0; never a traceback."""
    from memprobe.cli.report import report_so_far

    root = tmp_path / "out"
    _create(root, kind="record")

    def finished_while_read(self: results.ResultsFolder) -> ResultSet:
        results.ResultsFolder.open(self.root).finish("complete")  # the recorder's own finish
        raise FileNotFoundError("samples.jsonl")  # its rows moved under the reader

    monkeypatch.setattr(results.ResultsFolder, "load", finished_while_read)
    assert report_so_far(root, os.getpid()) == 0
    assert "the session ended while this report was made" in capsys.readouterr().err
    assert not (root / "report.html").exists() and not (root / "summary.json").exists()
