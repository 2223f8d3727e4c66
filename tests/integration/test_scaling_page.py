"""A session that runs one mode at 1 and 2 workers: summary.json's ``scaling`` and the report's
scaling chart from real runs, and the contention sentence on the page when its rule fires (the
rule itself, on both sides, is tested in tests/unit/test_scaling.py)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
from pathlib import Path

import pytest

from memprobe.core.scaling import Point, Scaling
from memprobe.pages import folder_page
from memprobe.run.scenario import parse_scenario
from memprobe.run.session import run_scenario

RENDER = importlib.import_module("memprobe.report.render")  # the package exports a function of that name
SCENARIO = "{name: scaling, dataset: {records: 20000}, backends: [list], modes: [thread], workers: [1, 2]}"


def chart_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="memprobe-data">(.*?)</script>', html, re.S)
    assert m, "no chart data in the page"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scaling") / "results"
    result = run_scenario(parse_scenario(SCENARIO, "scaling.yaml"), out, render=True)
    assert [s.status for s in result.summaries] == ["ok", "ok"], [s.error for s in result.summaries]
    return out


def test_summary_json_and_the_page_show_how_threads_scaled(scaled: Path) -> None:
    summary = json.loads((scaled / "summary.json").read_text())
    rates = {r["workers"]: r["items_per_s"] for r in summary["runs"]}
    (g,) = summary["scaling"]
    assert (g["mode"], g["backend"], g["base_workers"], g["max_workers"]) == ("thread", "list", 1, 2)
    assert [p["workers"] for p in g["points"]] == [1, 2]
    assert g["efficiency"] == pytest.approx(rates[2] / (2 * rates[1]), rel=1e-3)
    assert all(p["cpu_ms_per_item"] > 0 for p in g["points"])
    html = (scaled / "report.html").read_text(encoding="utf-8")
    (chart,) = [c for c in chart_data(html)["charts"] if c["id"] == "c-scaling"]
    assert [t["name"] for t in chart["data"]] == ["thread · list", "thread · list"]
    assert chart["data"][1]["y"][1] == pytest.approx(g["efficiency"], abs=1e-3)
    assert 'id="c-scaling"' in html and 'id="scaling"' in html


def test_the_page_says_why_when_the_rule_fires(
    scaled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sentence from memprobe.core.scaling.contention_note, on the page under the chart."""
    root = Path(shutil.copytree(scaled, tmp_path / "copy"))
    assert 'id="contention-note"' not in folder_page(root).read_text(encoding="utf-8")  # GIL on: none

    def made_up(summaries: list) -> list[Scaling]:
        def group(backend: str, e: float, cpu: float) -> Scaling:
            return Scaling(
                "thread",
                backend,
                False,
                (Point(1, 1000.0, 0.01, 1.0, ("a",)), Point(2, 2000.0 * e, cpu, e, ("b",))),
            )

        # The list's CPU per item rising 1.6x, the buffer's not: the rule's signature.
        return [group("list", 0.55, 0.016), group("arrow", 0.9, 0.0105)]

    monkeypatch.setattr(RENDER, "scaling", made_up)
    html = folder_page(root).read_text(encoding="utf-8")
    note = re.search(r'<p class="churn-note" id="contention-note">(.*?)</p>', html, re.S)
    assert note and "thread workers scale poorly on the list dataset" in note.group(1)
    assert "reference count" in note.group(1) and "memprobe.SharedList" in note.group(1)
