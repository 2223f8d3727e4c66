"""Recorded metas of older schema versions are completed in one place, when their folder is loaded
(:mod:`memprobe.results.upgrade`), and summarized as before: tests/data/upgrade holds each
folder's summary as memprobe computed it before the derivation moved out of the analysis (main
at ac4d2e6, where ``record/upgrade.py`` derived it inside the analysis), but for its
``projection`` and ``projection_peak``: since issue 40 the projection scales the recording's
rounds, and its measured cell is the peak total PSS (v1_record's was 17.5 MB beside a peak of 22.3 MB)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from treejobs import generations_job, lightning_job, write_results

from memprobe.analysis.runs import summarize_all
from memprobe.results.folder import ResultSet

DATA = Path(__file__).resolve().parents[1] / "data"
V1_RECORD = DATA / "results-v1" / "record"
EXPECTED = DATA / "upgrade"


def _with_meta(root: Path, change: Callable[[dict], None], version: int | None = None) -> Path:
    run = next((root / "runs").iterdir()) / "meta.json"
    meta = json.loads(run.read_text())
    change(meta)
    run.write_text(json.dumps(meta))
    if version is not None:
        manifest = json.loads((root / "manifest.json").read_text())
        manifest["schema_version"] = version
        (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def v1_record(tmp: Path) -> Path:
    """tests/data/results-v1/record as version 1 wrote it."""
    return V1_RECORD


def v1_before_the_tree(tmp: Path) -> Path:
    """The same job as a version-1 meta written before memprobe classified the tree (before
    6532fbd): each process's role, rank, worker index and ticks, no kind, parent or generation;
    and its second worker not listed (seen only in the samples)."""
    root = Path(shutil.copytree(V1_RECORD, tmp / "v1-before-the-tree"))
    kept = ("pid", "role", "rank", "worker", "first_t", "last_t", "command", "first_pss_t", "last_pss_t")

    def strip(meta: dict) -> None:
        meta["processes"] = [{k: p[k] for k in kept} for p in meta["processes"] if p["worker"] != 1]

    return _with_meta(root, strip)


def v2_lightning(tmp: Path) -> Path:
    """Lightning's DDP recorded by version 2, before the tree named a root with DataLoader
    workers of its own a rank (7fb42a5): its root a launcher, its workers ``worker K``."""
    return _with_meta(write_results(tmp / "v2-lightning", *lightning_job()), lambda m: None, version=2)


def v2_generations(tmp: Path) -> Path:
    """Two generations of forked workers whose meta names no parent and no generation."""

    def older(meta: dict) -> None:
        for p in meta["processes"]:
            if p["worker"] >= 0:
                p["ppid"] = p["generation"] = None

    return _with_meta(write_results(tmp / "v2-generations", *generations_job()), older, version=2)


FOLDERS = {f.__name__: f for f in (v1_record, v1_before_the_tree, v2_lightning, v2_generations)}


def summary_of(root: Path) -> list[dict]:
    return [_rounded(s.to_dict()) for s in summarize_all(ResultSet.load(root))]


def _rounded(value):
    """Floats to 9 significant digits: the same arithmetic on another machine may differ in the last bits."""
    if isinstance(value, float) and math.isfinite(value) and value:
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


@pytest.mark.parametrize("name", FOLDERS)
def test_an_older_recorded_folder_gives_the_summary_it_gave_before(tmp_path: Path, name: str) -> None:
    expected = json.loads((EXPECTED / f"{name}.json").read_text())
    assert summary_of(FOLDERS[name](tmp_path)) == expected


def _listed(root: Path) -> dict[int, dict]:
    (meta,) = ResultSet.load(root).metas
    return {p["pid"]: p for p in meta["processes"]}


def test_an_older_folder_is_loaded_with_every_process_listed_with_all_its_facts(tmp_path: Path) -> None:
    """The analysis takes the list as it is: loading an older folder derives what its meta
    lacks, once (kind from the role, parent, generation), and lists a process only its samples
    hold."""
    before = _listed(v1_before_the_tree(tmp_path))
    assert set(before) == {22798, 22800, 22801}  # 22801: in the samples only
    assert [(before[p]["kind"], before[p]["ppid"], before[p]["generation"]) for p in (22800, 22801)] == [
        ("dataloader", 22798, 0),
        ("dataloader", 22798, 0),
    ]
    assert before[22798]["kind"] == "main" and before[22801]["role"] == "worker 1"
    generations = _listed(v2_generations(tmp_path))
    assert [(generations[p]["ppid"], generations[p]["generation"]) for p in (11, 12, 21, 22)] == [
        (1, 0),
        (1, 0),
        (1, 1),
        (1, 1),
    ]
    lightning = _listed(v2_lightning(tmp_path))
    assert (lightning[10]["kind"], lightning[10]["role"], lightning[100]["role"]) == (
        "rank",
        "rank 0",
        "rank 0 worker 0",
    )


def test_a_folder_of_today_s_version_is_taken_as_written(tmp_path: Path) -> None:
    """Version 4 on, the tree sampler lists every process with all of its facts: nothing is
    derived on load, even where a fact is missing (here a worker's generation, removed by hand)."""
    meta, samples = generations_job()
    meta["processes"][1]["generation"] = None
    root = write_results(tmp_path / "v4", meta, samples)
    assert _listed(root)[11]["generation"] is None
    assert _listed(root)[12]["generation"] == 0


def test_a_process_the_samples_hold_that_a_checkpointed_meta_does_not_list_is_added(tmp_path: Path) -> None:
    """memprobe killed after the meta's last checkpoint: the samples hold a process that started
    later, which the analysis would not see; loading lists it from its rows, whatever the version."""
    meta, samples = generations_job()
    meta["processes"] = [p for p in meta["processes"] if p["pid"] != 22]
    listed = _listed(write_results(tmp_path / "v4", meta, samples))
    assert (listed[22]["role"], listed[22]["worker"], listed[22]["ppid"]) == ("worker 1", 1, 1)
    assert listed[22]["first_t"] == 12.2 and listed[22]["last_t"] == 20.0


def test_a_process_only_the_samples_hold_with_no_worker_index_or_rank_is_listed_not_a_traceback(
    tmp_path: Path,
) -> None:
    """A folder edited by hand (or a row written without them): its rows' worker and rank are
    null; int(NaN) raised ValueError when the list was completed."""
    meta, samples = generations_job()
    meta["processes"] = [p for p in meta["processes"] if p["pid"] != 22]
    samples = samples.astype({"worker": float, "rank": float})
    samples.loc[samples["pid"] == 22, ["worker", "rank"]] = None
    root = write_results(tmp_path / "v4", meta, samples)
    listed = _listed(root)
    assert (listed[22]["worker"], listed[22]["rank"], listed[22]["kind"]) == (-1, -1, "other")
    (summary,) = summarize_all(ResultSet.load(root))
    assert 22 in {p["pid"] for p in summary.processes or []}
