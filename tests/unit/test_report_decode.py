"""The report for decode runs (images/s with encoded MB/s, the decoder backend that ran, what the
throughput bars leave out) and the CPU-cores chart every run gets.

The tests feed small synthetic frames and summaries to the figure and content functions; the
page of a real decode session is checked in tests/integration/test_report_decode_run.py.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from memprobe.core import series
from memprobe.core.summary import RunSummary
from memprobe.report import content, figures
from memprobe.report.render import bar_charts

NO_CLOCK = series.Clock.from_progress(pd.DataFrame())


def summary(**changes: object) -> RunSummary:
    base = {
        "backend": "pillow",
        "mode": "thread",
        "workers": 2,
        "status": "ok",
        "error": None,
        "items": 2048,
        "items_per_s": 109.0,
        "time_to_first_batch_s": 0.5,
        "duration_s": 20.0,
        "total_pss_start_mb": 300.0,
        "total_pss_peak_mb": 350.0,
        "total_pss_end_mb": 340.0,
        "sum_rss_peak_mb": 400.0,
        "rss_overcount_mb": 50.0,
        "worker_uss_start_mb": None,
        "worker_uss_growth_mb": None,
        "worker_uss_growth_max_mb": None,
        "main_uss_growth_mb": -4.0,
        "growth_per_1k_items_per_worker_mb": None,
        "growth_threshold_mb": 50.0,
        "verdict": "flat",
        "expectation": None,
        "expectation_met": None,
        "explanation": "",
        "sampler_cpu_share": 0.01,
        "workload": "decode",
        "decoder_backend": "pillow",
        "mb_per_s": 6.45,
        "megapixels_per_s": 28.5,
        "cpu_cores_used": 0.9,
    }
    base.update(changes)
    base.setdefault("run_id", f"{base['backend']}-{base['mode']}-w{base['workers']}")
    return RunSummary(**base)


# -- CPU cores over time ------------------------------------------------------------------------


def cpu_rows(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["t", "pid", "role", "worker", "tier", "missing", "reason", "cpu_s"])


def ticks(pid: int, role: str, t0: float, t1: float, cores: float, cpu0: float = 0.0) -> list[tuple]:
    """A process read every 0.1 s from t0 to t1 (inclusive) using ``cores`` all along."""
    worker = int(role.split()[-1]) if role.startswith("worker") else -1
    return [
        (round(t, 1), pid, role, worker, "cheap", False, None, round(cpu0 + cores * (t - t0), 4))
        for t in np.arange(t0, t1 + 1e-9, 0.1)
    ]


def band(mids: np.ndarray, bands: dict[str, np.ndarray], name: str, lo: float, hi: float) -> np.ndarray:
    """A band's values in the windows wholly inside [lo, hi]."""
    return bands[name][(mids > lo + 0.5) & (mids < hi - 0.5)]


def test_cpu_cores_per_process_never_drop_when_a_process_ends() -> None:
    # main: 0.5 core from 0 to 10 s; a worker: 1 core from 2 to 6 s, then it exits. Summing the
    # cumulative counters and differencing would draw a 4-core-second plunge when the worker vanishes.
    samples = cpu_rows(
        ticks(1, "main", 0.0, 10.0, 0.5)
        + ticks(2, "worker 0", 2.0, 6.0, 1.0, cpu0=0.3)
        + [(6.1, 2, "worker 0", 0, "gone", True, "exited", None)]
    )
    mids, bands = series.cpu_bands(series.process_counters(samples))
    total = sum(bands.values())
    assert np.allclose(band(mids, bands, "main", 0, 10), 0.5, atol=0.03)
    assert np.allclose(band(mids, bands, "worker 0", 2, 6), 1.0, atol=0.03)
    assert np.allclose(band(mids, bands, "worker 0", 6.2, 10), 0.0)  # after its end it adds nothing
    assert total.min() >= 0.5 - 0.03  # never below what main alone uses: no drop when the worker ends
    assert np.allclose(total[(mids > 2.5) & (mids < 5.5)], 1.5, atol=0.05)
    assert (total >= 0).all()


def test_cpu_counter_bridges_unreadable_ticks_and_is_unknown_when_unreadable_to_its_end() -> None:
    rows = ticks(1, "main", 0.0, 10.0, 0.5)
    # main could not be read at 4.0-4.9 s: its counter bridges the gap exactly, no dip, no gap.
    rows = [
        r if not 4.0 <= r[0] < 5.0 else (r[0], 1, "main", -1, "gone", True, "permission denied", None)
        for r in rows
    ]
    # a worker read until 3 s, then unreadable until it ended at 6 s: its CPU there is unknown.
    rows += ticks(2, "worker 0", 1.0, 3.0, 1.0) + [
        (round(t, 1), 2, "worker 0", 0, "cheap", True, "stat unreadable", None)
        for t in np.arange(3.1, 6.0, 0.1)
    ]
    rows += [(6.0, 2, "worker 0", 0, "gone", True, "exited", None)]
    samples = cpu_rows(rows)
    mids, bands = series.cpu_bands(series.process_counters(samples))
    assert np.allclose(band(mids, bands, "main", 0, 10), 0.5, atol=0.03)
    unknown = np.isnan(bands["worker 0"])
    assert unknown[(mids > 3.5) & (mids < 5.5)].all()
    assert not unknown[mids < 2.5].any() and not unknown[mids > 6.5].any()
    chart = figures.chart_cpu("c", samples, pd.DataFrame(), NO_CLOCK, figures.Milestones({}), max_points=1000)
    total = next(t for t in chart["data"] if t["name"] == "total")
    assert None in total["y"] and 0.0 not in total["y"]  # unknown is a gap, never a zero


def test_cpu_counter_of_a_reused_pid_starts_again() -> None:
    samples = cpu_rows(ticks(7, "worker 0", 0.0, 3.0, 1.0, cpu0=5.0) + ticks(7, "worker 0", 3.1, 6.0, 1.0))
    mids, bands = series.cpu_bands(series.process_counters(samples))
    # Only the 0.1 s between the old process's last reading and the new one's first is not counted;
    # a counter forced to never go down would show the new process idle until it passed 5 s.
    assert band(mids, bands, "worker 0", 0, 6).min() >= 0.75 and np.allclose(bands["worker 0"][mids > 4], 1.0)


def test_thread_runs_are_split_by_thread_without_counting_the_main_process_twice() -> None:
    samples = cpu_rows(ticks(10, "main", 0.0, 8.0, 1.6) + ticks(11, "resource tracker", 0.0, 8.0, 0.2))
    threads = pd.DataFrame(
        [
            (t, tid, name, round(c * t, 4))
            for tid, name, c in (
                (10, "python", 0.2),
                (12, "mp-tworker-0", 0.7),
                (13, "mp-tworker-1", 0.7),
                (14, "python", 0.0),
            )
            for t in np.round(np.arange(0.0, 8.01, 0.1), 1)
        ],
        columns=["t", "tid", "name", "cpu_s"],
    )
    chart = figures.chart_cpu(
        "c", samples, threads, NO_CLOCK, figures.Milestones({}), max_points=1000, cpu_count=2
    )
    assert chart["title"] == "CPU cores used, by thread of the main process"
    names = [t["name"] for t in chart["data"]]
    assert names == ["main thread", "worker thread 0", "worker thread 1", "other processes", "total"]
    total = next(t for t in chart["data"] if t["name"] == "total")["y"]
    assert np.allclose(
        total[1:-1], 1.8, atol=0.05
    )  # threads (1.6) + the helper process (0.2), not + main's 1.6
    # The machine's 2 CPUs are marked once the run uses at least half of them.
    assert any(s.get("y0") == 2 for s in chart["layouts"]["time"]["shapes"])
    assert "2 CPUs on this machine" in json.dumps(chart["layouts"]["time"]["annotations"])
    assert "share the GIL" in chart["note"]
    # On a free-threaded build with the GIL off, the note must not claim the threads share one core.
    free = figures.chart_cpu(
        "c",
        samples,
        threads,
        NO_CLOCK,
        figures.Milestones({}),
        max_points=1000,
        cpu_count=2,
        gil_enabled=False,
    )
    assert "share the GIL" not in free["note"] and "GIL was disabled" in free["note"]


def test_cpu_chart_per_process_has_both_axes_and_no_cpu_line_when_far_below() -> None:
    samples = cpu_rows(ticks(1, "main", 0.0, 6.0, 0.3) + ticks(2, "worker 0", 1.0, 6.0, 0.2))
    progress = pd.DataFrame({"t": [1.0, 3.0, 6.0], "items": [0, 100, 300]})
    chart = figures.chart_cpu(
        "c",
        samples,
        pd.DataFrame(),
        series.Clock.from_progress(progress),
        figures.Milestones({}),
        max_points=1000,
        cpu_count=8,
    )
    assert chart["title"] == "CPU cores used, by process" and chart["kind"] == "cpu"
    assert [t["name"] for t in chart["data"]] == ["main", "worker 0", "total"]
    mids = np.array(chart["x"]["time"][0])
    assert mids.min() > 0 and chart["x"]["items"][0] == list(
        series.Clock.from_progress(progress).items_at(mids)
    )
    assert not chart["layouts"]["time"]["shapes"]  # 0.5 of 8 cores: no CPU-count line squashing the chart


# -- images/s and encoded MB/s ----------------------------------------------------------------------

PROGRESS = pd.DataFrame({"t": [1.0, 2.0, 3.0, 4.0, 5.0], "items": [0, 100, 300, 400, 600]})
MILESTONES = figures.Milestones({"iter_start": 0.5, "first_batch": 1.0})


def test_decode_rate_chart_reads_in_images_per_s_and_encoded_mb_per_s() -> None:
    decode = figures.DecodeInfo(bytes_per_item=50_000.0, pixels_per_item=261_120.0)
    chart = figures.chart_items_rate(
        "r", PROGRESS, series.Clock.from_progress(PROGRESS), MILESTONES, max_points=100, decode=decode
    )
    images, mb = chart["data"]
    assert images["name"] == "images/s" and mb["name"] == "encoded MB/s" and mb["yaxis"] == "y2"
    assert mb["y"] == pytest.approx([v * 0.05 for v in images["y"]], abs=1e-3)
    assert chart["title"].startswith("Images/s and encoded MB/s")
    for layout in chart["layouts"].values():
        left, right = layout["yaxis"]["range"], layout["yaxis2"]["range"]
        assert left[0] == right[0] == 0 and right[1] == pytest.approx(left[1] * 0.05)  # one line, two units
        assert left[1] >= max(images["y"]) and layout["yaxis"]["title"]["text"] == "images/s"
    assert "50.0 kB" in chart["note"] and "0.26 megapixels" in chart["note"]


def test_records_rate_chart_is_unchanged_items_per_s() -> None:
    chart = figures.chart_items_rate(
        "r", PROGRESS, series.Clock.from_progress(PROGRESS), MILESTONES, max_points=100
    )
    assert [t["name"] for t in chart["data"]] == ["items/s"] and "yaxis2" not in chart["layouts"]["time"]
    assert chart["title"] == "Items/s, time to first batch marked" and "note" not in chart


def test_decode_info_comes_from_the_run_meta() -> None:
    meta = {
        "spec": {"workload": "decode"},
        "dataset_info": {"bytes_per_item": 59181.9, "pixels_per_item": 261120},
    }
    assert figures.DecodeInfo.from_meta(meta) == figures.DecodeInfo(59181.9, 261120.0)
    assert figures.DecodeInfo.from_meta({"spec": {"workload": "decode"}}) == figures.DecodeInfo(None, None)
    assert figures.DecodeInfo.from_meta({"spec": {"workload": "records"}, "dataset_info": {}}) is None
    # A decode run that failed before building its images still says images, without an MB/s axis.
    chart = figures.chart_items_rate(
        "r", PROGRESS, NO_CLOCK, MILESTONES, max_points=100, decode=figures.DecodeInfo(None, None)
    )
    assert [t["name"] for t in chart["data"]] == ["images/s"]


def test_a_decode_runs_charts_count_images_fetched() -> None:
    samples = cpu_rows(ticks(1, "main", 0.0, 6.0, 0.3)).assign(rss_mb=100.0, minflt=1.0)
    decode = figures.DecodeInfo(50_000.0, 261_120.0)
    charts = figures.run_charts("c0", samples, PROGRESS, pd.DataFrame(), MILESTONES, decode=decode)
    assert {c["layouts"]["items"]["xaxis"]["title"]["text"] for c in charts} == {"images fetched"}
    records = figures.run_charts("c0", samples, PROGRESS, pd.DataFrame(), MILESTONES)
    assert {c["layouts"]["items"]["xaxis"]["title"]["text"] for c in records} == {"items fetched"}
    assert [c["kind"] for c in records] == ["rss_vs_pss", "faults", "items_rate", "cpu"]


# -- names, units and what the bars leave out ---------------------------------------------------


def test_decode_runs_are_named_with_the_backend_that_ran() -> None:
    assert content.backend_label(summary()) == "pillow"
    assert (
        content.backend_label(summary(backend="nvimgcodec", decoder_backend="nvimgcodec-cpu"))
        == "nvimgcodec (CPU backend)"
    )
    gpu = summary(backend="nvimgcodec", decoder_backend="nvimgcodec-gpu")
    assert content.run_label(gpu) == "nvimgcodec (GPU backend) × thread (2 threads)"
    assert content.headline(gpu, {}).startswith("nvimgcodec (GPU backend) × thread (2 threads): stayed flat")
    # Failed before a decoder was chosen: the scenario's name alone; records backends as they were.
    assert (
        content.backend_label(summary(backend="nvimgcodec", decoder_backend=None, status="failed"))
        == "nvimgcodec"
    )
    assert (
        content.run_label(summary(backend="list", workload="records", decoder_backend=None, mode="fork"))
        == "list × fork (2 workers)"
    )


def test_matrix_rows_name_the_decoder_backend() -> None:
    runs = [
        summary(backend="nvimgcodec", mode=m, decoder_backend="nvimgcodec-cpu") for m in ("spawn", "thread")
    ]
    runs.append(
        summary(backend="nvimgcodec", mode="fork", status="failed", verdict=None, decoder_backend=None)
    )
    runs.append(summary(mode="thread"))
    [matrix] = content.matrices(runs, {s.run_id: s.run_id for s in runs})
    assert [label for label, _ in matrix.rows] == ["nvimgcodec (CPU backend)", "pillow"]
    mixed = [
        summary(backend="nv", decoder_backend="nv-cpu"),
        summary(backend="nv", mode="spawn", decoder_backend="nv-gpu"),
    ]
    assert content.row_label("nv", mixed) == "nv (CPU backend, GPU backend)"


def test_decode_runs_say_images_not_items() -> None:
    s = summary()
    assert content.rate_text(s) == "109 images/s · 6.5 MB/s"
    facts = dict(content.run_facts(s, {"spec": {"workload": "decode", "loader": {"epochs": 4}}}))
    assert facts["images/s (iteration)"] == "109 images/s" and facts["images"] == "2,048"
    assert facts["decoder backend that ran"] == "pillow" and facts["encoded MB/s"] == "6.5"
    assert "items/s (iteration)" not in facts
    assert content.span(s, {"spec": {"loader": {"epochs": 4}}}) == "4 epochs (2,048 images)"
    records = summary(workload="records", decoder_backend=None, mb_per_s=None, items_per_s=53_800.0)
    assert content.rate_text(records) == "53.8k items/s"
    assert content.headline(summary(workers=1), {}).endswith(
        "stayed flat (−4.0 MB, one process, 1 thread); peak total PSS 350 MB."
    )


def test_bars_say_images_per_s_and_name_the_backend() -> None:
    runs = [
        summary(mode="fork"),
        summary(mode="thread"),
        summary(backend="nvimgcodec", mode="thread", decoder_backend="nvimgcodec-gpu", items_per_s=900.0),
    ]
    rate, _pss = bar_charts(runs)
    assert rate["title"] == "Throughput (images/s) per decoder, mode and worker count"
    assert rate["layouts"]["time"]["yaxis"]["title"]["text"] == "images/s"
    assert rate["layouts"]["time"]["xaxis"]["title"]["text"] == "decoder"
    assert rate["x"]["time"][1] == ["pillow", "nvimgcodec (GPU backend)"]
    assert "MB/s encoded" in rate["data"][1]["customdata"][0]


MISSING = (
    "ImportError: nvidia.nvimgcodec is not importable (ModuleNotFoundError: No module named "
    "'nvidia.nvimgcodec'); install it with: pip install 'torch-memprobe[nvimgcodec]'\nTraceback ..."
)


def test_a_decoder_whose_runs_all_failed_is_listed_with_its_error() -> None:
    runs = [summary(mode="fork"), summary(mode="thread")] + [
        summary(
            backend="nvimgcodec",
            mode=m,
            status="failed",
            error=MISSING,
            verdict=None,
            decoder_backend=None,
            items_per_s=None,
        )
        for m in ("fork", "thread")
    ]
    [line] = content.not_in_bars(runs)
    assert line.startswith("nvimgcodec (all 2 runs failed: ImportError: nvidia.nvimgcodec is not importable")
    assert "pip install 'torch-memprobe[nvimgcodec]'" in line and "Traceback" not in line
    assert content.not_in_bars(runs[:2]) == []


def test_failed_and_unmeasured_runs_of_a_shown_decoder_are_listed() -> None:
    fork_gpu = "nvimgcodec-gpu cannot run in fork-started DataLoader workers: use spawn or thread"
    runs = [
        summary(backend="nvimgcodec", mode="thread", decoder_backend="nvimgcodec-gpu"),
        *[
            summary(
                backend="nvimgcodec",
                mode="fork",
                workers=w,
                status="failed",
                error=fork_gpu,
                verdict=None,
                decoder_backend="nvimgcodec-gpu",
                items_per_s=None,
            )
            for w in (1, 2)
        ],
        summary(mode="spawn", workers=1, items_per_s=None),
    ]
    assert content.not_in_bars(runs) == [
        f"nvimgcodec (GPU backend) × fork, 1 and 2 workers (failed: {fork_gpu})",
        "pillow × spawn, 1 worker (no throughput measured: the run has no warm point or no last batch)",
    ]


# -- page-fault churn: faults per image and their CPU share, next to images/s ----------------------


def test_cost_text_per_run() -> None:
    assert (
        content.cost_text(summary(mode="fork", faults_per_item=524.4, kernel_cpu_share=0.27))
        == "524 faults/image · 27% kernel CPU"
    )
    assert (
        content.cost_text(summary(workload="records", faults_per_item=0.2, kernel_cpu_share=None))
        == "0 faults/item"
    )
    assert content.cost_text(summary()) is None  # results without the counters


def test_churn_is_faults_beyond_the_cheapest_run_on_the_same_data_paid_in_the_kernel() -> None:
    runs = [
        summary(mode="fork", faults_per_item=388.0, kernel_cpu_share=0.43, cpu_ms_per_item=2.80),
        summary(
            mode="spawn", faults_per_item=386.0, kernel_cpu_share=0.05, cpu_ms_per_item=2.7
        ),  # cheap faults
        summary(
            faults_per_item=191.0, kernel_cpu_share=0.20, cpu_ms_per_item=2.46
        ),  # the 50 MB batch: all pay it
        summary(backend="nvimgcodec", faults_per_item=197.0, kernel_cpu_share=0.1, cpu_ms_per_item=1.9),
        summary(backend="simplejpeg", mode="fork", faults_per_item=150.0, kernel_cpu_share=0.3),
    ]  # alone
    churn = content.churning(runs)
    assert set(churn) == {"pillow-fork-w2", "simplejpeg-fork-w2"}
    assert churn["pillow-fork-w2"].mode == "thread" and churn["simplejpeg-fork-w2"] is None
    note = content.churn_note(runs)
    assert note.startswith(
        "Page-fault churn in 2 runs: pillow × fork took 388 minor faults per image, with 43% of "
        "its CPU in the kernel. pillow × thread on the same data took 191 (20% in the kernel), "
        "and 2.46 ms of CPU per image against 2.80 ms."
    )
    assert content.churn_note(runs[1:4]) is None
    rows = content.cost_rows(runs, {s.run_id: s.run_id for s in runs})
    assert [r.churn for r in rows] == [
        True,
        False,
        False,
        False,
    ]  # the lone simplejpeg run has no CPU per item
