"""Pages of many processes (a job forking 64 children, 8 ranks of 7 DataLoader workers, a run of
16 workers): every process in the table, the charts by group (each group's median and range)
with the top growers by name, and no two lines of one chart in one colour."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from test_report import summary
from test_report_record import chart_data
from treejobs import (
    MAIN_BUILDS,
    fork_job,
    gone_row,
    job_meta,
    proc_info,
    proc_rows,
    rank_job,
    rank_worker,
    write_results,
)

from memprobe.pages import folder_page
from memprobe.report import figures
from memprobe.report.render import all_runs_chart, bar_charts

GROWERS = {17: 30.0, 42: 27.0, 5: 19.0}  # the children that grew most, beyond their siblings' +14 MB


def wide_fork_job(
    children: int = 64, generations: int = 1, growers: dict[int, float] | None = None
) -> tuple[dict, pd.DataFrame]:
    """main builds 300 MB by t=4, then forks ``children`` children (in ``generations`` one after
    the other, 16 s each) that copy 14 MB each but for ``growers``."""
    growers = GROWERS if growers is None else growers
    rows = proc_rows(
        1,
        "main",
        -1,
        [*MAIN_BUILDS, *((5.0 + 16 * g + 15, "pss", 12, 316, 302) for g in range(generations))],
        kind="main",
        anon_is_faults=True,
    )
    last = 5.0 + 16 * generations
    procs = [proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=last)]
    per_gen = children // generations
    for k in range(children):
        gen, pid, role = k // per_gen, 100 + k, f"worker {k}"
        start = 5.0 + 16 * gen
        g = growers.get(k, 14.0)
        rows += proc_rows(
            pid,
            role,
            k,
            [
                (start + 0.2, "pss", 1, 300, 1),
                (start + 5, "pss", g / 2, 305, g / 2),
                (start + 15, "pss", g, 314, g),
            ],
            kind="fork",
        )
        rows.append(gone_row(pid, role, k, start + 15.5))
        procs.append(
            proc_info(
                pid,
                role,
                "fork",
                ppid=1,
                start_t=start,
                last_t=start + 15,
                worker=k,
                forked=True,
                start_method="fork",
                generation=gen,
                end_t=start + 15.5,
            )
        )
    return job_meta(procs, workers=per_gen), pd.DataFrame(rows)


def wide_rank_job(ranks: int = 8, workers: int = 7) -> tuple[dict, pd.DataFrame]:
    """A launcher and ``ranks`` ranks of ``workers`` DataLoader workers each (copying 20 MB; rank 3's
    worker 5 copies 90 MB)."""
    rows = proc_rows(
        1, "main", -1, [(0.1, "pss", 8, 30, 8), (20.0, "pss", 9, 30, 9)], kind="launcher", anon_is_faults=True
    )
    procs = [proc_info(1, "main", "launcher", ppid=None, start_t=0.0, last_t=20.0)]
    for r in range(ranks):
        rp = 10 + r
        rows += proc_rows(
            rp,
            f"rank {r}",
            -1,
            [(1.0, "pss", 20, 40, 20), (4.0, "pss", 400, 420, 400), (5.3, "pss", 30, 420, 401)],
            rank=r,
            kind="rank",
            anon_is_faults=True,
        )
        rows += proc_rows(rp, f"rank {r}", -1, [(20.0, "pss", 31, 421, 402)], rank=r, kind="rank")
        procs.append(proc_info(rp, f"rank {r}", "rank", ppid=1, start_t=0.5, last_t=20.0, rank=r))
        for w in range(workers):
            g = 90.0 if (r, w) == (3, 5) else 20.0
            points = [(5.3, "pss", 1, 400, 1), (12.0, "pss", g / 2, 405, g / 2), (20.0, "pss", g, 410, g)]
            rows += rank_worker(procs, 1000 + 10 * r + w, rp, r, w, points)
    return job_meta(procs, ranks={str(r): 10 + r for r in range(ranks)}, workers=workers), pd.DataFrame(rows)


def page_of(root: Path) -> str:
    return folder_page(root).read_text(encoding="utf-8")


def trace_color(trace: dict) -> str | None:
    color = (trace.get("line") or {}).get("color") or (trace.get("marker") or {}).get("color")
    return color if isinstance(color, str) else None


def shared_colors(chart: dict) -> list[tuple[str, str, str]]:
    """Pairs of lines of one chart drawn in one colour: a line is a legend entry, one legend group
    (a process's readings and its estimate, a group's median and range) or one name."""
    seen: dict[str, str] = {}
    clashes = []
    for trace in chart["data"]:
        color, key = trace_color(trace), str(trace.get("legendgroup") or trace["name"])
        if color is None or ((trace.get("line") or {}).get("width") == 0 and not trace.get("fill")):
            continue  # an invisible twin (a second axis's line, a range's lower edge)
        other = seen.setdefault(color.lower(), key)
        if other != key:
            clashes.append((chart["id"], other, key))
    return clashes


def legend(chart: dict) -> list[str]:
    return [t["name"] for t in chart["data"] if t.get("showlegend", True)]


JOBS = {
    "64 forked children": wide_fork_job,
    "two generations of 12": lambda: wide_fork_job(children=24, generations=2),
    "six generations of 4": lambda: wide_fork_job(children=24, generations=6, growers={}),
    "8 ranks of 7 workers": wide_rank_job,
    "12 ranks without workers": lambda: wide_rank_job(ranks=12, workers=0),
    "2 ranks of 4 workers": lambda: wide_rank_job(ranks=2, workers=4),
    "9 children": lambda: wide_fork_job(children=9, growers={}),
    "2 children": fork_job,
    "2 ranks of 2": rank_job,
}


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each job's page, written once for the tests of this module (a page of 65 processes takes
    seconds to analyse)."""

    class Pages(dict):
        def __missing__(self, name: str) -> str:
            self[name] = page_of(write_results(tmp_path_factory.mktemp("job") / "job", *JOBS[name]()))
            return self[name]

    return Pages()


@pytest.fixture
def fork64(pages: dict[str, str]) -> str:
    return pages["64 forked children"]


# -- colours ----------------------------------------------------------------------------------


@pytest.mark.parametrize("job", list(JOBS))
def test_no_two_lines_of_one_chart_of_a_record_page_share_a_colour(pages: dict[str, str], job: str) -> None:
    charts = chart_data(pages[job])["charts"]
    assert charts
    assert [clash for c in charts for clash in shared_colors(c)] == []


def run_samples(workers: int) -> pd.DataFrame:
    """A scenario run's samples: main and ``workers`` workers, read exactly every second for 10 s."""
    rows = []
    for t in range(11):
        for w in range(-1, workers):
            rows.append(
                {
                    "t": float(t),
                    "pid": 1 if w < 0 else 100 + w,
                    "role": "main" if w < 0 else f"worker {w}",
                    "worker": w,
                    "tier": "pss",
                    "missing": False,
                    "reason": None,
                    "rss_mb": 300.0,
                    "pss_mb": 50.0 + t * (w + 2),
                    "uss_mb": 10.0 + t * (w + 2),
                    "rss_shmem_mb": 0.0,
                    "minflt": 1000.0 * t * (w + 2),
                    "cpu_s": 0.5 * t,
                }
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("workers", [2, 8, 16])
def test_no_two_lines_of_one_chart_of_a_run_share_a_colour(workers: int) -> None:
    progress = pd.DataFrame({"t": [1.0, 10.0], "items": [0, 5000], "batches": [0, 50], "epoch": [0, 0]})
    charts = figures.run_charts(
        "c0", run_samples(workers), progress, pd.DataFrame(), figures.Milestones({}), max_points=100
    )
    assert {"pss_by_role", "uss", "faults", "cpu"} <= {c["kind"] for c in charts}
    assert [clash for c in charts for clash in shared_colors(c)] == []


def test_a_run_of_16_workers_draws_them_as_one_group_with_the_top_risers_by_name() -> None:
    progress = pd.DataFrame({"t": [1.0, 10.0], "items": [0, 5000], "batches": [0, 50], "epoch": [0, 0]})
    charts = {
        c["kind"]: c
        for c in figures.run_charts(
            "c0", run_samples(16), progress, pd.DataFrame(), figures.Milestones({}), max_points=100
        )
    }
    assert legend(charts["pss_by_role"]) == ["main", "workers (16)"]
    # worker w's USS rises (w + 2) MB a second: the median +95 MB; above +104.5 MB (7 workers), the top 6 by name
    assert legend(charts["uss"]) == [
        "main",
        "workers (16): median, range",
        *(f"worker {w} (+{(w + 2) * 10} MB)" for w in (15, 14, 13, 12, 11, 10)),
    ]
    assert "the 6 that rose most beyond their group's median rise (workers +95 MB)" in charts["uss"]["note"]
    assert legend(charts["faults"]) == ["workers (16): median, range"]
    assert "16 workers, drawn as one" in charts["faults"]["note"]
    cpu = charts["cpu"]
    assert legend(cpu) == ["main", "workers (16)", "total"]
    bands = {t["name"]: t["y"] for t in cpu["data"]}
    assert all(
        abs(w + m - t) < 1e-6
        for w, m, t in zip(bands["workers (16)"], bands["main"], bands["total"], strict=True)
    )
    few = figures.run_charts(
        "c0", run_samples(8), progress, pd.DataFrame(), figures.Milestones({}), max_points=100
    )
    assert all(len(legend(c)) >= 8 for c in few if c["kind"] in ("pss_by_role", "uss", "faults", "cpu"))


def test_no_two_runs_of_a_scenario_report_share_a_colour(tmp_path: Path) -> None:
    """Twelve runs of one backend (modes x worker counts): each run its own colour on the chart of
    every run, and each mode x workers its own on the bars (ten colours went round)."""

    class Runs:  # what render reads of a results folder: the manifest and the tables of each run
        def __init__(self) -> None:
            self.manifest = {"environment": {"mem_total_mb": 24_000.0}}

        def run_table(self, name: str, run_id: str) -> pd.DataFrame:
            n = int(run_id.rsplit("w", 1)[1])
            if name == "progress":
                return pd.DataFrame(
                    {"t": [1.0, 10.0], "items": [0, 5000], "batches": [0, 50], "epoch": [0, 0]}
                )
            return run_samples(n)

    summaries = [
        summary(backend="list", mode=mode, workers=w)
        for mode in ("fork", "spawn")
        for w in (1, 2, 3, 4, 6, 8)
    ]
    chart = all_runs_chart(Runs(), summaries, 100)  # type: ignore[arg-type]
    assert chart is not None and len(chart["data"]) == 12
    assert shared_colors(chart) == []
    bars = bar_charts(summaries)
    assert bars and all(len(b["data"]) == 12 for b in bars)
    assert [clash for b in bars for clash in shared_colors(b)] == []


def test_a_line_keeps_its_colour_unless_an_earlier_line_has_it() -> None:
    from memprobe.report.chart import unique_colors

    data = [
        {"name": "main", "line": {"color": "#1f5fa8"}},
        {
            "name": "worker 0",
            "legendgroup": "11",
            "line": {"color": "#e8590c", "width": 0},
            "fill": "tonexty",
            "fillcolor": "rgba(232,89,12,0.22)",
        },
        {"name": "worker 0 (estimate)", "legendgroup": "11", "line": {"color": "#e8590c"}},
        {
            "name": "worker 8",
            "legendgroup": "19",
            "marker": {"color": "#e8590c"},
            "line": {"color": "#e8590c"},
        },
        {"name": "worker 8 (estimate)", "legendgroup": "19", "line": {"color": "#e8590c"}},
        {"name": "twin", "line": {"color": "#1f5fa8", "width": 0}},  # invisible: not a line
    ]
    out = unique_colors(data)
    assert [trace_color(t) for t in out[:3]] == ["#1f5fa8", "#e8590c", "#e8590c"]
    assert out[1]["fillcolor"] == "rgba(232,89,12,0.22)"
    new = trace_color(out[3])
    assert new not in ("#1f5fa8", "#e8590c") and out[3]["marker"]["color"] == new == trace_color(out[4])
    assert trace_color(out[5]) == "#1f5fa8"


# -- groups -----------------------------------------------------------------------------------


def test_64_forked_children_are_drawn_as_their_group_with_the_top_growers_by_name(fork64: str) -> None:
    (timeline,) = [c for c in chart_data(fork64)["charts"] if c["kind"] == "timeline"]
    assert legend(timeline) == [
        "main",
        "forked children (64): median, range",
        "worker 17 (+30 MB)",
        "worker 42 (+27 MB)",
        "worker 5 (+19 MB)",
    ]
    band = [t for t in timeline["data"] if t.get("legendgroup") == "forked children (64)"]
    low, high, median = (
        next(t for t in band if t["name"].endswith(end)) for end in ("lowest", "highest", "median, range")
    )
    assert high["fill"] == "tonexty" and timeline["data"].index(high) == timeline["data"].index(low) + 1
    # At the end of their lives: 61 children at 14 MB, three above: median 14, range 14 to 30.
    last = max(i for i, v in enumerate(median["y"]) if v is not None)
    assert (low["y"][last], median["y"][last], high["y"][last]) == (14.0, 14.0, 30.0)
    assert "worker 17 +30 MB, worker 42 +27 MB, worker 5 +19 MB" in timeline["note"]
    assert "their group's median growth (forked children +14 MB)" in timeline["note"]
    assert "65 processes" in timeline["note"] and "The table below lists every process" in timeline["note"]
    assert "65 processes" in fork64  # the note is on the page


def test_the_table_of_a_wide_page_still_lists_every_process(fork64: str) -> None:
    table = fork64[fork64.index('id="processes"') : fork64.index("</table>", fork64.index('id="processes"'))]
    rows = re.findall(r'<td class="nowrap">([^<]+)</td><td>', table)
    assert rows == ["main", *(f"worker {k}" for k in range(64))]


def test_total_pss_of_a_wide_page_is_stacked_by_group_and_sums_to_the_same_total(
    tmp_path: Path, fork64: str
) -> None:
    (stacked,) = [c for c in chart_data(fork64)["charts"] if c["kind"] == "pss_by_role"]
    assert stacked["title"] == "Total PSS, stacked by process group"
    assert legend(stacked) == ["main", "forked children (64)"]
    (line,) = [c for c in chart_data(fork64)["charts"] if c["kind"] == "rss_vs_pss"]
    total = next(t for t in line["data"] if t["name"] == "total PSS")
    stack_sum = [sum(v for v in values) for values in zip(*(t["y"] for t in stacked["data"]), strict=True)]
    by_t = dict(zip(line["x"]["time"][1], total["y"], strict=True))
    assert [round(v, 3) for v in stack_sum] == [round(by_t[t], 3) for t in stacked["x"]["time"][0]]


def test_ranks_stack_each_with_its_workers_and_share_one_timeline_of_groups(pages: dict[str, str]) -> None:
    charts = chart_data(pages["8 ranks of 7 workers"])["charts"]
    timelines = [c for c in charts if c["kind"] == "timeline"]
    assert [c["title"] for c in timelines] == ["All ranks: USS per process"]
    assert legend(timelines[0]) == [
        "main",
        "rank processes (8): median, range",
        "DataLoader workers (56): median, range",
        "rank 3 worker 5 (+90 MB)",
    ]
    (stacked,) = [c for c in charts if c["kind"] == "pss_by_role"]
    assert legend(stacked) == [*(f"rank {r} and its 7 children" for r in range(8)), "main"]


def test_many_ranks_without_workers_are_one_group_on_both_charts(pages: dict[str, str]) -> None:
    charts = chart_data(pages["12 ranks without workers"])["charts"]
    (timeline,) = [c for c in charts if c["kind"] == "timeline"]
    assert legend(timeline) == ["main", "rank processes (12): median, range"]
    (stacked,) = [c for c in charts if c["kind"] == "pss_by_role"]
    assert legend(stacked) == ["rank processes (12)", "main"]  # before: a band per rank


def test_generations_are_groups_of_their_own(pages: dict[str, str]) -> None:
    (timeline,) = [c for c in chart_data(pages["two generations of 12"])["charts"] if c["kind"] == "timeline"]
    assert legend(timeline) == [
        "main",
        "forked children · gen 1 (12): median, range",
        "forked children · gen 2 (12): median, range",
        "worker 17 · gen 2 (+30 MB)",
        "worker 5 · gen 1 (+19 MB)",
    ]


def test_many_generations_fall_back_to_one_group_per_kind(pages: dict[str, str]) -> None:
    (timeline,) = [c for c in chart_data(pages["six generations of 4"])["charts"] if c["kind"] == "timeline"]
    assert legend(timeline) == ["main", "forked children (24): median, range"]
    assert "None grew much beyond its group's median growth (forked children +14 MB)" in timeline["note"]


def test_a_small_page_draws_every_process_as_its_own_line(pages: dict[str, str]) -> None:
    charts = chart_data(pages["9 children"])["charts"]
    (timeline,) = [c for c in charts if c["kind"] == "timeline"]
    assert legend(timeline) == ["main", *(f"worker {k}" for k in range(9))]
    assert "note" not in timeline
    (stacked,) = [c for c in charts if c["kind"] == "pss_by_role"]
    assert stacked["title"] == "Total PSS, stacked by process role"
    assert legend(stacked) == ["main", *(f"worker {k}" for k in range(9))]
