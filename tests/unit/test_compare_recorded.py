"""`memprobe compare` of two recordings (issue 40): the job before and after a fix compared as
recordings (their commands, each parent's and the workers' growth, the total PSS peak, the
verdicts and causes side by side, what changed in a sentence, total PSS over time where a
recording counted no items); a recording and scenario runs refused in one line."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
from treejobs import fork_job, rank_job, write_results

from memprobe.core.errors import UsageError
from memprobe.pages import compare_folders, write_compare

REPO = Path(__file__).resolve().parents[2]


def recording(root: Path, run_id: str, command: list[str], growth: float, items: bool = False) -> Path:
    meta, samples = fork_job(worker_growth=growth)
    meta = meta | {"run_id": run_id, "command": command}
    samples = samples.assign(run_id=run_id) if "run_id" in samples else samples
    progress = None
    if items:
        meta["items"] = 40_000
        progress = pd.DataFrame(
            {"t": [5.5, 10.0, 15.0, 20.0], "items": [0, 10_000, 25_000, 40_000], "batches": [0, 40, 100, 160]}
        )
    return write_results(root, meta, samples, progress)


@pytest.fixture
def before_after(tmp_path: Path) -> tuple[Path, Path]:
    before = recording(tmp_path / "before", "train", ["python", "train.py"], 200.0)
    after = recording(tmp_path / "after", "train_fixed", ["python", "train_fixed.py", "--fix"], 2.0)
    return before, after


def text_of(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def chart_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="memprobe-data">(.*?)</script>', html, re.DOTALL)
    assert m
    return json.loads(m.group(1))


def test_two_recordings_are_compared_as_recordings_whatever_their_commands_are_named(
    before_after: tuple[Path, Path], tmp_path: Path
) -> None:
    """Their runs are named after their commands (train, train_fixed): once "no run of A has a
    partner in B", the two "ran the same scenario file", and no main process's growth."""
    page = write_compare(*before_after, tmp_path / "compare.html").read_text(encoding="utf-8")
    text = text_of(page[: page.index("<script")])
    said = {s: s in text for s in ("scenario", "No run of A has a partner", "ran different commands.")}
    assert said == {"scenario": False, "No run of A has a partner": False, "ran different commands.": True}
    environment = text_of(page[page.index('id="environment"') : page.index("<footer")])
    assert "Environment The commands A: python train.py B: python train_fixed.py --fix" in environment
    figures = text_of(page[page.index('id="figures"') : page.index('id="verdicts"')])
    assert "total PSS peak 625 MB 305 MB −320 MB (−51%)" in figures
    assert "the main process's own growth" in figures
    assert "each worker's own growth (mean) +200 MB +2.0 MB −198 MB" in figures
    verdicts = text_of(page[page.index('id="verdicts"') : page.index('id="chart"')])
    assert "copy-on-access of Python objects" in verdicts and "none named" in verdicts
    assert "growing: The main process's 2 DataLoader workers (fork) each grew about 200 MB" in verdicts
    changed = re.search(r'<span id="changed">(.*?)</span>', page, re.DOTALL)
    assert changed and unescape(changed.group(1)) == (
        "The workers' copy-on-access went from +200 MB each to +2.0 MB; total PSS peak 625 MB → 305 MB "
        "(−320 MB, −51%); verdict growing → flat."
    )


def test_the_figures_are_each_recording_s_own(before_after: tuple[Path, Path], tmp_path: Path) -> None:
    """The peak compared is the one each recording's summary.json and page state."""
    from memprobe.analysis.runs import summarize_all
    from memprobe.results.folder import ResultSet

    peaks = [summarize_all(ResultSet.load(r))[0].total_pss_peak_mb for r in before_after]
    page = write_compare(*before_after, tmp_path / "compare.html").read_text(encoding="utf-8")
    lines = list(chart_data(page)["charts"][0]["data"])
    assert [max(v for v in t["y"] if v is not None) for t in lines] == pytest.approx(peaks)
    figures = text_of(page[page.index('id="figures"') : page.index('id="verdicts"')])
    assert f"total PSS peak {peaks[0]:,.0f} MB {peaks[1]:,.0f} MB" in figures


def test_a_recording_without_item_marks_is_drawn_over_time_not_at_items_zero(
    before_after: tuple[Path, Path], tmp_path: Path
) -> None:
    page = write_compare(*before_after, tmp_path / "compare.html").read_text(encoding="utf-8")
    (chart,) = chart_data(page)["charts"]
    assert list(chart["x"]) == ["time"] and chart["default"] == "time"
    assert chart["layouts"]["time"]["xaxis"]["title"]["text"] == "seconds since the command started"
    for xs in chart["x"]["time"]:
        assert max(xs) == pytest.approx(20.0)  # the recording's last total, at 20 s
    assert page.count('data-axis="items"') == 0
    # Both counted items: the items axis as well, seconds first.
    a = recording(tmp_path / "a", "train", ["python", "train.py"], 200.0, items=True)
    b = recording(tmp_path / "b", "train", ["python", "train.py"], 2.0, items=True)
    page = write_compare(a, b, tmp_path / "items.html").read_text(encoding="utf-8")
    (chart,) = chart_data(page)["charts"]
    assert set(chart["x"]) == {"time", "items"} and chart["default"] == "time"
    assert max(chart["x"]["items"][0]) == 40_000 and page.count('data-axis="items"') == 1
    assert page.count("The two recordings ran the same command.") == 1


def test_the_terminal_says_what_changed_with_the_figures_side_by_side(
    before_after: tuple[Path, Path], tmp_path: Path
) -> None:
    _, lines = compare_folders(*before_after, tmp_path / "compare.html")
    assert lines[:2] == ["A: before: python train.py", "B: after: python train_fixed.py --fix"]
    table = {line.split("  ")[0]: line for line in lines[3:] if line.strip()}
    assert re.search(r"total PSS peak +625 MB +305 MB +−320 MB \(−51%\)", table["total PSS peak"])
    assert re.search(r"verdict +growing +flat", table["verdict"])
    assert re.search(r"causes +copy-on-access +–", table["causes"])
    assert lines[-1].startswith(
        "what changed: The workers' copy-on-access went from +200 MB each to +2.0 MB;"
    )


def test_each_rank_s_own_growth_is_compared_by_its_role(tmp_path: Path) -> None:
    meta, samples = rank_job()
    a = write_results(tmp_path / "a", meta | {"command": ["torchrun", "train.py"]}, samples)
    b = write_results(tmp_path / "b", meta | {"command": ["torchrun", "train.py"]}, samples)
    page = write_compare(a, b, tmp_path / "compare.html").read_text(encoding="utf-8")
    figures = text_of(page[page.index('id="figures"') : page.index('id="verdicts"')])
    assert "rank 0's own growth" in figures and "rank 1's own growth" in figures
    assert "the main process's own growth" not in figures
    changed = re.search(r'<span id="changed">(.*?)</span>', page, re.DOTALL)
    assert changed and changed.group(1).endswith("both growing.")


def test_a_recording_and_scenario_runs_are_refused_in_one_line(
    before_after: tuple[Path, Path], tmp_path: Path
) -> None:
    scenario = REPO / "tests" / "data" / "results-v1" / "scenario"
    with pytest.raises(UsageError) as refused:
        compare_folders(before_after[0], scenario, tmp_path / "out" / "compare.html")
    message = str(refused.value)
    assert "\n" not in message and "a recording, of memprobe record or watch" in message
    assert "scenario runs, of memprobe run or profile()" in message and "allowed: two recordings" in message
    assert not (tmp_path / "out").exists()


def test_a_parent_s_growth_in_a_job_of_ranks_is_named_as_the_most_a_parent_grew() -> None:
    """The summary's main_uss_growth_mb is the largest parent's: in a job of ranks, no "main process"."""
    from dataclasses import replace

    from memprobe.analysis.runs import summarize
    from memprobe.report.compare_recorded import what_changed

    meta, samples = rank_job()
    s = summarize(meta, samples, pd.DataFrame(), pd.DataFrame())
    a = replace(s, causes=["main-grows"], main_uss_growth_mb=300.0)
    b = replace(s, causes=["main-grows"], main_uss_growth_mb=60.0)
    assert what_changed(a, b).startswith(
        "The most a parent process grew of its own went from +300 MB to +60 MB;"
    )
    single, _ = fork_job()
    f = summarize(single, fork_job()[1], pd.DataFrame(), pd.DataFrame())
    a, b = replace(f, causes=["main-grows"], main_uss_growth_mb=300.0), replace(f, causes=[], verdict="flat")
    assert what_changed(a, b).startswith("The main process's own growth went from +300 MB to ")
