"""`memprobe run` with repeats and a worker sweep, for real: the runs go in interleaved rounds,
summary.json's medians and spreads are those of its runs, and the answer is said (~30 s on 2
idle cores)."""

from __future__ import annotations

import json
import statistics

import pytest

from memprobe.results.folder import ResultSet
from memprobe.run.scenario import parse_scenario
from memprobe.run.session import run_scenario

pytestmark = pytest.mark.slow

SWEEP = """\
name: sweep
dataset: {records: 20000}
backends: [numpy]
modes: [fork]
workers: [0, 1]
repeats: 3
loader: {batch_size: 64, items: 3200}
timeout_s: 120
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("sweep") / "results"
    result = run_scenario(parse_scenario(SWEEP, "sweep.yaml"), out, render=False)
    assert [s.status for s in result.summaries] == ["ok"] * 6, [s.error for s in result.summaries]
    return out, result


def test_the_repeats_run_in_interleaved_rounds(swept) -> None:
    out, _ = swept
    metas = ResultSet.load(out).metas
    order = [m["run_id"] for m in sorted(metas, key=lambda m: m["started"])]
    assert order == [f"numpy-{run}-r{r}" for r in (1, 2, 3) for run in ("single-w0", "fork-w1")]


def test_summary_json_states_the_medians_and_spreads_of_its_runs(swept) -> None:
    out, result = swept
    doc = json.loads((out / "summary.json").read_text())
    runs = {r["run_id"]: r for r in doc["runs"]}
    groups = {g["workers"]: g for g in doc["repeats"]}
    assert set(groups) == {0, 1}
    for g in groups.values():
        mine = [runs[i] for i in g["run_ids"]]
        assert g["runs"] == 3
        for figure in ("items_per_s", "time_per_100_batches_s", "cpu_ms_per_item", "total_pss_peak_mb"):
            values = [r[figure] for r in mine]
            assert g[figure]["median"] == pytest.approx(statistics.median(values), abs=1e-3)
            assert g[figure]["std"] == pytest.approx(statistics.stdev(values), abs=1e-3)
            assert (g[figure]["min"], g[figure]["max"]) == pytest.approx((min(values), max(values)), abs=1e-3)
    for r in runs.values():  # time per 100 batches: 100 x 64 items at the run's items/s
        assert r["time_per_100_batches_s"] == pytest.approx(6400 / r["items_per_s"], rel=1e-3, abs=1e-3)
    (curve,) = doc["workers"]["curves"]
    assert curve["workers"] == [0, 1] and curve["mode"] == "fork"
    sentence = curve["frontier"]["sentence"]
    assert sentence.startswith("numpy, fork: the fewest workers within 5 % of the best items/s: ")
    assert result.sweep.sentences()[0] == sentence  # the terminal says what summary.json says
