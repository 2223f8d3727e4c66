"""The HTML report and the compare page, rendered from a real (tiny) results folder.

A real session (list and numpy records, fork, 2 workers, plus one run that fails on purpose) runs
once per test session (``report_results`` in tests/conftest.py, shared with the browser tests);
the tests here copy that folder and change what they need
(an interrupted manifest, hostile names, a "fixed" B side) before rendering it again. The
figures, words and compare logic on made-up data are tested in tests/unit/test_report.py.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from memprobe.analysis.runs import analyse_all
from memprobe.pages import folder_page, write_compare
from memprobe.report import render
from memprobe.results.folder import ResultSet

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def chart_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="memprobe-data">(.*?)</script>', html, re.S)
    assert m, "no chart data in the page"
    return json.loads(m.group(1))


class Tags(HTMLParser):
    """Collects start tags with their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(html)
    return parser.tags


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results_dir(report_results: Path) -> Path:
    """The shared real results folder (tests/conftest.py): list-fork-w2, numpy-fork-w2, and
    list-single-w0 failing early."""
    return report_results


@pytest.fixture(scope="module")
def page(results_dir: Path) -> str:
    return folder_page(results_dir).read_text(encoding="utf-8")


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / "report.html").unlink(missing_ok=True)
    return dst


def edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_write_report_writes_report_html_atomically(results_dir: Path, page: str) -> None:
    path = results_dir / "report.html"
    assert path.exists() and path.read_text(encoding="utf-8") == page
    assert not list(results_dir.glob(".*.tmp"))
    again = ResultSet.load(results_dir)
    assert render(again, analyse_all(again)) == page  # a pure function of the saved results


def test_page_is_self_contained_and_offline(page: str) -> None:
    for tag, attrs in tags(page):
        assert not (tag == "script" and "src" in attrs), attrs
        assert not (tag == "link" and attrs.get("rel") == "stylesheet"), attrs
    assert page.count("* plotly.js v") == 1  # plotly.js inlined exactly once
    assert page.count('id="memprobe-data"') == 1


def test_headline_states_each_runs_verdict_with_numbers(page: str) -> None:
    headline = page[page.index('id="headline"') : page.index('id="matrix"')]
    for label in ("list × fork (2 workers):", "numpy × fork (2 workers):", "list × single (no workers):"):
        assert label in headline
    assert re.search(
        r"list × fork \(2 workers\): (each of 2 workers grew|stayed flat \([+−][\d.]+ MB per worker"
        r"|no verdict — the iteration window)",
        headline,
    )
    assert "peak total PSS" in headline and " MB" in headline
    assert "copy memory" in page or "No run&#39;s memory grew" in page


def test_every_chart_has_a_div_and_drawable_data(page: str) -> None:
    charts = chart_data(page)["charts"]
    divs = [a["id"] for t, a in tags(page) if t == "div" and "chart" in a.get("class", "").split()]
    assert sorted(divs) == sorted(c["id"] for c in charts)
    assert f'data-charts-expected="{len(charts)}"' in page
    kinds = {c["kind"] for c in charts}
    assert {"pss_by_role", "uss", "faults", "rss_vs_pss", "items_rate", "runs_pss"} <= kinds
    for c in charts:
        assert c["data"], c["id"]
        for axis, xs in c["x"].items():
            assert len(xs) == len(c["data"]), (c["id"], axis)
            for trace, x in zip(c["data"], xs, strict=True):
                assert len(x) == len(trace["y"]), (c["id"], axis, trace["name"])
        assert any(v is not None for trace in c["data"] for v in trace["y"]), c["id"]


def test_per_run_charts_share_seconds_and_items_axes(page: str) -> None:
    charts = [
        c for c in chart_data(page)["charts"] if c["kind"] not in ("runs_pss", "bars")
    ]  # per-run charts only
    for c in charts:
        assert set(c["x"]) == {"time", "items"} and set(c["layouts"]) == {"time", "items"}
        assert c["layouts"]["items"]["xaxis"]["title"]["text"] == "items fetched"
    by_run: dict[str, set] = {}
    for c in charts:
        by_run.setdefault(c["id"].split("-")[0], set()).add(tuple(c["layouts"]["time"]["xaxis"]["range"]))
    assert all(len(ranges) == 1 for ranges in by_run.values())  # one x range per run: charts line up


def test_failed_run_shows_its_error_and_its_samples(page: str) -> None:
    article = page[page.index('id="run-2-list-single-w0"') :]
    article = article[: article.index("</article>")]
    assert "Run failed" in article
    assert "injected fault at index 100" in article
    assert "The charts show the samples recorded before it ended" in article
    assert re.search(r'id="c2-pss"', article)
    env = page[page.index('id="environment"') :]
    assert "Runs that did not finish cleanly" in env and "list × single (no workers)" in env


def test_environment_and_scenario_as_run(page: str) -> None:
    env = page[page.index('id="environment"') :]
    for name in (
        "memprobe",
        "torch",
        "Python",
        "GIL",
        "kernel",
        "CPU count",
        "total RAM",
        "started",
        "duration",
    ):
        assert f"<th>{name}</th>" in env
    assert "unit-report" in env and "records: 50000" in env


def test_complete_session_has_no_banner(page: str) -> None:
    assert 'id="banner"' not in page


def test_interrupted_session_shows_a_banner(results_dir: Path, tmp_path: Path) -> None:
    root = copy_of(results_dir, tmp_path / "interrupted")
    edit_json(root / "manifest.json", status="interrupted")
    html = folder_page(root).read_text(encoding="utf-8")
    banner = html[html.index('id="banner"') :]
    assert "This session was interrupted" in banner[:400]


def test_text_from_results_is_escaped(results_dir: Path, tmp_path: Path) -> None:
    root = copy_of(results_dir, tmp_path / "evil")
    edit_json(root / "manifest.json", scenario=EVIL, description=EVIL)
    (root / "scenario.yaml").write_text(f"name: '{EVIL}'\n")
    meta_path = root / "runs" / "list-single-w0" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["error"]["message"] = EVIL
    meta["spec"]["backend"] = "</script><b>"
    meta_path.write_text(json.dumps(meta))
    html = folder_page(root).read_text(encoding="utf-8")
    assert "<img src=x onerror=alert(1)>" not in html and "<script>alert(" not in html
    assert "<b> × single" not in html
    assert html.count("<script") == 3  # plotly.js, the data, the page's script: nothing injected
    assert html.count("</script>") == 3
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    names = {t["name"] for c in chart_data(html)["charts"] for t in c["data"]}
    assert "&lt;/script&gt;&lt;b&gt; × single (no workers)" in html
    assert "</script><b> × single (no workers)" in names  # the JSON round-trips to the real name


def test_downsampled_series_say_so(results_dir: Path) -> None:
    results = ResultSet.load(results_dir)
    analysed = analyse_all(results)
    full, small = render(results, analysed), render(results, analysed, max_points=12)
    assert "nothing was downsampled" in full and "downsampled for this page" not in full
    assert "downsampled for this page" in small
    note = small[small.index('id="downsampling-note"') :]
    assert "about 12 points per line" in note[:300] and "samples.parquet" in note[:600]
    longest = max(len(t["y"]) for c in chart_data(small)["charts"] for t in c["data"])
    assert longest <= 2 * 12 + 2


# -- the compare page --------------------------------------------------------------------------


def test_compare_page_matches_runs_and_highlights_deltas(results_dir: Path, tmp_path: Path) -> None:
    before = results_dir
    after = copy_of(results_dir, tmp_path / "after<b>")
    samples = pd.read_parquet(after / "samples.parquet")
    fix = samples["run_id"] == "list-fork-w2"
    for col in ("pss_mb", "uss_mb", "rss_mb"):
        samples.loc[fix, col] = samples.loc[fix, col] * 0.5
    samples.to_parquet(after / "samples.parquet", index=False)
    shutil.rmtree(after / "runs" / "list-single-w0")  # only in A
    meta_path = after / "runs" / "numpy-fork-w2" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["spec"]["workers"] = 3  # unmatched on both sides: numpy x fork with 2 vs 3 workers
    meta_path.write_text(json.dumps(meta))
    out = write_compare(before, after, tmp_path / "out" / "compare.html")
    html = out.read_text(encoding="utf-8")
    table = html[html.index('id="table"') : html.index('id="unmatched"')]
    assert table.count('<tr class="verdict-') == 1 and "list × fork (2 workers)" in table
    assert '<td class="better">' in table  # peak total PSS halved
    unmatched = html[html.index('id="unmatched"') : html.index('id="chart"')]
    only_a, only_b = unmatched.split("Only in B")
    assert "list × single (no workers)" in only_a and "numpy × fork (2 workers)" in only_a
    assert "numpy × fork (3 workers)" in only_b
    assert "after&lt;b&gt;" in html and "after<b>" not in html
    assert len(chart_data(html)["charts"]) == 1
    assert "The two folders ran the same scenario file." in html
