"""`memprobe run` end to end, in-process (memprobe.run.session.run_scenario): what the numbers say
about each dataset and start method, what every sample row looks like, who is who, and what
happens when a run fails, hangs or loses a process.

Measured on this 2-core machine (200k records, 2 workers, threshold 50 MB), 20+ runs each:
  list  x fork    worker USS growth 106.1-106.6 MB (start ~23 MB)  -> growing
  numpy x fork    worker USS growth  37.0-37.6 MB (the interpreter's one-off GC copy) -> flat
  arrow x fork    worker USS growth   2.0-2.3 MB                  -> flat
  list  x spawn   worker USS start 267 MB, growth 0.11-0.13 MB     -> flat
  list  x thread  main USS growth -3.6 to -4.0 MB                 -> flat
                  (once +55.6 MB: Private_Clean +59 MB while private dirty -3.5, RSS flat)
  ListDataset(200k records) itself: ~120 MB of USS.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import psutil
import pytest

from memprobe.core.tree_rules import BRIEF_COMMAND_S
from memprobe.core.vocabulary import COMMAND, OTHER
from memprobe.probe import procfs
from memprobe.results.folder import ResultSet
from memprobe.run.scenario import parse_scenario
from memprobe.run.session import Console, run_scenario

THRESHOLD_MB = 50.0
LIST_200K_MB = 120.0  # USS of a ListDataset of 200k records, measured in-process
HELPERS = {"resource tracker", "forkserver"}
PSS_FIELDS = ("pss_mb", "uss_mb", "pss_anon_mb", "shared_clean_mb", "private_dirty_mb")
CHEAP_FIELDS = ("rss_mb", "cpu_s", "minflt", "threads")


def s_milestones(shared, run_id: str) -> dict:
    return shared.meta(run_id)["milestones"]


def _workers(samples: pd.DataFrame) -> pd.DataFrame:
    return samples[samples["worker"] >= 0]


# -- the effect each dataset and start method has (shared small scenario) ----------------------


@pytest.mark.parametrize("run_id", ["numpy-fork-w2", "arrow-fork-w2"])
def test_numpy_and_arrow_under_fork_stay_flat(small_results, run_id: str) -> None:
    s = small_results.summaries[run_id]
    assert s.status == "ok"
    assert s.worker_uss_growth_mb is not None and s.worker_uss_growth_mb < THRESHOLD_MB
    assert s.worker_uss_growth_max_mb < THRESHOLD_MB
    assert s.verdict == "flat" and s.expectation_met is True


def test_list_under_fork_workers_end_with_a_private_copy(small_results) -> None:
    """Whenever the copy happened, each list worker ends holding most of the list privately,
    unlike the numpy and arrow workers (measured: 129 MB vs 45 MB and 12 MB)."""
    end = {}
    for run_id in ("list-fork-w2", "numpy-fork-w2", "arrow-fork-w2"):
        w = _workers(small_results.samples(run_id))
        w = w[w["tier"] == "pss"].sort_values("t")
        end[run_id] = w.groupby("pid")["uss_mb"].last()
        assert len(end[run_id]) == 2
    assert end["list-fork-w2"].min() > 0.6 * LIST_200K_MB
    # What a list worker copies depends on the interpreter's heap, which the installed packages
    # shape: 129.6 MB with the test extras alone, 93.4 MB once the trainers extra was installed
    # too (`import torch` then imports tqdm: 9 modules more), the numpy worker 45.5 MB in both
    # (same code, 2026-11-29). Half the threshold above numpy's and Arrow's, in either.
    assert end["list-fork-w2"].min() > end["numpy-fork-w2"].max() + THRESHOLD_MB / 2
    assert end["list-fork-w2"].min() > end["arrow-fork-w2"].max() + THRESHOLD_MB / 2


def test_list_under_fork_grows(small_results) -> None:
    s = small_results.summaries["list-fork-w2"]
    assert s.status == "ok"
    # Measured 106 MB on 3.11 and 70 MB on 3.13: what a read copies is the pages of the objects it
    # writes to, and which objects share a page differs between versions (test_report_browser.py's
    # FORKING_JOB says how). Above the threshold by a margin on both, not by 30 MB on 3.13.
    assert s.worker_uss_growth_mb > THRESHOLD_MB + 10, s.explanation
    assert s.verdict == "growing" and s.expectation == "growing" and s.expectation_met is True
    assert s.worker_uss_start_mb < THRESHOLD_MB  # the window starts before the copy
    # The whole tree grows too: the copies are real memory, not a counting artefact.
    assert s.total_pss_end_mb - s.total_pss_start_mb > THRESHOLD_MB
    # Summing RSS counts shared pages once per process: it overstates the real total.
    assert s.sum_rss_peak_mb > s.total_pss_peak_mb + 100


def test_thread_mode_runs_in_one_process(small_results) -> None:
    samples = small_results.samples("list-thread-w2")
    assert "main" in set(samples["role"])
    assert _workers(samples).empty
    # Besides main and helpers, only a program run for a moment: PyPI's CUDA torch runs
    # `ldconfig -p` at import (3.13's venv: seen once, 0.1 s, before the tree named it: "other").
    for pid, rows in samples[~samples["role"].isin({"main"} | HELPERS)].groupby("pid"):
        assert set(rows["role"]) <= {COMMAND, OTHER}, (pid, set(rows["role"]))
        assert rows["t"].max() - rows["t"].min() < BRIEF_COMMAND_S, (pid, rows["t"].tolist())
    assert samples.loc[samples["role"] == "main", "pid"].nunique() == 1
    s = small_results.summaries["list-thread-w2"]
    assert s.worker_uss_growth_mb is None and s.worker_uss_start_mb is None
    assert s.main_uss_growth_mb is not None and s.verdict in ("flat", "growing")
    # One copy of the list, read in place: the process's own (dirty) memory stays flat
    # (measured -3.5 MB). Its USS is not asserted here: see test_analysis.py's xfail about
    # Private_Clean pages (USS +56 MB once, with private dirty -3.5 MB and RSS flat).
    # From the reading at warm to the one taken at done: a later one may fall while the run's
    # process frees the list (under load: 274 -> 159 MB once).
    ms = s_milestones(small_results, "list-thread-w2")
    pss = samples[(samples["tier"] == "pss") & (samples["role"] == "main") & (samples["t"] >= ms["warm"])]
    pss = pss.sort_values("t")
    at_done = pss.loc[pss["t"] >= ms["done"], "t"]
    if not at_done.empty:
        pss = pss[pss["t"] <= at_done.iloc[0]]
    dirty = pss["private_dirty_mb"]
    assert len(dirty) >= 2 and abs(dirty.iloc[-1] - dirty.iloc[0]) < 20
    # Several worker threads ran inside the main process.
    threads = small_results.results.run_table("threads", "list-thread-w2")
    assert not threads.empty and threads["tid"].nunique() >= 3


def test_spawn_workers_start_high_and_stay_flat(small_results) -> None:
    s = small_results.summaries["list-spawn-w2"]
    fork = small_results.summaries["arrow-fork-w2"]
    assert s.status == "ok"
    # Each spawn worker unpickles its own list (and imports torch): high from the start.
    assert s.worker_uss_start_mb > 0.5 * LIST_200K_MB  # measured 267 MB
    assert s.worker_uss_start_mb > 5 * fork.worker_uss_start_mb  # a fork worker starts at ~10 MB
    assert abs(s.worker_uss_growth_mb) < 10 and s.verdict == "flat"  # measured 0.1 MB


# -- every sample row --------------------------------------------------------------------------


def test_every_sample_row_is_consistent(small_results) -> None:
    df = pd.read_parquet(small_results.root / "samples.parquet")
    assert len(df) > 100
    present = df[~df["missing"]]
    pss = present[present["tier"] == "pss"]
    assert len(pss) > 20
    # PSS <= RSS (same smaps_rollup read) and USS <= PSS, up to float rounding.
    assert (pss["pss_mb"] <= pss["rss_mb"] + 0.01).all()
    assert (pss["uss_mb"] <= pss["pss_mb"] + 0.01).all()
    assert pss[list(PSS_FIELDS)].notna().all().all()
    cheap = present[present["tier"] == "cheap"]
    assert cheap[list(PSS_FIELDS)].isna().all().all()
    # A process that is there has memory: never a zero.
    assert (present["rss_mb"] > 0).all()
    assert present[list(CHEAP_FIELDS)].notna().all().all()


def test_missing_rows_have_no_values(small_results) -> None:
    df = pd.read_parquet(small_results.root / "samples.parquet")
    missing = df[df["missing"]]
    # Non-persistent workers exit at the end of each run while the sampler watches.
    assert len(missing) > 0
    assert missing[list(PSS_FIELDS + CHEAP_FIELDS)].isna().all().all()
    # The sampler's three reasons for a process that went away (exiting: seen in state X).
    assert missing["reason"].str.match(r"^(exited|zombie|exiting)").all()
    # One missing row per process, and nothing after it.
    assert not missing.duplicated(["run_id", "pid"]).any()
    last = df.sort_values("t").groupby(["run_id", "pid"]).tail(1)
    gone = set(zip(missing["run_id"], missing["pid"], strict=True))
    assert gone <= set(
        zip(last.loc[last["missing"], "run_id"], last.loc[last["missing"], "pid"], strict=True)
    )


# -- roles -------------------------------------------------------------------------------------


def _epoch_workers(results: ResultSet, run_id: str) -> list[int]:
    events = results.tables["events"]
    ev = events[(events["run_id"] == run_id) & (events["event"] == "epoch_start")]
    return list(ev.iloc[0]["workers"])


def _main_pid(results: ResultSet, run_id: str) -> int:
    events = results.tables["events"]
    return int(events[(events["run_id"] == run_id) & (events["event"] == "started")].iloc[0]["pid"])


@pytest.mark.parametrize("run_id", ["list-fork-w2", "numpy-fork-w2", "arrow-fork-w2", "list-spawn-w2"])
def test_roles_of_process_runs(small_results, run_id: str) -> None:
    samples = small_results.samples(run_id)
    results = small_results.results
    main = _main_pid(results, run_id)
    assert set(samples.loc[samples["pid"] == main, "role"]) == {"main"}
    assert set(samples.loc[samples["role"] == "main", "pid"]) == {main}
    workers = _epoch_workers(results, run_id)
    assert len(workers) == 2
    # From the warm point on (the loader has named its workers), every row is exact. Before it,
    # see test_worker_roles_before_the_loader_names_them.
    late = samples[samples["t"] >= small_results.meta(run_id)["milestones"]["warm"]]
    for index, pid in enumerate(workers):
        rows = late[late["pid"] == pid]
        assert len(rows) and set(rows["role"]) == {f"worker {index}"} and set(rows["worker"]) == {index}
    w = _workers(late)
    assert w["pid"].nunique() == 2 and set(w["worker"]) == {0, 1}
    assert set(late["role"]) <= {"main", "worker 0", "worker 1"} | HELPERS, set(late["role"])
    # A worker is never counted as main or a helper.
    assert not set(samples.loc[samples["role"].isin(HELPERS | {"main"}), "pid"]) & set(workers)


def test_spawn_runs_show_the_resource_tracker(small_results) -> None:
    samples = small_results.samples("list-spawn-w2")
    trackers = samples[samples["role"] == "resource tracker"]
    assert trackers["pid"].nunique() == 1
    assert trackers["worker"].eq(-1).all()


# -- faults: two sessions, several ways to fail ------------------------------------------------
#
# The forkserver runs wait most of their time (the hang's timeout, the forkserver's start-up), the
# others mostly compute: two sessions, each a module fixture of its own, so that pytest-xdist can
# run them on two workers side by side (one session took 113-179 s of one worker before). No test
# uses both fixtures: that would tie them into one group again (tests/conftest.py).

FAULT_SCENARIO = """\
name: faults
dataset: {records: 20000}
backends: [arrow]
modes: [fork, spawn, forkserver, thread]
workers: [2]
loader: {batch_size: 64, shuffle: false}
timeout_s: 60
"""
# Every run here but the hang ends by its fault (or, fork-ok, by its end) long before this: the
# timeout is a backstop only. It was 60 s, and forkserver-kill timed out at load 12-15 on the 2
# cores (dataset built at 24.7 s, no first batch by 60.6 s; four tests failed twice), a premise
# on the machine's load; a larger backstop costs nothing where the run ends by itself.
FAULT_TIMEOUT_S = 300
HANG_TIMEOUT_S = 40  # at least; more on a machine slower than this one (HangTimedToTheMachine)
HANG_MARGIN = 4  # the hang's timeout is at least this many times forkserver-kill's time to warm
# run_id -> (mode, fault, timeout_s, epochs), in the order each session runs them
FAULT_RUNS = {
    "fork-raise": ("fork", "raise@3000", FAULT_TIMEOUT_S, 1),
    "fork-kill": ("fork", "kill@3", FAULT_TIMEOUT_S, 1),
    "spawn-kill": ("spawn", "kill@3", FAULT_TIMEOUT_S, 1),
    "thread-raise": ("thread", "raise@3000", FAULT_TIMEOUT_S, 1),
    "fork-ok": ("fork", None, FAULT_TIMEOUT_S, 1),
}
KILL_MAIN = "forkserver-main-killed"
FORKSERVER_FAULT_RUNS = {
    "forkserver-kill": ("forkserver", "kill@3", FAULT_TIMEOUT_S, 1),
    # Long enough for the forkserver to start its workers and reach 'warm', so that the hang
    # comes while iterating: HANG_TIMEOUT_S, or HANG_MARGIN times the time forkserver-kill took
    # to reach warm just before, on this machine under its load (HangTimedToTheMachine). Seen:
    # warm at 7.7 s alone; at load 14 on the 2 cores not within 40 s ('dataset_built' at 16.8 s).
    "forkserver-hang": ("forkserver", "hang@3000", HANG_TIMEOUT_S, 1),
    KILL_MAIN: ("forkserver", None, FAULT_TIMEOUT_S, 20),  # the console SIGKILLs its main process
}


class KillMainProcess(Console):
    """SIGKILLs the run's own process (not a worker) once it iterates."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.killed: int | None = None

    def run_progress(self, state) -> None:
        if state.spec.run_id != KILL_MAIN or self.killed or "warm" not in state.milestones:
            return
        events = [
            json.loads(x) for x in (self.out / "runs" / KILL_MAIN / "events.jsonl").read_text().splitlines()
        ]
        self.killed = next(e["pid"] for e in events if e["event"] == "started")
        os.kill(self.killed, signal.SIGKILL)


class HangTimedToTheMachine(list):
    """The runs of a session, where the hang's timeout is set as the session reaches it (the
    session takes its runs one by one): HANG_TIMEOUT_S, or HANG_MARGIN times the time the run
    before it took to reach warm, whichever is longer. A fixed timeout had the premise that the
    machine starts a forkserver and its workers within it: on a slower or busier machine the run
    timed out while starting, and the test, which is about a hang while iterating, failed."""

    def __init__(self, specs: list, out: Path) -> None:
        super().__init__(specs)
        self.out = out
        self.hang_timeout_s = float(HANG_TIMEOUT_S)

    def __iter__(self):
        measured = None
        for spec in super().__iter__():
            if spec.fault and spec.fault.startswith("hang@") and measured is not None:
                self.hang_timeout_s = max(float(HANG_TIMEOUT_S), HANG_MARGIN * measured)
                spec = replace(spec, timeout_s=self.hang_timeout_s)
            yield spec
            meta = self.out / "runs" / spec.run_id / "meta.json"
            if meta.exists():  # the run has ended (the session asks for the next one after)
                measured = json.loads(meta.read_text()).get("milestones", {}).get("warm", measured)


def _fault_session(tmp_path_factory: pytest.TempPathFactory, name: str, fault_runs: dict) -> dict:
    out = tmp_path_factory.mktemp(name) / "results"
    scenario = parse_scenario(FAULT_SCENARIO, "faults.yaml")
    base = {r.mode: r for r in scenario.runs()}
    runs = HangTimedToTheMachine(
        [
            replace(
                base[mode],
                run_id=run_id,
                fault=fault,
                timeout_s=timeout,
                loader=replace(base[mode].loader, epochs=epochs),
            )
            for run_id, (mode, fault, timeout, epochs) in fault_runs.items()
        ],
        out,
    )
    console = KillMainProcess(out)
    t0 = time.time()
    result = run_scenario(scenario, out, runs=runs, render=False, console=console)
    return {
        "out": out,
        "runs": list(fault_runs),
        "result": result,
        "ended": time.time(),
        "started": t0,
        "console": console,
        "summaries": {s.run_id: s for s in result.summaries},
        "results": ResultSet.load(out),
        "hang_timeout_s": runs.hang_timeout_s,
    }


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory):
    """Five short runs in one session: fork, spawn and thread failing, then one that succeeds."""
    return _fault_session(tmp_path_factory, "faults", FAULT_RUNS)


@pytest.fixture(scope="module")
def forkserver_faults(tmp_path_factory: pytest.TempPathFactory):
    """Three forkserver runs in one session; the longest wait is the hang's HANG_TIMEOUT_S."""
    return _fault_session(tmp_path_factory, "forkserver-faults", FORKSERVER_FAULT_RUNS)


def _meta(faults, run_id: str) -> dict:
    return next(m for m in faults["results"].metas if m["run_id"] == run_id)


@pytest.mark.slow
@pytest.mark.parametrize("run_id", ["fork-raise", "thread-raise"])
def test_an_exception_in_a_worker_fails_the_run_with_its_type_and_message(faults, run_id: str) -> None:
    meta = _meta(faults, run_id)
    assert meta["status"] == "failed"
    assert meta["error"]["type"] == "ValueError"
    assert "injected fault at index 3000" in meta["error"]["message"]
    s = faults["summaries"][run_id]
    assert s.status == "failed" and s.error.startswith("ValueError") and "injected fault" in s.error
    # What was measured before the failure is kept.
    samples = faults["results"].run_table("samples", run_id)
    assert (samples["role"] == "main").any() and not samples.empty
    progress = faults["results"].run_table("progress", run_id)
    assert 0 < progress["items"].max() < 20000


def _killed_worker_keeps_its_samples(faults, run_id: str) -> None:
    meta = _meta(faults, run_id)
    assert meta["status"] == "failed" and meta["error"]["message"]
    assert faults["summaries"][run_id].status == "failed"
    victim = _epoch_workers(faults["results"], run_id)[0]
    # The killed worker's samples end with one 'missing' row, not a drop to zero.
    rows = faults["results"].run_table("samples", run_id)
    rows = rows[rows["pid"] == victim].sort_values("t")
    assert len(rows) >= 2 and rows.iloc[-1]["missing"] and rows["missing"].sum() == 1
    assert (rows.loc[~rows["missing"], "rss_mb"] > 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("run_id", ["fork-kill", "spawn-kill"])
def test_a_killed_worker_fails_the_run_and_keeps_its_samples(faults, run_id: str) -> None:
    _killed_worker_keeps_its_samples(faults, run_id)


@pytest.mark.slow
def test_a_killed_forkserver_worker_fails_the_run_and_keeps_its_samples(forkserver_faults) -> None:
    _killed_worker_keeps_its_samples(forkserver_faults, "forkserver-kill")


SIGNAL_WORDS = ("SIGKILL", "Killed", "signal 9")


def _killed_workers_unnamed(faults, run_ids: tuple[str, ...]) -> dict[str, tuple[int, str]]:
    """The runs whose error does not name the killed worker's pid and signal."""
    errors = {}
    for run_id in run_ids:
        victim = _epoch_workers(faults["results"], run_id)[0]
        message = _meta(faults, run_id)["error"]["message"]
        if str(victim) not in message or not any(w in message for w in SIGNAL_WORDS):
            errors[run_id] = (victim, message)
    return errors


@pytest.mark.slow
def test_a_killed_worker_error_names_its_pid_and_signal(faults) -> None:
    assert not _killed_workers_unnamed(faults, ("fork-kill", "spawn-kill"))


@pytest.mark.slow
def test_a_killed_forkserver_worker_error_names_its_pid_and_signal(forkserver_faults) -> None:
    assert not _killed_workers_unnamed(forkserver_faults, ("forkserver-kill",))


@pytest.mark.slow
def test_a_hang_times_out_and_keeps_its_samples(forkserver_faults) -> None:
    meta = _meta(forkserver_faults, "forkserver-hang")
    assert meta["status"] == "timeout"
    timeout = forkserver_faults["hang_timeout_s"]
    assert f"timeout_s={timeout:g}" in meta["error"]["message"]
    # Not before its timeout; after it by as long as ending the run's processes takes on this
    # machine, and a starved supervisor moves the deadline on by the time it lost (runner.PAUSED_S):
    # no upper bound that holds under any load (before: within 25 s of it).
    assert timeout - 0.5 < meta["elapsed_s"]
    assert "warm" in meta["milestones"]  # it hung while iterating, not while starting
    samples = forkserver_faults["results"].run_table("samples", "forkserver-hang")
    assert {"main", "forkserver"} <= set(samples["role"])
    assert forkserver_faults["summaries"]["forkserver-hang"].status == "timeout"


@pytest.mark.slow
def test_a_killed_run_process_fails_the_run(forkserver_faults) -> None:
    assert forkserver_faults["console"].killed, "the run never reached its warm point"
    meta = _meta(forkserver_faults, KILL_MAIN)
    assert meta["status"] == "failed"
    assert "SIGKILL" in meta["error"]["message"]
    assert meta["exit_code"] == -signal.SIGKILL


def _session_went_on_and_failed(faults) -> None:
    assert faults["result"].exit_code == 1
    assert not faults["result"].interrupted
    manifest = json.loads((faults["out"] / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert [r.run_id for r in faults["result"].summaries] == faults["runs"]


@pytest.mark.slow
def test_other_runs_continue_and_the_session_fails(faults) -> None:
    s = faults["summaries"]
    assert s["fork-ok"].status == "ok" and s["fork-ok"].items == 20000
    _session_went_on_and_failed(faults)


@pytest.mark.slow
def test_runs_after_a_hang_continue_and_the_session_fails(forkserver_faults) -> None:
    _session_went_on_and_failed(forkserver_faults)


@pytest.mark.slow
def test_forkserver_roles_once_iterating(forkserver_faults) -> None:
    faults = forkserver_faults
    servers = 0
    for run_id in ("forkserver-kill", "forkserver-hang", KILL_MAIN):
        samples = faults["results"].run_table("samples", run_id)
        workers = _epoch_workers(faults["results"], run_id)
        assert len(workers) == 2
        late = samples[samples["t"] >= _meta(faults, run_id)["milestones"]["warm"]]
        for index, pid in enumerate(workers):
            assert set(late.loc[late["pid"] == pid, "role"]) == {f"worker {index}"}
        assert set(samples.loc[samples["role"] == "main", "pid"]) == {_main_pid(faults["results"], run_id)}
        assert late.loc[late["role"] == "forkserver", "pid"].nunique() <= 1
        servers += late.loc[late["role"] == "forkserver", "pid"].nunique()
    # The server itself is sometimes 'other' for a whole run (1 run in ~8): sampled between
    # fork and exec, it kept its parent's cmdline and that role stuck (the roles.py caching bug,
    # see test_procfs.py). So: seen in most runs, not necessarily in each.
    assert servers >= 2


@pytest.mark.slow
def test_forkserver_workers_are_never_labelled_forkserver(forkserver_faults) -> None:
    samples = forkserver_faults["results"].run_table("samples", "forkserver-kill")
    workers = set(_epoch_workers(forkserver_faults["results"], "forkserver-kill"))
    mislabelled = samples[samples["pid"].isin(workers) & ~samples["role"].str.startswith("worker")]
    assert mislabelled.empty, mislabelled.groupby("pid")["role"].unique().to_dict()
    assert samples.loc[samples["role"] == "forkserver", "pid"].nunique() == 1


def _no_process_is_left(faults, min_pids: int) -> None:
    samples = faults["results"].tables["samples"]
    pids = set(samples["pid"].astype(int))
    assert len(pids) >= min_pids
    alive = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.create_time() < faults["ended"] and p.status() != psutil.STATUS_ZOMBIE:
                alive.append((pid, p.cmdline()))
        except psutil.NoSuchProcess:
            pass
    assert not alive
    for run_id in faults["runs"]:  # each run's process group is empty
        assert procfs.processes_in_group(_main_pid(faults["results"], run_id)) == []


@pytest.mark.slow
def test_no_process_of_any_fault_run_is_left(faults) -> None:
    _no_process_is_left(faults, min_pids=12)


@pytest.mark.slow
def test_no_process_of_any_forkserver_fault_run_is_left(forkserver_faults) -> None:
    _no_process_is_left(forkserver_faults, min_pids=8)


# -- timing figures ---------------------------------------------------------------------------


def test_summary_times_are_finite(small_results) -> None:
    for s in small_results.summaries.values():
        assert s.duration_s > 0 and math.isfinite(s.items_per_s)
        assert 0 < s.time_to_first_batch_s < s.duration_s
        assert s.sampler_cpu_share is not None and s.sampler_cpu_share < 0.1


# -- workers recreated every epoch (persistent_workers: false) ---------------------------------

GENERATIONS = """\
name: generations
dataset: {records: 150000}
backends: [list]
modes: [fork]
workers: [2]
loader: {batch_size: 256, epochs: 2, persistent_workers: false}
timeout_s: 120
"""


@pytest.mark.slow
def test_each_generation_of_workers_is_measured_from_its_start_to_its_end(tmp_path: Path) -> None:
    """torch starts new worker processes every epoch unless persistent_workers: each generation
    gets a PSS round once all its workers delivered a batch and one before it is shut down, so
    every worker's copy is measured whole, not from whatever budgeted rounds fell in its life.
    Measured (150k records, 2 cores): each of the 4 workers grew 48.9-49.3 MB."""
    scenario = parse_scenario(GENERATIONS, "generations.yaml")
    result = run_scenario(scenario, tmp_path / "results", render=False)
    (summary,) = result.summaries
    rs = ResultSet.load(tmp_path / "results")
    events = list(rs.tables["events"]["event"])
    assert events.count("epoch_end") == 1 and events.count("epoch_warm") == 1
    assert (
        events.index("warm") < events.index("epoch_end") < events.index("epoch_warm") < events.index("done")
    )

    from memprobe.analysis.scenario import per_process_growth
    from memprobe.core.summary import window_bounds

    samples = rs.run_table("samples", summary.run_id)
    start, end = window_bounds(samples, rs.metas[0]["milestones"])
    # Every later generation's warm is kept (its window starts there), not only the first.
    (epoch_warm,) = rs.metas[0]["epoch_warms"]
    assert epoch_warm == rs.metas[0]["milestones"]["epoch_warm"]
    growth = per_process_growth(samples, start, end, [epoch_warm])
    workers = growth[growth["worker"] >= 0]
    assert len(workers) == 4 and (workers["samples"] >= 2).all()
    # Every generation copied the list as it read it (a ListDataset of 150k records is ~90 MB;
    # each worker reads half of it per epoch).
    assert (workers["growth_mb"] > 30).all(), workers
    assert summary.worker_uss_growth_mb == pytest.approx(workers["growth_mb"].mean())
    # Per 1,000 items per worker: the 300k items were served by 4 worker processes, not 2.
    assert summary.growth_per_1k_items_per_worker_mb == pytest.approx(
        summary.worker_uss_growth_mb / (summary.items / 4 / 1000)
    )


# -- the run's process at its end ----------------------------------------------------------------

EXITS = """\
import atexit, os
from pathlib import Path

HERE = Path(os.environ["EXIT_TEST_DIR"])


class Teardown:
    \"\"\"Notes the interpreter's teardown, which frees module globals one by one.\"\"\"

    def __del__(self):
        (HERE / "torn-down").write_text("teardown")


KEEP = Teardown()


def dataset():
    atexit.register((HERE / "atexit-ran").write_text, "at exit")
    return list(range(2_000))
"""


def test_the_runs_process_ends_with_its_at_exit_handlers_and_without_the_interpreters_teardown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its last event the run's process joins its workers, runs the at-exit handlers (a
    dataset's own too) and exits without the teardown that frees every object and module one by
    one: 0.6-0.75 CPU-s with torch imported, seconds for a dataset of millions of objects."""
    import memprobe

    (tmp_path / "exit_datasets.py").write_text(EXITS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EXIT_TEST_DIR", str(tmp_path))
    result = memprobe.profile(
        "exit_datasets:dataset", mode="fork", workers=2, batch_size=64, out=tmp_path / "r"
    )
    result.assert_ok()
    assert result.summary.items == 2_000
    assert (tmp_path / "atexit-ran").read_text() == "at exit"
    assert not (tmp_path / "torn-down").exists()
    meta = json.loads((tmp_path / "r" / "runs" / result.summary.run_id / "meta.json").read_text())
    assert meta["exit_code"] == 0


def test_each_run_records_the_gil_state_its_own_process_saw(small_results) -> None:
    """On a free-threaded build an extension imported by the run's process (not by memprobe's
    supervisor) can turn the GIL back on: the state is read where the loader runs."""
    import sys

    here = getattr(sys, "_is_gil_enabled", lambda: True)()
    for run_id, summary in small_results.summaries.items():
        assert small_results.meta(run_id)["dataset_info"]["gil_enabled"] is here
        assert summary.gil_enabled is here
