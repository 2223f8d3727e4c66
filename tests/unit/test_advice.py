"""What to do, per cause memprobe finds (memprobe/core/cures.py), on every surface that prints a
verdict: the terminal of `record`/`watch` and of `run`, the record page, the scenario report and
the pytest failure message; each fix with its change and its cost, and the pytest guard."""

from __future__ import annotations

import io
import re
from html import escape, unescape
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from treejobs import (
    HALF_AND_HALF,
    STEP_AT_START,
    fork_job,
    job_meta,
    main_job,
    proc_info,
    proc_rows,
    write_results,
)

from memprobe.analysis.runs import summarize
from memprobe.cli.recording import print_result
from memprobe.core import cures
from memprobe.pages import folder_page
from memprobe.record.recording import RecordResult
from memprobe.results.files import RunWriter, write_json_atomic
from memprobe.results.folder import SCHEMA_VERSION
from memprobe.results.gather import consolidate
from memprobe.run.api import ProfileResult, WorkerGrowth

ROOT = Path(__file__).resolve().parents[2]

# -- recorded jobs, one per cause ------------------------------------------------------------------


def copy_job() -> tuple[dict, pd.DataFrame]:
    """Two fork workers copy 200 MB each of what main built (copy-on-access)."""
    return fork_job()


def allocating_job() -> tuple[dict, pd.DataFrame]:
    """The same workers, but their anonymous memory rises with their faults: memory of their own."""
    return fork_job(allocated_share=1.0)


def spawn_job(end_mb: float) -> tuple[dict, pd.DataFrame]:
    """A spawned worker whose start-up (unpickling its copy) ends at 150 MB by 3.8 s, then holds
    ``end_mb`` at 12 s."""
    main = proc_rows(1, "main", -1, [(0.1, "pss", 50, 60, 50), (12.0, "pss", 51, 61, 51)], kind="main")
    cheap = [
        (t, "cheap", None, min(150.0, 30 + 60 * (t - 1.0)), 0)
        for t in (1.2, 1.6, 2.0, 2.4, 2.8, 3.2, 3.4, 3.6)
    ]
    child = proc_rows(
        2,
        "worker 0",
        0,
        [
            (1.1, "pss", 20, 30, 20),
            *cheap,
            (3.8, "pss", 150, 150, 150),
            (12.0, "pss", end_mb, end_mb, end_mb),
        ],
        kind="spawn",
    )
    procs = [
        proc_info(1, "main", "main", ppid=None, start_t=0.0, last_t=12.0),
        proc_info(2, "worker 0", "spawn", ppid=1, start_t=1.0, last_t=12.0, worker=0, start_method="spawn"),
    ]
    return job_meta(procs, workers=1, mode="spawn"), pd.DataFrame(main + child)


def dev_shm(levels: list[float]) -> pd.DataFrame:
    """The system table: /dev/shm in use at each second from 0 (the whole machine's)."""
    return pd.DataFrame({"t": [float(t) for t in range(len(levels))], "dev_shm_mb": levels})


def shm_job(
    levels: list[float], mapped: float = 0.0, kind: str = "dataloader"
) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """Flat fork workers (5 to 20 s) of ``kind`` (DataLoader workers hand every tensor over in
    /dev/shm), one of which maps ``mapped`` MB of shared memory at one tick, and /dev/shm's level
    each second."""
    meta, samples = fork_job(worker_growth=6.0)
    for p in meta["processes"]:
        p["kind"] = kind if p["kind"] == "dataloader" else p["kind"]
    samples.loc[samples["kind"] == "dataloader", "kind"] = kind
    samples["rss_shmem_mb"] = 0.0
    samples.loc[(samples["pid"] == 11) & (samples["t"] == 10.0), "rss_shmem_mb"] = mapped
    return meta, samples, dev_shm(levels)


KEPT = [1.5] * 5 + [1.5 + 16 * k for k in range(16)] + [1.5] * 3  # kept batches, freed at the end
IN_FLIGHT = [1.5] * 5 + [160.0] * 16 + [1.5] * 3  # batches in flight, a constant level
STEP = [1.5] * 12 + [201.5] * 12  # another program's 200 MB of files from 12 s on

JOBS = {
    "shared-grows": (lambda: shm_job(KEPT), "growing"),
    "copy-on-access": (copy_job, "growing"),
    "workers-allocate": (allocating_job, "growing"),
    "main-keeps": (main_job, "growing"),
    "main-index": (lambda: main_job(STEP_AT_START), "growing"),
    "main-grows": (lambda: main_job(HALF_AND_HALF), "growing"),
    "startup-copy": (lambda: spawn_job(156.0), "flat"),
}


def recorded_summary(job):
    meta, samples, *system = job()
    return summarize(meta, samples, pd.DataFrame(), system[0] if system else pd.DataFrame())


def terminal(summary) -> str:
    out = io.StringIO()
    print_result(RecordResult(Path("/r"), [summary], None, 0, "ok", [], "record"), out)
    return out.getvalue()


def advice_section(html: str) -> str:
    m = re.search(r'<section id="advice">(.*?)</section>', html, re.S)
    assert m, "no 'What to do' section on the page"
    return m.group(1)


def page_text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


@pytest.mark.parametrize("cause", list(JOBS))
def test_a_recorded_job_s_verdict_names_its_cause(cause: str) -> None:
    job, verdict = JOBS[cause]
    s = recorded_summary(job)
    assert s.verdict == verdict and s.causes == [cause], (s.causes, s.culprit)
    assert s.to_dict()["causes"] == [cause]  # summary.json says it too


def test_shared_memory_the_workers_hand_over_and_the_job_keeps_makes_it_grow() -> None:
    s = recorded_summary(lambda: shm_job(KEPT))
    # /dev/shm from its level over the first third of the workers' life to the last (5-20 s).
    assert s.verdict == "growing" and s.causes == ["shared-grows"]
    assert s.culprit.startswith("growing: Shared memory in /dev/shm (the whole machine's) rose +160 MB")
    assert "No process grew more than 50 MB of its own" in s.culprit  # each process's own, as before


def test_forked_children_seen_mapping_shared_memory_are_blamed_for_its_rise_too() -> None:
    s = recorded_summary(lambda: shm_job(KEPT, mapped=8.0, kind="fork"))
    assert s.verdict == "growing" and s.causes == ["shared-grows"]


@pytest.mark.parametrize(
    "levels, mapped, kind",
    [(IN_FLIGHT, 8.0, "dataloader"), (KEPT, 0.0, "fork"), (STEP, 8.0, "dataloader")],
    ids=[
        "batches in flight: a constant level",
        "no DataLoader workers, no shared memory: another program's",
        "a step, not a ramp: another program's",
    ],
)
def test_shared_memory_in_flight_or_not_the_job_s_is_not_growth(
    levels: list[float], mapped: float, kind: str
) -> None:
    s = recorded_summary(lambda: shm_job(levels, mapped, kind))
    assert s.verdict == "flat" and s.causes == [] and "/dev/shm" not in s.culprit


def test_a_spawned_worker_that_grows_after_its_start_up_allocates_its_own() -> None:
    s = recorded_summary(lambda: spawn_job(260.0))
    assert s.verdict == "growing" and s.causes == ["workers-allocate"]


@pytest.mark.parametrize("cause", list(JOBS))
def test_record_s_terminal_says_what_to_do_about_the_cause_with_each_change_and_cost(cause: str) -> None:
    text = terminal(recorded_summary(JOBS[cause][0]))
    a = cures.ADVICE[cause]
    after = text[text.index("what to do: ") :]
    assert after.startswith(f"what to do: {a.title}\n")
    assert [t for t in cures.CAUSES if f"what to do: {cures.ADVICE[t].title}\n" in text] == [cause]
    for c in a.cures:
        assert f"     change: {c.change}\n" in after  # the one-line change, whole, never wrapped
        assert f"{c.name}:" in after and "cost: " in after
    assert "pytest guard for the fix" in after
    if cause in cures.LOOP_CAUSES:  # the training loop's own: a short run of the user's command
        assert '        result = memprobe.record(["python", "train.py", "--max-steps", "300"])' in after
    else:
        assert '        result = memprobe.profile("your_package.data:build_dataset", mode=' in after


def test_the_guard_for_a_recorded_job_profiles_its_start_method_and_workers() -> None:
    text = terminal(recorded_summary(lambda: spawn_job(156.0)))
    assert 'memprobe.profile("your_package.data:build_dataset", mode="spawn", workers=1)' in text
    # Below what each worker started with here (150 MB): the copy the fix removes.
    assert "assert result.summary.worker_uss_start_mb < 150" in text
    assert "result.assert_flat()" in terminal(recorded_summary(copy_job))


def test_the_copy_on_access_advice_names_the_fixes_the_issue_asks_for() -> None:
    text = terminal(recorded_summary(copy_job))
    assert "change: self.records = memprobe.SharedList(self.records)" in text
    assert "change: import gc; gc.freeze()  # the line before DataLoader(...)" in text
    assert "change: loader = memprobe.ThreadDataLoader(dataset" in text
    assert "pyarrow.Table.from_pylist" in text


def test_the_other_causes_name_where_to_look_and_what_to_change() -> None:
    allocating = terminal(recorded_summary(allocating_job))
    assert "next: find what allocates: memray run --follow-fork -o job.bin train.py" in allocating
    main = terminal(recorded_summary(main_job))
    assert "change: total_loss += loss.item()  # not += loss" in main
    startup = " ".join(terminal(recorded_summary(lambda: spawn_job(156.0))).split())
    assert "set_forkserver_preload" in startup and 'mmap_mode="r"' in startup
    shared = " ".join(terminal(recorded_summary(lambda: shm_job(KEPT))).split())
    assert "what to do: shared memory growing" in shared and "total_loss += loss.item()" in shared
    assert "gc.get_objects()" in shared and "memprobe.record([" in shared


@pytest.mark.parametrize("cause", list(JOBS))
def test_the_record_page_says_what_to_do_about_the_cause(tmp_path: Path, cause: str) -> None:
    meta, samples, *system = JOBS[cause][0]()
    root = write_results(tmp_path / cause, meta, samples, system=system[0] if system else None)
    html = folder_page(root).read_text(encoding="utf-8")
    section = advice_section(html)
    assert re.findall(r'<div class="cure" data-cause="([^"]+)">', section) == [cause]
    assert '<a href="#advice">What to do</a>' in html
    assert html.index('id="culprit"') < html.index('id="advice"') < html.index('id="timeline"')
    a = cures.ADVICE[cause]
    changes = [unescape(c) for c in re.findall(r'<pre class="change">(.*?)</pre>', section, re.S)]
    assert changes == [c.change for c in a.cures]
    text = " ".join(page_text(section).split())
    for c in a.cures:
        assert " ".join(f"Cost: {c.cost}.".split()) in text
    guards = re.findall(r'<pre class="guard">(.*?)</pre>', section, re.S)
    assert len(guards) == 1
    for raw in re.findall(r'<pre class="(?:change|guard)">(.*?)</pre>', section, re.S):  # escaped as any text
        assert escape(unescape(raw)).replace("&quot;", "&#34;").replace("&#x27;", "&#39;") == raw


def test_a_flat_job_without_a_start_up_copy_has_nothing_to_do(tmp_path: Path) -> None:
    meta, samples = fork_job(worker_growth=6.0)
    s = summarize(meta, samples, pd.DataFrame(), pd.DataFrame())
    assert s.verdict == "flat" and s.causes == []
    assert "what to do" not in terminal(s)
    html = folder_page(write_results(tmp_path / "flat", meta, samples)).read_text(encoding="utf-8")
    assert 'id="advice"' not in html and 'href="#advice"' not in html


# -- the scenario report and `memprobe run` -------------------------------------------------------


def scenario_folder(root: Path, runs: list[tuple[str, str, float, float]], factory: dict) -> Path:
    """A scenario's results folder: per run (id, mode, each worker's USS at warm, at done), two
    workers read exactly at warm (1 s), 3 s and done (5 s), a main process that holds still."""
    root.mkdir(parents=True)
    write_json_atomic(
        root / "manifest.json",
        {
            "schema_version": SCHEMA_VERSION,
            "scenario": "look",
            "kind": "run",
            "status": "complete",
            "started": 1.0,
            "finished": 9.0,
            "runs": [r[0] for r in runs],
            "environment": {},
        },
    )
    for index, (run_id, mode, start, end) in enumerate(runs):
        rows = []
        for t, frac in ((0.2, None), (1.0, 0.0), (3.0, 0.5), (5.0, 1.0)):
            base = {"t": t, "tier": "pss", "missing": False, "reason": None, "cpu_s": t, "minflt": 0}
            rows.append(
                base
                | {"pid": 1, "role": "main", "worker": -1, "rss_mb": 400.0, "pss_mb": 300.0}
                | {"uss_mb": 200.0, "private_dirty_mb": 200.0}
            )
            for w in (0, 1) if frac is not None else ():
                uss = start + (end - start) * frac
                rows.append(
                    base
                    | {"pid": 10 + w, "role": f"worker {w}", "worker": w, "rss_mb": 300.0 + uss}
                    | {"pss_mb": 100.0 + uss, "uss_mb": uss, "private_dirty_mb": uss}
                )
        writer = RunWriter(root / "runs" / run_id)
        writer.append("samples", rows)
        spec = {"backend": "list", "mode": mode, "workers": 2, "workload": "factory", "factory": factory}
        writer.write_meta(
            {
                "run_id": run_id,
                "index": index,
                "status": "ok",
                "items": 1000,
                "elapsed_s": 6.0,
                "milestones": {"iter_start": 0.5, "first_batch": 0.9, "warm": 1.0, "done": 5.0},
                "spec": spec | {"verdict": {"growth_threshold_mb": 50.0}},
            }
        )
        writer.close()
    consolidate(root)
    return root


RUNS = [
    ("list-fork-w2", "fork", 20.0, 150.0),  # grows +130 MB
    ("list-spawn-w2", "spawn", 300.0, 301.0),  # flat, but each worker starts with 300 MB
    ("list-thread-w2", "thread", 0.0, 0.0),  # flat: nothing to do
]
FACTORY = {"name": "build", "factory": "mypkg.data:build", "kwargs": {"split": "<train>"}}


def test_the_scenario_report_says_what_to_do_per_cause_for_the_runs_that_have_it(tmp_path: Path) -> None:
    html = folder_page(scenario_folder(tmp_path / "s", RUNS, FACTORY)).read_text(encoding="utf-8")
    section = advice_section(html)
    groups = re.findall(r'<div class="cause-group">(.*?)(?=<div class="cause-group">|$)', section, re.S)
    assert len(groups) == 2
    fork, spawn = groups
    assert re.findall(r'data-cause="([^"]+)"', fork) == ["copy-on-access", "workers-allocate"]
    assert "list × fork (2 workers)</a>: how to stop the growth" in fork
    assert "memprobe run does not tell what fork workers copied from what they allocated" in fork
    assert re.findall(r'data-cause="([^"]+)"', spawn) == ["startup-copy"]
    assert "list × spawn (2 workers)</a>: flat, but each worker starts with its own copy" in spawn
    assert "list × thread" not in "".join(groups)  # flat, no start-up copy: nothing to do
    # The guard profiles the run's own factory with its arguments, escaped on the page.
    (guard,) = re.findall(r'<pre class="guard">(.*?)</pre>', fork, re.S)
    assert unescape(guard).splitlines()[1] == (
        "    result = memprobe.profile(\"mypkg.data:build\", kwargs={'split': '<train>'}, mode=\"fork\", workers=2)"
    )
    assert "<train>" not in section and "&lt;train&gt;" in section
    (spawn_guard,) = re.findall(r'<pre class="guard">(.*?)</pre>', spawn, re.S)
    assert "assert result.summary.worker_uss_start_mb &lt; 300" in spawn_guard
    # The fixes other runs of the folder demonstrate are still shown first.
    assert section.index('<div class="advice">') < section.index('<div class="cause-group">')


def test_memprobe_run_prints_what_to_do_once_per_cause_and_job(tmp_path: Path, capsys) -> None:
    from memprobe.analysis.runs import summarize_all
    from memprobe.cli.run import print_advice
    from memprobe.results.folder import ResultSet

    summaries = summarize_all(ResultSet.load(scenario_folder(tmp_path / "s", RUNS, FACTORY)))
    spec = SimpleNamespace(factory="mypkg.data:build", kwargs={"split": "train"})
    print_advice(summaries, [SimpleNamespace(run_id=s.run_id, factory=spec) for s in summaries])
    out = capsys.readouterr().out
    assert out.count("what to do: copy-on-access of Python objects") == 1
    assert out.count("what to do: workers allocating memory of their own") == 1
    assert out.count("what to do: spawn/forkserver start-up copies") == 1
    assert "\nlist-fork-w2 (growing):\n" in out and "\nlist-spawn-w2 (flat):\n" in out
    assert "list-thread-w2" not in out
    assert (
        out.index("list-fork-w2 (growing)") < out.index("copy-on-access") < out.index("list-spawn-w2 (flat)")
    )
    assert (
        "memprobe.profile(\"mypkg.data:build\", kwargs={'split': 'train'}, mode=\"spawn\", workers=2)" in out
    )


# -- the pytest failure message ---------------------------------------------------------------------


def profile_result(mode: str, growth: float) -> ProfileResult:
    from memprobe.core.summary import RunSummary

    values = dict.fromkeys(RunSummary.__dataclass_fields__)
    values |= {
        "run_id": f"build-{mode}-w2",
        "backend": "build",
        "mode": mode,
        "workers": 2,
        "status": "ok",
        "items": 20_000,
        "duration_s": 5.0,
        "growth_threshold_mb": 50.0,
        "verdict": "growing",
        "explanation": "",
    }
    w = WorkerGrowth(pid=7, role="worker 0", uss_start_mb=9.0, uss_end_mb=9.0 + growth, growth_mb=growth)
    workers, main = ((w,), None) if mode != "thread" else ((), w)
    return ProfileResult(summary=RunSummary(**values), workers=workers, main=main, results_dir=Path("/r/x"))


def test_the_pytest_message_of_a_growing_fork_run_says_what_to_do_about_both_causes() -> None:
    with pytest.raises(AssertionError) as info:
        profile_result("fork", 120.0).assert_flat()
    text = str(info.value)
    assert "what to do: copy-on-access of Python objects" in text
    assert "what to do: workers allocating memory of their own" in text
    assert "memprobe run does not tell what fork workers copied" in text
    assert "change: self.records = memprobe.SharedList(self.records)" in text
    assert "memprobe.profile(..., gc_freeze=True) does it" in text
    assert "pytest guard" not in text  # the failing test is the guard
    assert text.splitlines()[-1] == "results: /r/x"


def test_the_pytest_message_of_a_growing_thread_run_names_the_dataset_s_own_memory() -> None:
    with pytest.raises(AssertionError) as info:
        profile_result("thread", 120.0).assert_flat()
    text = str(info.value)
    assert "what to do: workers allocating memory of their own" in text
    assert "copy-on-access" not in text and "does not tell" not in text


# -- the words themselves --------------------------------------------------------------------------


def sections(markdown: str) -> dict[str, str]:
    """Each heading of a markdown file -> its text up to the next heading of its level or above."""
    heads = list(re.finditer(r"^(#+) (.*)$", markdown, re.M))
    out = {}
    for i, h in enumerate(heads):
        end = next((n.start() for n in heads[i + 1 :] if len(n.group(1)) <= len(h.group(1))), len(markdown))
        out[h.group(2).strip()] = markdown[h.end() : end]
    return out


def test_every_figure_a_cost_cites_is_in_the_section_of_performance_md_it_names() -> None:
    perf = sections((ROOT / "docs" / "performance.md").read_text(encoding="utf-8"))
    cited = 0
    for a in cures.ADVICE.values():
        for c in a.cures:
            if "docs/performance.md" not in c.cost:
                assert "measure" in c.cost, c.cost  # no figure without its measurement
                continue
            named = re.findall(r'"([^"]+)"', c.cost)
            bodies = []
            for name in named:
                (heading,) = [h for h in perf if h.startswith(name)]
                bodies.append(perf[heading])
            cited += len(named)
            figures = re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", re.sub(r'"[^"]+"', "", c.cost))
            for figure in figures:
                assert any(figure in body for body in bodies), (figure, c.name, named)
    assert cited >= 5


def test_runs_sharing_their_causes_are_told_once_with_a_guard_per_mode(tmp_path: Path, capsys) -> None:
    from memprobe.analysis.runs import summarize_all
    from memprobe.cli.run import print_advice
    from memprobe.results.folder import ResultSet

    runs = [
        ("list-spawn-w2", "spawn", 300.0, 301.0),
        ("other-spawn-w2", "spawn", 200.0, 200.0),
        ("list-forkserver-w2", "forkserver", 280.0, 280.0),
    ]
    summaries = summarize_all(ResultSet.load(scenario_folder(tmp_path / "s", runs, FACTORY)))
    (group,) = cures.by_causes(summaries)
    assert [s.run_id for s in group.runs] == [r[0] for r in runs]
    assert len(group.guards) == 2  # one per mode: the first spawn run's, the forkserver run's
    assert 'mode="spawn"' in group.guards[0] and "worker_uss_start_mb < 300" in group.guards[0]
    assert 'mode="forkserver"' in group.guards[1] and "worker_uss_start_mb < 280" in group.guards[1]
    spec = SimpleNamespace(factory="mypkg.data:build", kwargs={})
    print_advice(summaries, [SimpleNamespace(run_id=s.run_id, factory=spec) for s in summaries])
    out = capsys.readouterr().out
    assert out.startswith("\nlist-spawn-w2 (flat), other-spawn-w2 (flat), list-forkserver-w2 (flat):\n")
    assert out.count("what to do: spawn/forkserver start-up copies") == 1
    assert out.count("pytest guard for the fix") == 2


def test_the_copy_on_access_advice_points_to_memprobe_cure() -> None:
    """The next command after a copy-on-access verdict: cure, which measured the fix (before:
    never named)."""
    text = " ".join(terminal(recorded_summary(copy_job)).split())
    assert (
        "next: measure these fixes on your own dataset, side by side: memprobe cure your_package.data:build_dataset"
        in text
    )
    job = cures.Job(factory="mypkg.data:Captions")
    said = " ".join(" ".join(cures.text_lines([cures.COPY_ON_ACCESS], job)).split())
    assert "memprobe cure mypkg.data:Captions" in said


def test_the_guard_for_a_copy_named_below_the_threshold_holds_the_copy_to_half_of_it() -> None:
    """The default threshold would pass the copy a short trial found (+40 MB each, 50 MB): the
    guard's limit is half of what was measured."""
    meta, samples = fork_job(worker_growth=40.0)
    progress = pd.DataFrame({"t": [5.0, 10.0, 20.0], "items": [0, 10_000, 30_000]})
    s = summarize(meta, samples, progress, pd.DataFrame())
    assert s.verdict == "flat" and s.causes == ["copy-on-access"]
    assert (
        "result.assert_flat(max_worker_growth_mb=20)  # each worker grew ~40 MB here, below the 50 MB threshold"
        in terminal(s)
    )
