"""The HTML report and the compare page, rendered from a real (tiny) results folder.

One module-scoped fixture runs a real scenario (list and numpy records, fork, 2 workers, plus
one run that fails on purpose); the other tests copy that folder and change what they need
(an interrupted manifest, hostile names, a "fixed" B side) before rendering it again.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memprobe.analysis import RunSummary
from memprobe.report import content, figures, render, write_report
from memprobe.report.compare import Delta, delta, match, METRICS, write_compare
from memprobe.results import ResultSet
from memprobe.scenario import parse_scenario
from memprobe.session import run_scenario

SCENARIO = "{name: unit-report, dataset: {records: 50000}, backends: [list, numpy], modes: [fork], workers: [2]}"
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


# -- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real results folder: list-fork-w2, numpy-fork-w2, and list-single-w0 failing early."""
    scenario = parse_scenario(SCENARIO, "unit-report.yaml")
    runs = scenario.runs()
    failing = dataclasses.replace(runs[0], run_id="list-single-w0", mode="single", workers=0, fault="raise@100",
                                  dataset=dataclasses.replace(runs[0].dataset, records=5000))
    out = tmp_path_factory.mktemp("report") / "results"
    result = run_scenario(scenario, out, runs=[*runs, failing], render=False)
    assert [s.status for s in result.summaries] == ["ok", "ok", "failed"], [s.error for s in result.summaries]
    return out


@pytest.fixture(scope="module")
def page(results_dir: Path) -> str:
    return write_report(results_dir).read_text(encoding="utf-8")


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / "report.html").unlink(missing_ok=True)
    return dst


def edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


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


def summary(**changes: object) -> RunSummary:
    base = dict(backend="list", mode="fork", workers=2, status="ok", error=None,
                items=1000, items_per_s=1000.0, time_to_first_batch_s=0.1, duration_s=5.0,
                total_pss_start_mb=300.0, total_pss_peak_mb=600.0, total_pss_end_mb=600.0, sum_rss_peak_mb=900.0,
                rss_overcount_mb=300.0, worker_uss_start_mb=20.0, worker_uss_growth_mb=120.0,
                worker_uss_growth_max_mb=125.0, main_uss_growth_mb=100.0, growth_per_1k_items_per_worker_mb=0.2,
                growth_threshold_mb=50.0, verdict="growing", expectation=None, expectation_met=None,
                explanation="", sampler_cpu_share=0.01)
    base.update(changes)
    base.setdefault("run_id", f"{base['backend']}-{base['mode']}-w{base['workers']}")
    return RunSummary(**base)


# -- the page from real results --------------------------------------------------------------

def test_write_report_writes_report_html_atomically(results_dir: Path, page: str) -> None:
    path = results_dir / "report.html"
    assert path.exists() and path.read_text(encoding="utf-8") == page
    assert not list(results_dir.glob(".*.tmp"))
    assert render(ResultSet.load(results_dir)) == page  # a pure function of the saved results


def test_page_is_self_contained_and_offline(page: str) -> None:
    for tag, attrs in tags(page):
        assert not (tag == "script" and "src" in attrs), attrs
        assert not (tag == "link" and attrs.get("rel") == "stylesheet"), attrs
    assert page.count("* plotly.js v") == 1  # plotly.js inlined exactly once
    assert page.count('id="memprobe-data"') == 1


def test_headline_states_each_runs_verdict_with_numbers(page: str) -> None:
    headline = page[page.index('id="headline"'):page.index('id="matrix"')]
    for label in ("list × fork (2 workers):", "numpy × fork (2 workers):", "list × single (no workers):"):
        assert label in headline
    assert re.search(r"list × fork \(2 workers\): (each of 2 workers grew|stayed flat \([+−][\d.]+ MB per worker"
                     r"|no verdict — the iteration window)", headline)
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
            for trace, x in zip(c["data"], xs):
                assert len(x) == len(trace["y"]), (c["id"], axis, trace["name"])
        assert any(v is not None for trace in c["data"] for v in trace["y"]), c["id"]


def test_per_run_charts_share_seconds_and_items_axes(page: str) -> None:
    charts = [c for c in chart_data(page)["charts"] if c["kind"] not in ("runs_pss", "bars")]  # per-run charts only
    for c in charts:
        assert set(c["x"]) == {"time", "items"} and set(c["layouts"]) == {"time", "items"}
        assert c["layouts"]["items"]["xaxis"]["title"]["text"] == "items fetched"
    by_run: dict[str, set] = {}
    for c in charts:
        by_run.setdefault(c["id"].split("-")[0], set()).add(tuple(c["layouts"]["time"]["xaxis"]["range"]))
    assert all(len(ranges) == 1 for ranges in by_run.values())  # one x range per run: charts line up


def test_failed_run_shows_its_error_and_its_samples(page: str) -> None:
    article = page[page.index('id="run-2-list-single-w0"'):]
    article = article[:article.index("</article>")]
    assert "Run failed" in article
    assert "injected fault at index 100" in article
    assert "The charts show the samples recorded before it ended" in article
    assert re.search(r'id="c2-pss"', article)
    env = page[page.index('id="environment"'):]
    assert "Runs that did not finish cleanly" in env and "list × single (no workers)" in env


def test_environment_and_scenario_as_run(page: str) -> None:
    env = page[page.index('id="environment"'):]
    for name in ("memprobe", "torch", "Python", "GIL", "kernel", "CPU count", "total RAM", "started", "duration"):
        assert f"<th>{name}</th>" in env
    assert "unit-report" in env and "records: 50000" in env


def test_complete_session_has_no_banner(page: str) -> None:
    assert 'id="banner"' not in page


def test_interrupted_session_shows_a_banner(results_dir: Path, tmp_path: Path) -> None:
    root = copy_of(results_dir, tmp_path / "interrupted")
    edit_json(root / "manifest.json", status="interrupted")
    html = write_report(root).read_text(encoding="utf-8")
    banner = html[html.index('id="banner"'):]
    assert "This session was interrupted" in banner[:400]


def test_session_interrupted_before_any_run(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    (root / "manifest.json").write_text(json.dumps({"scenario": "nothing", "status": "interrupted", "runs": ["a"],
                                                     "started": 1.0, "finished": 2.0, "environment": {}}))
    html = write_report(root).read_text(encoding="utf-8")
    assert "This session was interrupted: 0 of 1 runs have results" in html
    assert "No runs in this results folder." in html and chart_data(html) == {"charts": []}


def test_text_from_results_is_escaped(results_dir: Path, tmp_path: Path) -> None:
    root = copy_of(results_dir, tmp_path / "evil")
    edit_json(root / "manifest.json", scenario=EVIL, description=EVIL)
    (root / "scenario.yaml").write_text(f"name: '{EVIL}'\n")
    meta_path = root / "runs" / "list-single-w0" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["error"]["message"] = EVIL
    meta["spec"]["backend"] = "</script><b>"
    meta_path.write_text(json.dumps(meta))
    html = write_report(root).read_text(encoding="utf-8")
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
    full, small = render(results), render(results, max_points=12)
    assert "nothing was downsampled" in full and "downsampled for this page" not in full
    assert "downsampled for this page" in small
    note = small[small.index('id="downsampling-note"'):]
    assert "about 12 points per line" in note[:300] and "samples.parquet" in note[:600]
    longest = max(len(t["y"]) for c in chart_data(small)["charts"] for t in c["data"])
    assert longest <= 2 * 12 + 2


# -- figures: pure functions -------------------------------------------------------------------

def sample_rows(rows: list[tuple]) -> pd.DataFrame:
    cols = ["t", "pid", "role", "worker", "tier", "missing", "reason", "rss_mb", "pss_mb", "uss_mb"]
    return pd.DataFrame(rows, columns=cols)


def test_unreadable_samples_are_gaps_not_zeros() -> None:
    samples = sample_rows([
        (0.0, 1, "main", -1, "pss", False, None, 100.0, 80.0, 60.0),
        (0.0, 2, "worker 0", 0, "pss", False, None, 90.0, 40.0, 20.0),
        (1.0, 1, "main", -1, "pss", False, None, 100.0, 80.0, 60.0),
        (1.0, 2, "worker 0", 0, "cheap", False, "smaps_rollup unreadable (process exiting?)", 90.0, None, None),
        (1.5, 1, "main", -1, "cheap", False, None, 100.0, None, None),
        (1.5, 2, "worker 0", 0, "gone", True, "permission denied", None, None, None),
        (2.0, 1, "main", -1, "pss", False, None, 100.0, 80.0, 60.0),
        (2.0, 2, "worker 0", 0, "gone", True, "exited", None, None, None),
    ])
    total = figures.total_pss(samples)
    assert total[0.0] == 120.0 and np.isnan(total[1.0]) and total[2.0] == 80.0  # exited: really gone
    rss = figures.sum_rss(samples)
    assert rss[0.0] == 190.0 and np.isnan(rss[1.5]) and rss[2.0] == 100.0
    chart = figures.chart_uss("u", samples, figures.Clock.from_progress(pd.DataFrame()), figures.Marks({}),
                              max_points=100)
    worker = next(t for t in chart["data"] if t["name"] == "worker 0")
    assert worker["y"][0] == 20.0 and None in worker["y"] and 0.0 not in worker["y"]
    stacked = figures.chart_pss_by_role("p", samples, figures.Clock.from_progress(pd.DataFrame()),
                                        figures.Marks({}), max_points=100)
    worker = next(t for t in stacked["data"] if t["name"] == "worker 0")
    assert worker["y"] == [40.0, None, 0.0] and worker["stackgaps"] == "interpolate"  # 0.0: it had exited


def test_keep_indices_keeps_peaks_and_gaps() -> None:
    y = np.ones(10_000)
    y[1234], y[5678] = 50.0, np.nan
    keep = figures.keep_indices(y, 100)
    assert len(keep) <= 110 and 1234 in keep and np.isnan(y[keep]).any()
    assert keep[0] == 0 and keep[-1] == 9999
    assert list(figures.keep_indices(y[:50], 100)) == list(range(50))


def test_clock_maps_seconds_to_items_fetched() -> None:
    clock = figures.Clock.from_progress(pd.DataFrame({"t": [1.0, 2.0, 3.0], "items": [256, 512, 1024]}))
    assert list(clock.items_at([0.5, 1.0, 2.5, 9.0])) == [0, 256, 512, 1024]


def test_items_rate_ends_with_the_last_item_without_a_spike_or_a_drop() -> None:
    # 1,000 items/s for 10 s, then the last 10 items 5 ms later (a spike of 2,000 items/s if drawn
    # alone) and the loader's closing report with no new items (a drop to 0 if drawn).
    t = [*np.arange(0.0, 10.01, 0.5), 10.005, 10.006]
    items = [*(np.arange(0.0, 10.01, 0.5) * 1000), 10_010, 10_010]
    x, rate = figures.item_rate(pd.DataFrame({"t": t, "items": items}), start=0.0)
    assert x[-1] == 10.005  # ends where the last item arrived
    assert 0 < rate.min() and rate.max() < 1_100, rate
    assert rate[-1] == pytest.approx((10_010 - 9_500) / (10.005 - 9.5))  # the short last step joined the one before


def process_rows(rows: list[tuple]) -> pd.DataFrame:
    cols = ["t", "pid", "role", "worker", "tier", "missing", "reason", "rss_mb", "rss_shmem_mb", "minflt"]
    return pd.DataFrame(rows, columns=cols)


def test_minor_faults_are_drawn_per_worker_with_gaps_and_ends() -> None:
    samples = process_rows([
        (0.0, 1, "main", -1, "cheap", False, None, 100.0, 0.0, 5_000),
        (0.0, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 1_000),
        (0.1, 1, "main", -1, "cheap", False, None, 100.0, 0.0, 5_001),
        (0.1, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 30_000),
        (0.2, 2, "worker 0", 0, "gone", True, "permission denied", None, None, None),
        (0.3, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 60_000),
        (0.4, 2, "worker 0", 0, "gone", True, "exited", None, None, None),
    ])
    clock = figures.Clock.from_progress(pd.DataFrame())
    chart = figures.chart_faults("f", samples, clock, figures.Marks({}), max_points=100)
    assert chart["title"] == "Minor page faults per worker (cumulative)"
    assert [t["name"] for t in chart["data"]] == ["worker 0"]  # main's faults would dwarf the workers'
    assert chart["data"][0]["y"] == [1_000, 30_000, None, 60_000]  # unreadable: a gap; exited: the line ends
    assert "newly allocates" in chart["note"]  # faults are not all copies, and the page says so
    single = figures.chart_faults("f", samples[samples["pid"] == 1], clock, figures.Marks({}), max_points=100)
    assert [t["name"] for t in single["data"]] == ["main"] and "One process" in single["note"]


def test_shared_memory_chart_needs_the_runs_own_shared_memory() -> None:
    quiet = process_rows([(t, 2, "worker 0", 0, "cheap", False, None, 90.0, 0.0, 10) for t in (0.0, 0.1, 0.2)])
    busy = quiet.assign(rss_shmem_mb=[0.0, 8.0, 16.0])
    # /dev/shm is the whole machine's: another program filled 48 MB of it during the run.
    system = pd.DataFrame({"t": [0.0, 0.1, 0.2], "dev_shm_mb": [0.0, 48.0, 0.0]})
    clock, marks = figures.Clock.from_progress(pd.DataFrame()), figures.Marks({})
    assert figures.chart_dev_shm("s", quiet, system, clock, marks, max_points=100) is None
    chart = figures.chart_dev_shm("s", busy, system, clock, marks, max_points=100)
    machine, mapped = chart["data"]  # the run's own line is drawn on top
    assert mapped["y"] == [0.0, 8.0, 16.0] and "run's processes" in mapped["name"]
    assert machine["y"] == [0.0, 48.0, 0.0] and "whole machine" in machine["name"]


# -- content: words and advice ---------------------------------------------------------------

def test_advice_points_to_the_flat_run_that_demonstrates_each_fix() -> None:
    grow = summary()
    numpy = summary(backend="numpy", verdict="flat", worker_uss_growth_mb=1.0, total_pss_peak_mb=320.0)
    spawn = summary(mode="spawn", verdict="flat", worker_uss_growth_mb=0.1, total_pss_peak_mb=880.0)
    thread = summary(mode="thread", verdict="flat", main_uss_growth_mb=-1.0, total_pss_peak_mb=290.0)
    other_workers = summary(backend="arrow", workers=4, verdict="flat", total_pss_peak_mb=100.0)
    runs = [grow, numpy, spawn, thread, other_workers]
    anchors = {s.run_id: f"#{s.run_id}" for s in runs}
    (adv,) = content.advice(runs, anchors)
    demos = [d.run.run_id for f in adv.fixes for d in f.demos]
    assert demos == ["list-thread-w2", "numpy-fork-w2", "list-spawn-w2"]  # cheapest first, caveats last
    assert adv.fixes[0].text.startswith("Use threads")
    assert "numpy arrays" in adv.fixes[1].text
    assert "higher than this run" in adv.fixes[2].demos[0].caveat
    assert any("one buffer" in u.lower() for u in adv.untried)
    assert not any("numpy or Arrow" in u for u in adv.untried)


def test_headline_sentences() -> None:
    meta = {"spec": {"loader": {"epochs": 1, "items": None}}}
    grow = content.headline(summary(workers=4, items=200_000, worker_uss_growth_mb=312.0,
                                    worker_uss_growth_max_mb=315.0), meta)
    assert grow.startswith("list × fork (4 workers): each of 4 workers grew 312 MB over 1 epoch (200,000 items)")
    assert "a private copy of the data" in grow
    flat = content.headline(summary(backend="arrow", verdict="flat", worker_uss_growth_mb=3.0), meta)
    assert flat.startswith("arrow × fork (2 workers): stayed flat (+3.0 MB per worker)")
    gc = content.headline(summary(backend="numpy", verdict="flat", worker_uss_growth_mb=36.0), meta)
    assert "one-off copy of the interpreter" in gc
    spawn = summary(mode="spawn", verdict="flat", worker_uss_growth_mb=0.1, worker_uss_start_mb=558.0)
    assert content.headline(spawn, meta).endswith("but each worker held 558 MB of its own when iteration began; "
                                                  "peak total PSS 600 MB.")
    assert content.upfront_copy(spawn) and not content.upfront_copy(dataclasses.replace(spawn, mode="fork"))
    failed = content.headline(summary(status="failed", verdict=None, error="ValueError: boom"), meta)
    assert "no verdict" in failed and "ValueError: boom" in failed


def test_matrix_axes_come_from_the_data() -> None:
    runs = [summary(backend="pillow", mode="thread", verdict="flat"), summary(backend="nvimgcodec", mode="fork"),
            summary(backend="pillow", mode="fork", workers=0, verdict="flat")]
    mats = content.matrices(runs, {s.run_id: s.run_id for s in runs})
    assert [m.workers for m in mats] == [0, 2]
    two = mats[1]
    assert two.modes == ["thread", "fork"] and [b for b, _ in two.rows] == ["pillow", "nvimgcodec"]
    assert two.rows[0][1][1].summary is None  # pillow x fork with 2 workers was not run
    assert "hsl(0" in two.rows[1][1][1].style  # growing: red
    far = content.cell_style(summary(worker_uss_growth_mb=5_000.0))
    assert int(re.search(r"(\d+)%\)", far).group(1)) >= 75  # deepest red still light enough for dark text


# -- compare -----------------------------------------------------------------------------------

def test_match_and_deltas() -> None:
    a = [summary(), summary(backend="numpy", verdict="flat"), summary(mode="spawn")]
    b = [summary(verdict="flat", worker_uss_growth_mb=2.0, total_pss_peak_mb=300.0),
         summary(backend="numpy", verdict="flat", total_pss_peak_mb=602.0), summary(mode="thread")]
    pairs, only_a, only_b = match(a, b)
    assert [p.key for p in pairs] == [("list", "fork", 2), ("numpy", "fork", 2)]
    assert [s.mode for s in only_a] == ["spawn"] and [s.mode for s in only_b] == ["thread"]
    assert pairs[0].verdict == "better" and pairs[1].verdict == "same"
    peak = dict((m.name, d) for m, d in pairs[0].deltas)["peak total PSS"]
    assert (peak.tone, peak.diff) == ("better", -300.0)
    assert dict((m.name, d) for m, d in pairs[1].deltas)["peak total PSS"].tone == "same"  # within noise
    growth = next(m for m in METRICS if m.name == "growth")
    shrank = delta(growth, summary(worker_uss_growth_mb=-19.0), summary(worker_uss_growth_mb=-3.6))
    assert shrank.tone == "same"  # less shrinking is not a worse growth
    assert delta(growth, summary(worker_uss_growth_mb=-19.0), summary(worker_uss_growth_mb=60.0)).tone == "worse"
    rate = next(m for m in METRICS if m.name == "items/s")
    assert delta(rate, summary(items_per_s=1000.0), summary(items_per_s=500.0)) == Delta(1000.0, 500.0, "worse")


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
    table = html[html.index('id="table"'):html.index('id="unmatched"')]
    assert table.count('<tr class="verdict-') == 1 and "list × fork (2 workers)" in table
    assert '<td class="better">' in table  # peak total PSS halved
    unmatched = html[html.index('id="unmatched"'):html.index('id="chart"')]
    only_a, only_b = unmatched.split("Only in B")
    assert "list × single (no workers)" in only_a and "numpy × fork (2 workers)" in only_a
    assert "numpy × fork (3 workers)" in only_b
    assert "after&lt;b&gt;" in html and "after<b>" not in html
    assert len(chart_data(html)["charts"]) == 1
    assert "The two folders ran the same scenario file." in html


def test_throughput_bars_group_runs_by_backend_with_a_bar_per_mode_and_workers() -> None:
    from memprobe.report.render import bar_charts

    runs = [summary(run_id="pillow-fork-w2", backend="pillow", mode="fork", workers=2, items_per_s=300.0,
                    workload="decode", decoder_backend="pillow", mb_per_s=18.0),
            summary(run_id="pillow-thread-w2", backend="pillow", mode="thread", workers=2, items_per_s=280.0,
                    workload="decode", decoder_backend="pillow", mb_per_s=17.0),
            summary(run_id="nv-thread-w2", backend="nvimgcodec", mode="thread", workers=2, items_per_s=450.0,
                    workload="decode", decoder_backend="nvimgcodec-cpu", mb_per_s=27.0),
            summary(run_id="nv-fork-w2", backend="nvimgcodec", mode="fork", workers=2, status="failed",
                    items_per_s=None, workload="decode")]
    rate, pss = bar_charts(runs)
    assert "images/s" in rate["title"]
    names = [t["name"] for t in rate["data"]]
    assert names == ["fork · 2w", "thread · 2w"]
    thread = rate["data"][1]
    assert rate["x"]["time"][1] == ["pillow", "nvimgcodec (CPU backend)"]  # the backend that ran is labelled
    assert thread["y"] == [280.0, 450.0]
    assert rate["x"]["time"][0] == ["pillow"]  # the failed run has no bar
    assert pss["kind"] == "bars"
