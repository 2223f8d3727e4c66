"""The page of a recorded job (record / watch): the culprit first, timelines per rank with
exact readings and estimates drawn apart, who grows and how fast, the projection with its
assumptions, and nothing that is empty for a job memprobe did not write."""

from __future__ import annotations

import itertools
import json
import re
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
import treejobs
from treejobs import fork_job, generations_job, job_meta, proc_info, proc_rows, rank_job, write_results

from memprobe.analysis.runs import summarize, summarize_all
from memprobe.core.series import Clock, pss_by_role
from memprobe.pages import folder_page, write_compare
from memprobe.report import figures, lifelines, record_tables, recorded
from memprobe.results.folder import ResultSet, ResultsFolder


def chart_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="memprobe-data">(.*?)</script>', html, re.DOTALL)
    assert m, "no chart data in the page"
    return json.loads(m.group(1))


def page_of(root: Path) -> str:
    return folder_page(root).read_text(encoding="utf-8")


@pytest.fixture
def fork_page(tmp_path: Path) -> str:
    meta, samples = fork_job()
    return page_of(write_results(tmp_path / "fork", meta, samples))


@pytest.fixture
def rank_root(tmp_path: Path) -> Path:
    meta, samples = rank_job()
    meta["items"] = 40_000
    progress = pd.DataFrame(
        {
            "t": [5.5, 10.0, 15.0, 20.0],
            "items": [0, 10_000, 25_000, 40_000],
            "batches": [0, 40, 100, 160],
            "epoch": [None] * 4,
        }
    )
    return write_results(tmp_path / "ranks", meta, samples, progress)


def test_a_recorded_job_gets_its_own_page_with_the_culprit_first(fork_page: str) -> None:
    culprit = re.search(r'<p class="culprit tone-growing" id="culprit">(.*?)</p>', fork_page, re.DOTALL)
    assert culprit, "no culprit at the top"
    assert "The main process&#39;s 2 DataLoader workers (fork) each grew about 200 MB" in culprit.group(1)
    assert (
        fork_page.index('id="culprit"') < fork_page.index('id="timeline"') < fork_page.index('id="processes"')
    )
    for scenario_only in ('id="matrix"', "All runs compared"):
        assert scenario_only not in fork_page


def test_without_items_there_is_no_items_axis_nor_items_column(fork_page: str) -> None:
    charts = chart_data(fork_page)["charts"]
    assert charts and all(list(c["x"]) == ["time"] for c in charts)
    assert 'data-axis="items"' not in fork_page and "per 1,000 items" not in fork_page
    # What to do says what a fix costs in items/s (test_advice.py): no figure of this job's.
    page = re.sub(r'<section id="advice">.*?</section>', "", fork_page, flags=re.DOTALL)
    assert "over 0 items" not in page and "items/s" not in page.lower().split('id="environment"')[0]


def test_counted_items_give_an_items_axis_a_rate_and_growth_per_1000(rank_root: Path) -> None:
    html = page_of(rank_root)
    charts = chart_data(html)["charts"]
    assert 'data-axis="items"' in html and "MB per 1,000 items" in html
    assert any(c["kind"] == "items_rate" for c in charts)
    assert all(set(c["x"]) == {"time", "items"} for c in charts if c["kind"] != "items_rate")


def test_a_timeline_per_rank_with_exact_readings_as_markers_and_the_estimate_dotted(rank_root: Path) -> None:
    html = page_of(rank_root)
    timelines = [c for c in chart_data(html)["charts"] if c["kind"] == "timeline"]
    assert [c["title"] for c in timelines] == ["Rank 0: USS per process", "Rank 1: USS per process"]
    traces = timelines[0]["data"]
    estimates = [t for t in traces if t.get("line", {}).get("dash") == lifelines.ESTIMATE_DASH]
    exact = [t for t in traces if "markers" in t["mode"]]  # with estimates: markers only
    assert {t["name"] for t in exact} >= {"rank 0", "rank 0 worker 0", "rank 0 worker 1"}
    assert {t["legendgroup"] for t in estimates} == {t["legendgroup"] for t in exact if "worker" in t["name"]}
    assert all(t["mode"] == "markers" for t in exact if "worker" in t["name"])
    assert all(t["showlegend"] is False for t in estimates)
    assert re.search(r"USS estimate vs the next exact reading: median 5\.\d%, max 5\.\d%", html)
    bands = [s for s in timelines[0]["layouts"]["time"]["shapes"] if s["type"] == "rect"]
    assert len(bands) == 1 and bands[0]["x0"] == 5.0


def test_the_who_grows_table_names_kinds_growth_rates_and_what_is_not_growth(fork_page: str) -> None:
    table = fork_page[
        fork_page.index('id="processes"') : fork_page.index("</table>", fork_page.index('id="processes"'))
    ]
    rows = re.findall(r"<tr class=\"tone-(\w+)\">(.*?)</tr>", table, re.DOTALL)
    assert [tone for tone, _ in rows] == ["flat", "growing", "growing"]
    main, worker = rows[0][1], rows[1][1]
    assert "main process" in main and "built +295 MB before its workers started" in main
    assert "made private by others (not growth)" in main
    assert "DataLoader worker (fork)" in worker and "+200 MB" in worker and "+800" in worker  # MB per minute


def test_the_who_grows_table_shows_what_a_parent_built_between_worker_generations(tmp_path: Path) -> None:
    page = page_of(write_results(tmp_path / "gens", *generations_job(built_between=100.0)))
    table = page[page.index('id="processes"') : page.index("</table>", page.index('id="processes"'))]
    main = re.findall(r"<tr class=\"tone-(\w+)\">(.*?)</tr>", table, re.DOTALL)[0]
    assert main[0] == "flat" and "built +295 MB before its workers started" in main[1]
    assert "built +100 MB between worker generations, while none of its workers lived (not growth)" in main[1]
    assert "between worker generations" in page[page.index('id="culprit"') : page.index('id="timeline"')]


def test_the_who_grows_table_says_what_a_forked_worker_allocated_apart_from_what_it_copied(
    tmp_path: Path,
) -> None:
    page = page_of(write_results(tmp_path / "alloc", *fork_job(allocated_share=0.3)))
    table = page[page.index('id="processes"') : page.index("</table>", page.index('id="processes"'))]
    worker = re.findall(r"<tr class=\"tone-\w+\">(.*?)</tr>", table, re.DOTALL)[1]
    assert "at least +60 MB allocated by itself, the rest copied" in worker


def test_the_projection_scales_workers_and_ranks_and_states_its_assumptions(rank_root: Path) -> None:
    html = page_of(rank_root)
    section = html[html.index('id="projection"') : html.index('id="sampling"')]
    heads = re.findall(r"<th>([^<]*rank[^<]*)</th>", section)
    assert heads[:5] == ["workers per rank", "1 rank", "2 ranks (measured)", "4 ranks", "8 ranks"]
    assert section.count('class="measured') == 1 and "full copy:" in section
    assert re.findall(r"<th>(\d+ workers?[^<]*)</th>", section) == [
        "2 workers (measured)",
        "4 workers",
        "8 workers",
        "16 workers",
    ]
    assert "the ranks' part for the ranks in the column" in unescape(section)
    assert "the mean of the 4 workers measured" in section
    assert "over-ram" in section and "more than this machine's memory (2,048 MB)" in unescape(section)


def test_the_projection_s_measured_cell_is_the_peak_total_pss_the_page_states(tmp_path: Path) -> None:
    """Issue 40: "4 workers (measured) 2,069 MB" beside a peak total PSS of 2,266 MB. The outlined
    cell is the peak, and the words say what it holds: the workers' own memory then, and the rest."""
    meta, samples = fork_job()
    html = unescape(page_of(write_results(tmp_path / "fork", meta, samples)))
    section = html[html.index('id="projection"') : html.index('id="sampling"')]
    cell = re.search(r'<td class="measured[^"]*">([^<]*)<', section)
    assert cell and cell.group(1) == "625 MB"
    assert "(its peak total PSS was 625 MB)" in section
    assert "the outlined cell is the peak total PSS itself (625 MB, at 20.0 s)" in section
    assert (
        "Then 2 workers held 400 MB of their own (200 MB each); the other 225 MB was the main process's."
        in section
    )


def test_a_job_without_workers_has_no_projection_and_no_bands(tmp_path: Path) -> None:
    rows = proc_rows(
        1,
        "main",
        -1,
        [(0.1, "pss", 5, 10, 5), (3.0, "pss", 30, 40, 30), (9.0, "pss", 31, 41, 31)],
        kind="main",
    )
    meta = job_meta(
        [proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=9.0)], workers=0, mode="record"
    )
    html = page_of(write_results(tmp_path / "single", meta, pd.DataFrame(rows)))
    assert 'id="projection"' not in html and 'href="#projection"' not in html
    timeline = next(c for c in chart_data(html)["charts"] if c["kind"] == "timeline")
    assert not [s for s in timeline["layouts"]["time"]["shapes"] if s["type"] == "rect"]
    assert "Shaded" not in html and "A forked worker starts" not in html


def test_memprobe_report_analyses_a_recorded_job_once_for_its_summary_and_its_page(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """`memprobe report` on a record folder: summary.json, the terminal and the page come from one
    analysis of the job (it ran twice, summary then page: a 64-process, 2-hour folder took 12.5 s
    to report), and the page says what summary.json says."""
    from memprobe.analysis import recorded as record_summary
    from memprobe.cli import main

    meta, samples = fork_job()
    root = write_results(tmp_path / "fork", meta, samples)
    calls: list[str] = []
    analyse = record_summary.analyse
    monkeypatch.setattr(
        record_summary, "analyse", lambda m, *a, **k: (calls.append(m["run_id"]), analyse(m, *a, **k))[1]
    )
    assert main(["report", str(root)]) == 0
    assert calls == [meta["run_id"]]
    (run,) = json.loads((root / "summary.json").read_text())["runs"]
    page = (root / "report.html").read_text(encoding="utf-8")
    assert run["verdict"] == "growing" and "each grew about 200 MB" in unescape(page)


def _rank_page_with_cgroup(tmp_path: Path, cgroup: dict) -> str:
    meta, samples = rank_job()
    meta["cgroup"] = cgroup
    return page_of(write_results(tmp_path / "cg", meta, samples))


def test_the_job_s_memory_limit_from_its_cgroup_is_what_the_projection_must_fit_in(tmp_path: Path) -> None:
    """A SLURM job's cgroup limits it to 1 GiB on a 2 GiB machine: the page states the limit, the
    cgroup's charge and the OOM kill while the job ran, and the projection marks what exceeds
    that limit (not the machine's memory). The cgroup's path is data: escaped."""
    html = _rank_page_with_cgroup(
        tmp_path,
        {
            "version": 1,
            "path": "/slurm/<b>job_7</b>",
            "limit_mb": 1024.0,
            "usage_mb": 900.0,
            "usage_at_start_mb": 100.0,
            "oom_kills": 3,
            "oom_kills_at_start": 2,
        },
    )
    assert "<b>job_7" not in html and "&lt;b&gt;job_7" in html
    text = unescape(html)
    assert "memory limit</dt><dd>1,024 MB (cgroup v1 /slurm/<b>job_7</b>)" in text
    assert "100 MB as the job started, 900 MB at its end" in text
    assert "OOM kills in its cgroup</dt><dd>1 while it ran (a process was killed for memory)" in text
    section = text[text.index('id="projection"') : text.index('id="sampling"')]
    assert "In red: more than the job's memory limit (cgroup v1 /slurm/<b>job_7</b>) (1,024 MB)" in section


def test_a_cgroup_without_a_limit_leaves_the_machine_s_memory_as_the_limit(tmp_path: Path) -> None:
    html = unescape(
        _rank_page_with_cgroup(
            tmp_path,
            {
                "version": 2,
                "path": "/",
                "limit_mb": None,
                "usage_mb": 50.0,
                "oom_kills": 0,
                "oom_kills_at_start": 0,
            },
        )
    )
    assert "none on its cgroup (cgroup v2 /): the machine's 2,048 MB applies" in html
    assert "OOM kills in its cgroup</dt><dd>0 while it ran<" in html
    assert "more than this machine's memory (2,048 MB)" in html


def test_an_older_record_folder_renders_without_estimates(tmp_path: Path) -> None:
    meta, samples = fork_job()
    for p in meta["processes"]:
        for k in ("kind", "ppid", "forked", "start_method", "start_t", "generation", "end_t"):
            p.pop(k)
    html = page_of(
        write_results(
            tmp_path / "old", meta, samples.drop(columns=["kind", "uss_est_mb", "anon_huge_mb"]), version=1
        )
    )
    assert 'id="culprit"' in html and "USS estimate vs" not in html
    traces = [t for c in chart_data(html)["charts"] if c["kind"] == "timeline" for t in c["data"]]
    assert traces and all(t["mode"] == "lines+markers" for t in traces)


def test_generations_are_banded_and_labelled() -> None:
    lines = [
        figures.Lifeline(pid, "w", "worker 0", gen, start, end, True)
        for pid, gen, start, end in ((1, 0, 1.0, 5.0), (2, 0, 1.1, 5.2), (3, 1, 6.0, 9.0))
    ]
    shapes, notes = figures.generation_bands(lines)
    assert [(s["x0"], s["x1"]) for s in shapes] == [(1.0, 5.2), (6.0, 9.0)]
    assert [n["text"] for n in notes] == ["generation 1", "generation 2"]
    assert [n["text"] for n in figures.generation_bands(lines[:2])[1]] == ["workers alive"]


def test_summary_json_and_compare_take_recorded_runs(rank_root: Path, tmp_path: Path) -> None:
    results = ResultSet.load(rank_root)
    assert recorded.is_recorded(results)
    ResultsFolder.open(rank_root).write_summary(summarize_all(results))
    run = json.loads((rank_root / "summary.json").read_text())["runs"][0]
    assert run["verdict"] == "growing" and run["culprit"].startswith("growing: Rank 0's 2 DataLoader workers")
    assert len(run["processes"]) == 7 and run["estimate_error"]["n"] == 2 and len(run["projection"]) == 16
    page = write_compare(rank_root, rank_root, tmp_path / "compare.html").read_text(encoding="utf-8")
    assert "growing" in page


def test_a_process_never_read_exactly_is_drawn_from_its_estimate() -> None:
    _, samples = fork_job()
    samples = samples[~(samples["pid"].eq(12) & samples["tier"].eq("pss"))].copy()
    samples.loc[samples["pid"].eq(12) & samples["tier"].eq("cheap"), "uss_est_mb"] = 50.0
    line = figures.Lifeline(12, "worker 1", "worker 1", 0, 5.0, 21.0, True)
    series = figures.timeline_series(samples, line)
    assert [s.trace["name"] for s in series if len(s.t)] == ["worker 1 (estimated)"]
    assert series[0].trace["line"]["dash"] == lifelines.ESTIMATE_DASH and series[0].trace["showlegend"]


def test_total_pss_says_which_processes_it_counts_by_their_estimate(tmp_path: Path) -> None:
    meta, samples = fork_job()
    samples = samples[~(samples["pid"].eq(12) & samples["tier"].eq("pss"))]
    html = page_of(write_results(tmp_path / "unread", meta, samples))
    assert (
        "1 process (worker 1) had no exact reading, so total PSS counts it with an estimate: its private "
        "memory (USS) from its page faults, plus its share of the pages it shares" in html
    )
    assert "about " in html and "(1 process never read exactly: estimated)" in html
    assert "over-counts by about" in html
    assert "--pss-budget" in html  # how to have every process read


def test_a_watched_job_counts_time_from_when_memprobe_began_watching(tmp_path: Path) -> None:
    meta, samples = fork_job()
    meta["kind"] = "watch"
    meta.update(status="failed", error={"type": "CommandExited", "message": "the command exited with code 1"})
    html = page_of(write_results(tmp_path / "watch", meta, samples))
    assert '<div class="brand">memprobe watch</div>' in html
    titles = {c["layouts"]["time"]["xaxis"]["title"]["text"] for c in chart_data(html)["charts"]}
    assert titles == {"seconds since memprobe began watching"}
    assert "The command failed:</b> CommandExited: the command exited with code 1" in html


def test_processes_never_read_are_named_with_their_generation_where_a_role_comes_again(
    tmp_path: Path,
) -> None:
    """A torchrun job's box listed "rank 0 worker 1, rank 0 worker 0, rank 0 worker 1, ...": which one?"""
    meta, samples = generations_job()
    samples = samples[~(samples["pid"].isin([12, 22]) & samples["tier"].eq("pss"))]
    html = page_of(write_results(tmp_path / "gens", meta, samples))
    assert "2 processes (worker 1 · gen 1, worker 1 · gen 2) had no exact reading" in html


def test_notes_say_what_a_launcher_built_before_its_ranks_and_a_watched_parent_was_seen_to_build() -> None:
    launcher = {"kind": "launcher", "built_mb": 240.0, "start_t": 0.0}
    assert record_tables.notes(launcher, True, False)[0] == "built +240 MB before its ranks started"
    # The root of an mp.spawn job: its children are ranks it started, not workers, and no mark.
    root = {"kind": "main", "built_mb": 220.0, "start_t": 0.0}
    assert record_tables.notes(root, True, False, True)[0] == "built +220 MB before its ranks started"
    assert record_tables.notes(root, True, False)[0] == "built +220 MB before the job's first memprobe.mark"
    meta, samples = fork_job()
    meta["processes"][0]["start_t"] = -5.0
    main = next(
        r for r in summarize(meta, samples, pd.DataFrame(), pd.DataFrame()).processes if r["role"] == "main"
    )
    assert record_tables.notes(main, True, True)[0] == (
        "built +295 MB before its workers started (what memprobe saw: it was running before)"
    )


def test_a_command_killed_by_a_signal_shows_the_exit_code_memprobe_exits_with(tmp_path: Path) -> None:
    """memprobe exits 130 after Ctrl-C (128+N for signal N); the page said "exit code -2"."""
    assert recorded.exit_code_text(-2) == "130 (killed by SIGINT)"
    assert recorded.exit_code_text(3) == "3" and recorded.exit_code_text(-9) == "137 (killed by SIGKILL)"
    meta, samples = fork_job()
    meta.update(status="interrupted", exit_code=-2)
    html = page_of(write_results(tmp_path / "int", meta, samples))
    assert "130 (killed by SIGINT)" in html and ">-2<" not in html


def test_a_recorded_job_s_total_pss_holds_between_its_exact_rounds() -> None:
    """Rounds are sparse where nothing moves: an mp.spawn DDP job's total sloped down for 70 s
    from one round to the next, where it had dropped at once when its workers exited."""
    _, samples = fork_job()
    charts = recorded.memory_charts(
        samples, pss_by_role(samples), pd.DataFrame(), Clock.from_progress(pd.DataFrame()), 1000, False
    )
    pss = [t for c in charts if c["kind"] == "pss_by_role" for t in c["data"]]
    total = [t for c in charts if c["kind"] == "rss_vs_pss" for t in c["data"] if t["name"] == "total PSS"]
    assert pss and total and all(t["line"].get("shape") == "hv" for t in pss + total)
    rss = [t for c in charts if c["kind"] == "rss_vs_pss" for t in c["data"] if t["name"] == "sum of RSS"]
    assert rss[0]["line"].get("shape") is None  # read at every tick: a line


def test_the_stacked_total_names_each_process_by_its_final_role(tmp_path: Path) -> None:
    """Lightning's rank 0 was "launcher" in its rows until its workers started (and its workers
    "worker 0/1"): the stacked PSS chart drew a grey "launcher" beside "rank 0"."""
    html = page_of(write_results(tmp_path / "pl", *treejobs.lightning_job(), version=2))
    charts = chart_data(html)["charts"]
    names = {t["name"] for c in charts if c["kind"] == "pss_by_role" for t in c["data"]}
    assert {"rank 0", "rank 0 worker 0", "rank 1"} <= names and not names & {"launcher", "worker 0", "main"}


def test_the_projection_says_when_the_workers_levelled_off_short_of_a_full_copy(tmp_path: Path) -> None:
    html = page_of(write_results(tmp_path / "lev", *treejobs.levelled_fork_job()))
    text = re.sub(r"\s+", " ", html)
    assert "“Full copy” is as measured: all 2 workers measured levelled off" in text
    assert "short of a copy of everything their parent held (300 MB)" in text
    going = re.sub(r"\s+", " ", page_of(write_results(tmp_path / "going", *fork_job(worker_growth=120.0))))
    assert "levelled off" not in going and "“Full copy”: every forked worker ends with" in going


DENIED = (
    "smaps_rollup: permission denied: another user's process (uid 1234, started by uid 1000: a "
    "set-user-ID program); memprobe runs as uid 1000"
)


def _denied_job() -> tuple[dict, pd.DataFrame]:
    """fork_job's worker 1 runs as another user: every PSS read of it was refused (its RSS, from
    stat and status, is known)."""
    meta, samples = fork_job()
    samples = samples.copy()
    refused = samples["pid"].eq(12) & samples["tier"].eq("pss")
    samples.loc[refused, ["pss_mb", "uss_mb", "private_dirty_mb", "anon_huge_mb"]] = None
    samples.loc[refused, ["tier", "reason"]] = ("cheap", DENIED)
    return meta, samples


def test_a_process_memprobe_may_not_read_is_left_out_of_the_total_and_the_page_says_why(
    tmp_path: Path,
) -> None:
    """Recorded as an unprivileged user, a job's set-user-ID child read as "smaps_rollup unreadable
    (process exiting?)"; the page advised a larger --pss-budget and said the total counted it with
    an estimate, while total PSS showed "-" for the whole run."""
    meta, samples = _denied_job()
    root = write_results(tmp_path / "denied", meta, samples)
    html = page_of(root)
    s = summarize_all(ResultSet.load(root))[0]
    row = next(r for r in s.processes or [] if r["pid"] == 12)
    assert row["denied"] == DENIED
    # The total leaves worker 1 out: main and worker 0 alone, at every round.
    assert s.total_pss_peak_mb == pytest.approx((10 + 200 + 5) + (200 + 5))
    assert (
        "memprobe may not read the memory of 1 process: worker 1 (pid 12: smaps_rollup: permission denied: another"
        in html
    )
    assert "total PSS leaves it out, so the whole tree held up to 320 MB more than it shows" in html
    assert "No --pss-budget reads it: record as the user it runs as, or as root." in html
    assert "(leaves out 1 process memprobe may not read: up to 320 MB more)" in html
    assert "had no exact reading, so total PSS counts" not in html and "larger --pss-budget" not in html
    assert "process exiting?" not in html
    assert "Total PSS leaves out 1 process memprobe may not read (permission denied)" in (s.explanation or "")


def test_a_process_of_memprobes_own_user_that_is_not_dumpable_gets_root_as_the_advice(tmp_path: Path) -> None:
    """Recording as its own user does not read a process that made itself non-dumpable: only root does."""
    meta, samples = _denied_job()
    own = (
        "smaps_rollup: permission denied: the process is not dumpable (it changed its uids or called "
        "prctl(PR_SET_DUMPABLE, 0)); memprobe runs as uid 1000"
    )
    samples["reason"] = samples["reason"].replace(DENIED, own)
    html = unescape(page_of(write_results(tmp_path / "undumpable", meta, samples)))
    assert (
        "No --pss-budget reads it: record as root (a process that is not dumpable is root's alone to read)."
        in html
    )
    assert "record as the user" not in html


def test_no_verdict_says_which_processes_memprobe_may_not_read(tmp_path: Path) -> None:
    """Every process refused: "no verdict: no worker or parent process has two exact readings" said
    nothing of why."""
    meta, samples = fork_job()
    refused = samples["tier"].eq("pss")
    samples.loc[refused, ["pss_mb", "uss_mb", "private_dirty_mb", "anon_huge_mb"]] = None
    samples.loc[refused, ["tier", "reason"]] = ("cheap", DENIED)
    s = summarize_all(ResultSet.load(write_results(tmp_path / "all", meta, samples)))[0]
    assert s.verdict is None and s.total_pss_peak_mb is None
    assert s.explanation == (
        "no verdict: no worker or parent process has two exact readings in its window; memprobe may not "
        "read 3 processes of it (permission denied)"
    )


# -- a recorded job's own meta, and older ones read in its shape (issue 25) ------------------------

V1_RECORD = Path(__file__).parents[1] / "data" / "results-v1" / "record"


def test_an_older_recorded_meta_written_as_a_scenario_spec_loads_in_today_s_shape() -> None:
    """Earlier memprobes wrote a recorded job's meta as a scenario spec (backend = the command's
    name, mode = the workers' start method) so that the scenario analysis took it: loading
    upgrades it once (results.upgrade.upgrade_recorded) to the fields the recorded analysis
    reads, and its summary says what it said."""
    results = ResultSet.load(V1_RECORD)
    (meta,) = results.metas
    assert "spec" not in meta
    assert meta["start_method"] == "fork" and meta["max_workers"] == 2
    assert meta["verdict"] == {"growth_threshold_mb": 50.0} and meta["command"][-1].endswith("job.py")
    (s,) = summarize_all(results)
    assert (s.backend, s.mode, s.workers, s.workload) == ("job", "fork", 2, "record")
    kept = json.loads((V1_RECORD / "summary.json").read_text())["runs"][0]
    assert (kept["backend"], kept["mode"], kept["workers"]) == (s.backend, s.mode, s.workers)


def test_a_recorded_job_is_summarized_from_its_own_fields_without_a_scenario_spec() -> None:
    """The analysis is chosen by the run's kind: a recorded meta holds no spec, and its summary
    names the command (the run id), the workers' start method (else the kind) and the most
    workers alive at once."""
    meta, samples = fork_job()
    assert "spec" not in meta
    s = summarize(meta, samples, pd.DataFrame(), pd.DataFrame())
    assert (s.backend, s.mode, s.workers, s.verdict) == ("train", "fork", 2, "growing")
    none = summarize(meta | {"start_method": None, "kind": "watch"}, samples, pd.DataFrame(), pd.DataFrame())
    assert none.mode == "watch" and none.workload == "watch"


def test_many_generations_fold_into_one_row_a_chart_of_each_generation_s_peak_and_labels_apart(
    tmp_path: Path,
) -> None:
    """Twelve epochs of two workers (treejobs.epochs_job: each generation's workers copy 3 MB
    more, main's own memory 5 MB more, the peaks +11 MB an epoch; forty epochs of four workers
    made a table of 160 rows): the table holds main, the first and the last generation and one
    row for the 20 workers between; the timeline's generation labels stay apart; the chart draws
    each generation's peak and the trend; the forecast is said in words on the page and in the
    terminal's line, from the summary."""
    meta, samples, system = treejobs.epochs_job(12, workers=2, others_mb=400.0)  # shared: peaks of total PSS
    env = {"memprobe": "0.0", "python": "3.11", "mem_total_mb": 24_000.0}
    html = unescape(
        page_of(write_results(tmp_path / "epochs", meta, samples, environment=env, system=system))
    )
    table = html[html.index('id="processes"') : html.index("</table>", html.index('id="processes"'))]
    rows = re.findall(r'<tr class="tone-\w+( folded)?">(.*?)</tr>', table, re.DOTALL)
    assert len(rows) == 1 + 2 + 1 + 2
    (folded,) = [r for f, r in rows if f]
    assert "workers · gen 2-11" in folded and "20 processes" in folded and "+103 MB to +130 MB" in folded
    assert "The workers of the generations between each parent's first and last" in html
    charts = chart_data(html)["charts"]
    (timeline,) = [c for c in charts if c["kind"] == "timeline"]
    labels = timeline["layouts"]["time"]["annotations"]
    assert 2 <= len(labels) < 12 and labels[0]["text"] == "gen 1"
    xs = [a["x"] for a in labels]
    assert min(b - a for a, b in itertools.pairwise(xs)) >= 0.1 * (119.5 - 0.5) - 1e-9
    (per_epoch,) = [c for c in charts if c["kind"] == "epochs"]
    peaks = next(t for t in per_epoch["data"] if t["name"] == "peak total PSS")
    assert per_epoch["x"]["time"][0] == list(range(1, 13)) and peaks["y"][:3] == [515.0, 526.0, 537.0]
    assert any(t["name"] == "trend +11 MB per generation" for t in per_epoch["data"])
    section = html[html.index('id="forecast"') : html.index("</section>", html.index('id="forecast"'))]
    assert "Each epoch's workers grow +3.0 MB more; the job's peak total PSS +11 MB per epoch" in section
    assert "4 GB at about epoch 313, about 50 min after its last peak" in section
    assert (
        "12 generations of 2 workers (the last still running as the record ended); each worker grew +100 MB in "
        "the first, +130 MB in the last that ended; the job's total PSS peaked at 515 MB in the first and 625 MB "
        "in the last that ended." in section
    )
    from memprobe.cli.recording import limit_line

    (s,) = summarize_all(ResultSet.load(tmp_path / "epochs"))
    assert "; time to it: each epoch's workers grow +3.0 MB more; " in limit_line(s.memory_limit)
    assert "4 GB at about epoch 313, about 50 min after its last peak" in limit_line(s.memory_limit)
