"""Recorded metas of older schema versions are completed in one place, when their folder is loaded
(:mod:`memprobe.results.upgrade`), and summarized as before: tests/data/upgrade holds each
folder's summary as memprobe computed it before the derivation moved out of the analysis (main
at ac4d2e6, where ``record/upgrade.py`` derived it inside the analysis)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from treejobs import generations_job, lightning_job, write_results

from memprobe.analysis import summarize_all
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
