"""The thread-loader race's verdict on issue 12's targets (benchmarks/bench_threads.py): what a
reader of results.md takes away, so it must not call a tie a win."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_threads as bt


def _run(rnd: int, workload: str, loader: str, items_per_s: float, status: str = "ok") -> dict:
    return {
        "round": rnd,
        "workload": workload,
        "loader": loader,
        "status": status,
        "items_per_s": items_per_s,
        "cpu_ms_per_item": 1.0,
        "first_batch_ms": 10.0,
        "kernel_cpu_share": 0.1,
        "faults_per_item": 1.0,
        "pss_peak_mb": 100.0,
        "error": "timed out" if status != "ok" else None,
    }


def _results(runs: list[dict]) -> dict:
    machine = dict.fromkeys(
        ("cpu_model", "cores", "kernel", "glibc", "python", "torch", "torchdata", "pillow"), "x"
    )
    machine["gil_enabled"] = True
    return {
        "machine": machine,
        "command": "python benchmarks/bench_threads.py",
        "wall_s": 1.0,
        "loadavg_before": "0 0 0",
        "loadavg_after": "0 0 0",
        "runs": runs,
    }


def test_the_geometric_mean_of_steady_ratios_has_a_narrow_interval_around_them() -> None:
    gm, lo, hi = bt.geometric_mean([1.1, 1.1, 1.1, 1.1])
    assert (gm, lo, hi) == pytest.approx((1.1, 1.1, 1.1))
    gm, lo, hi = bt.geometric_mean([0.8, 1.25])
    assert gm == pytest.approx(1.0)
    assert lo < 0.8 and hi > 1.25


@pytest.mark.parametrize(
    ("ratios", "verdict"),
    [
        ([1.04, 1.06, 1.05, 1.07, 1.03], "met"),
        ([0.90, 0.92, 0.91, 0.89, 0.93], "missed"),
        ([0.85, 1.15, 0.95, 1.1, 1.0], "within the noise (mean at or above"),
        ([0.80, 1.10, 0.90, 1.05, 0.95], "within the noise (mean below"),
    ],
)
def test_a_target_is_met_only_when_the_rounds_show_it(ratios: list[float], verdict: str) -> None:
    assert bt.target_verdict(ratios, 1.0).startswith(verdict)


def _target_rows(text: str) -> dict[tuple[str, str], str]:
    lines = text.splitlines()
    first = lines.index("### Targets: thread's items/s ÷ each other thread loader's, round by round")
    rows = {}
    for line in lines[first:]:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if line.startswith("| ") and cells[0] != "workload":
            rows[(cells[0], cells[1])] = cells[-1]
    return rows


def test_the_report_judges_thread_against_each_other_loader_in_the_rounds_both_finished() -> None:
    runs = []
    for rnd, (pillow, pool, td) in enumerate(
        [(1.05, 0.97, 1.2), (1.06, 0.99, 1.3), (1.04, 0.96, 1.2), (1.07, 0.98, 1.3)]
    ):
        runs += [
            _run(rnd, "pillow", "thread", 100.0 * pillow),
            _run(rnd, "pillow", "threadpool", 100.0),
            _run(rnd, "list", "thread", 100.0),
            _run(rnd, "list", "threadpool", 100.0 / pool),
            _run(rnd, "list", "torchdata", 100.0 / td),
            _run(rnd, "list", "threadpool-bounded", 1000.0),  # a probe: never a target
        ]
    runs.append(_run(4, "pillow", "thread", 1.0))  # its rival failed: no ratio from this round
    runs.append(_run(4, "pillow", "threadpool", 1000.0, status="failed"))
    rows = _target_rows(bt.report(_results(runs)))
    assert rows == {
        ("pillow", "threadpool"): "met",
        # 0.96-0.99 of the pool against a target of 0.95: met, though thread was slower in every round
        ("list", "threadpool"): "met",
        ("list", "torchdata"): "met",
    }


def test_a_tie_with_noisy_rounds_is_not_called_a_win_or_a_loss() -> None:
    runs = []
    for rnd, ratio in enumerate([0.85, 1.15, 0.95, 1.1, 1.0, 0.9]):
        runs += [_run(rnd, "arrow", "thread", 100.0 * ratio), _run(rnd, "arrow", "threadpool", 100.0)]
    assert _target_rows(bt.report(_results(runs)))[("arrow", "threadpool")].startswith("within the noise")


def test_the_report_pairs_worker_counts_and_interpreters_round_by_round() -> None:
    """--workers 1,2 and --python gil=... --python ft=...: each loader's scaling efficiency and the
    second interpreter's items/s over the first's come from runs of the same round only."""
    runs = []
    for rnd, load in enumerate((1.0, 0.5, 0.8)):  # the machine's load changes between rounds
        for python, rate1, rate2 in (("gil", 100.0, 110.0), ("ft", 90.0, 162.0)):
            for workers, rate in ((1, rate1), (2, rate2)):
                r = _run(rnd, "list", "thread", rate * load)
                r.update(python=python, workers=workers, cpu_ms_per_item=workers * 1.0)
                runs.append(r)
    results = _results(runs) | {
        "pythons": {
            k: {
                "path": k,
                **dict.fromkeys(("python", "torch", "torchdata", "pillow"), "x"),
                "gil_enabled": k == "gil",
            }
            for k in ("gil", "ft")
        }
    }
    text = bt.report(results)
    assert "| gil | list | thread | 0.55 (0.55-0.55) | 2.00 (2.00-2.00) |" in text  # 110 / (2 x 100)
    assert "| ft | list | thread | 0.90 (0.90-0.90) | 2.00 (2.00-2.00) |" in text  # 162 / (2 x 90)
    assert "### `ft` ÷ `gil`, per round: median (min-max)" in text
    assert "| list | thread | 1 | 0.90 (0.90-0.90) | 1.00 (1.00-1.00) |" in text
    assert "| list | thread | 2 | 1.47 (1.47-1.47) | 1.00 (1.00-1.00) |" in text
    assert "## `ft`, 2 workers" in text and "Python x (GIL disabled)" in text
