"""`memprobe export`: a results folder as a Chrome/Perfetto trace (checked against the Trace Event
Format's documented fields), TensorBoard scalars (read back with tensorboard's EventAccumulator)
and OpenMetrics text (read back with prometheus_client's two parsers); the figures are the
analysis'; bad input is refused in one line with exit 2."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from suite_extras import needs
from trace_format import check_trace_fields
from treejobs import fork_job, write_results

from memprobe.analysis.runs import analyse_all
from memprobe.cli import main
from memprobe.export.openmetrics import openmetrics
from memprobe.export.source import runs_of
from memprobe.export.trace import dumps, trace
from memprobe.results.folder import ResultSet

REPO = Path(__file__).resolve().parents[2]
STARTED = 1_795_000_000.25  # the run's clock started then (Unix time)
# A worker's command line as the folder holds it: a quote, an escape sequence, a newline, and a
# byte that was not UTF-8 (written to the folder as the text \xff).
COMMAND = 'python -c "print(1)" \x1b[2J\nforged line \udcff'


@pytest.fixture
def fork_root(tmp_path: Path) -> Path:
    meta, samples = fork_job()
    meta["started"] = STARTED
    meta["processes"][1]["command"] = COMMAND
    return write_results(tmp_path / "fork", meta, samples)


def runs(root: Path):
    results = ResultSet.load(root)
    return runs_of(results, analyse_all(results)), results


def export(root: Path, fmt: str, *extra: str) -> int:
    return main(["export", str(root), "--format", fmt, *extra])


def test_the_trace_has_a_counter_track_per_process_and_the_roles_as_names(fork_root: Path, capsys) -> None:
    assert export(fork_root, "chrome-trace") == 0
    assert capsys.readouterr().out.strip() == f"chrome-trace: {fork_root / 'trace.json'}"
    text = (fork_root / "trace.json").read_text(encoding="ascii")  # JSON's escapes: ASCII only
    doc = json.loads(text)
    check_trace_fields(doc)
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {1: "main", 11: "worker 0", 12: "worker 1"}
    uss = [
        (e["ts"], e["args"]["MB"]) for e in events if e["ph"] == "C" and e["name"] == "USS" and e["pid"] == 11
    ]
    base_us = doc["baseTimeNanoseconds"] / 1000
    # Unix time in microseconds, as torch.profiler's traces give it: base + ts.
    assert [(round(base_us + ts), mb) for ts, mb in uss] == [
        (round((STARTED + t) * 1e6), mb) for t, mb in [(5.2, 1.0), (10.0, 100.0), (20.0, 200.0), (21.0, 0.0)]
    ]
    rss = [e["args"]["MB"] for e in events if e["ph"] == "C" and e["name"] == "RSS" and e["pid"] == 11]
    assert rss == [300.0, 300.0, 310.0, 320.0, 0.0]  # every tick, the cheap one too; 0 once it ended
    total = [e["args"]["MB"] for e in events if e["name"] == "total PSS (job)"]
    summary = json.loads(json.dumps(runs(fork_root)[0][0].summary.to_dict()))
    assert max(total) == pytest.approx(summary["total_pss_peak_mb"])


def test_milestones_and_oom_kills_are_global_instant_events(fork_root: Path) -> None:
    (run,), results = runs(fork_root)
    killed = {"oom_killed": [{"t": 12.5, "victims": ["worker 0 (pid 11)"]}], "machine_oom_killed": []}
    run = replace(run, summary=replace(run.summary, memory_limit=killed))
    events = trace([run], results.manifest)["traceEvents"]
    instants = [(e["name"], e["ts"], e["cat"], e["s"]) for e in events if e["ph"] == "i"]
    offset = (STARTED - math.floor(STARTED)) * 1e6
    assert instants == [
        ("workers started (generation 0, 2 workers)", 5.0e6 + offset, "memprobe.milestone", "g"),
        ("warm (first exact reading of a worker)", 5.5e6 + offset, "memprobe.milestone", "g"),
        ("done", 20.0e6 + offset, "memprobe.milestone", "g"),
        ("OOM kill (cgroup): worker 0 (pid 11)", 12.5e6 + offset, "memprobe.oom", "g"),
    ]


def test_a_scenario_runs_events_are_its_milestones(tmp_path: Path) -> None:
    root = tmp_path / "scenario"
    shutil.copytree(REPO / "tests/data/results-v1/scenario", root)
    assert export(root, "chrome-trace") == 0
    doc = json.loads((root / "trace.json").read_text())
    check_trace_fields(doc)
    said = [e["name"] for e in doc["traceEvents"] if e["ph"] == "i"]
    assert {"started", "dataset_built", "warm", "done", "finished"} <= set(said)
    assert "progress" not in said
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"} >= {
        "main",
        "worker 0",
    }
    assert export(root, "openmetrics") == 0  # schema version 1: no kind in its manifest
    assert 'memprobe_run_info{run="list-fork-w2",kind="scenario",' in (root / "metrics.prom").read_text()


def test_strings_from_the_folder_are_escaped_in_each_format(fork_root: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as prom

    (run,), results = runs(fork_root)
    odd = 'tr"ain\\ \n{x="1"} 2'
    text = dumps(trace([run], results.manifest))
    assert "\x1b" not in text and "\\u001b[2J\\nforged line \\\\xff" in text  # JSON's escapes
    labels = [e["args"]["labels"] for e in json.loads(text)["traceEvents"] if e["name"] == "process_labels"]
    assert labels == [COMMAND.replace("\udcff", "\\xff")]  # JSON gives back what the folder holds
    text = openmetrics([replace(run, run_id=odd)], {**results.manifest, "scenario": "a\nb"})
    for parse in (prom, om):
        info = next(f for f in parse(text) if f.name == "memprobe_run_info")
        assert [(s.labels["run"], s.labels["name"]) for s in info.samples] == [(odd, "a\nb")]


def test_openmetrics_holds_the_summarys_figures_and_leaves_out_what_it_has_not(fork_root: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as prom

    assert export(fork_root, "openmetrics") == 0
    text = (fork_root / "metrics.prom").read_text()
    s = runs(fork_root)[0][0].summary
    for parse in (prom, om):
        families = {f.name: f for f in parse(text)}
        value = {name: f.samples[0].value for name, f in families.items() if f.samples}
        assert value["memprobe_total_pss_peak_bytes"] == pytest.approx(s.total_pss_peak_mb * 2**20)
        assert value["memprobe_worker_uss_growth_bytes"] == pytest.approx(s.worker_uss_growth_mb * 2**20)
        verdicts = {x.labels["verdict"]: x.value for x in families["memprobe_verdict"].samples}
        assert verdicts == {"flat": 0, "growing": 1, "none": 0} and s.verdict == "growing"
        assert "memprobe_items_per_second" not in families  # no item counted: left out, not 0
    assert families["memprobe_total_pss_peak_bytes"].unit == "bytes"  # the OpenMetrics parser's


@needs("tensorboard")
def test_tensorboard_scalars_read_back_by_tensorboards_reader(fork_root: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert export(fork_root, "tensorboard") == 0
    acc = EventAccumulator(str(fork_root / "tensorboard" / "train"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"uss_mb/worker 0", "pss_mb/main", "rss_mb/worker 1", "total_pss_mb"} <= tags
    uss = acc.Scalars("uss_mb/worker 0")
    assert [(e.step, e.value) for e in uss] == [(5200, 1.0), (10000, 100.0), (20000, 200.0)]
    assert [e.wall_time for e in uss] == pytest.approx([STARTED + t for t in (5.2, 10.0, 20.0)])
    s = runs(fork_root)[0][0].summary
    assert max(e.value for e in acc.Scalars("total_pss_mb")) == pytest.approx(s.total_pss_peak_mb)


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--format", "svg"],
            "--format svg: not a format memprobe writes; allowed: chrome-trace, tensorboard, openmetrics",
        ),
        ([], "--format is needed; allowed: chrome-trace, tensorboard, openmetrics"),
        (["--format", "chrome-trace", "-o", "{missing}/trace.json"], "no such folder"),
        (["--format", "chrome-trace", "-o", "{root}/manifest.json"], "a file of the results folder"),
        (["--format", "openmetrics", "-o", "{root}/runs/train/m.prom"], "a file of the results folder"),
        (["--format", "chrome-trace", "-o", "{root}"], "the results folder itself"),
        (["--format", "chrome-trace", "-o", "{tmp}"], "is a folder"),
        (["--format", "tensorboard", "-o", "{root}/runs"], "a file of the results folder"),
        (["--format", "tensorboard", "-o", "{full}"], "a folder that is not empty"),
    ],
)
def test_bad_input_is_refused_in_one_line_with_exit_2(
    fork_root: Path, tmp_path: Path, capsys, args: list[str], said: str
) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "events.out.tfevents.old").write_text("x")
    manifest = (fork_root / "manifest.json").read_bytes()
    args = [a.format(root=fork_root, missing=tmp_path / "nowhere", tmp=tmp_path, full=full) for a in args]
    assert main(["export", str(fork_root), *args]) == 2
    assert said in _one_error(capsys)
    assert (fork_root / "manifest.json").read_bytes() == manifest
    assert not (tmp_path / "nowhere").exists()


def test_a_folder_that_is_not_a_results_folder_is_refused(tmp_path: Path, capsys) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert export(plain, "chrome-trace") == 2
    assert "not a memprobe results folder (no manifest.json)" in _one_error(capsys)
    assert export(tmp_path / "nowhere", "chrome-trace") == 2
    assert "no such results folder" in _one_error(capsys)


def _job(root: Path, env: tuple[str, str] = ("81234", "81234")) -> Path:
    """Two nodes' folders of one job (SLURM job ``env``), node 1 on host ``gpu"07`` whose
    worker grew more."""
    for rank, (host, growth, job_id) in enumerate((("gpu-01", 200.0, env[0]), ('gpu"07', 300.0, env[1]))):
        meta, samples = fork_job(worker_growth=growth)
        meta["node"] = {"host": host, "node_rank": rank, "nodes": 2, "env": {"SLURM_JOB_ID": job_id}}
        write_results(root / f"node{rank}", meta, samples)
    return root


@needs("tensorboard")
def test_a_jobs_nodes_are_exported_labelled_by_node_and_a_trace_takes_one_node(
    tmp_path: Path, capsys
) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job = _job(tmp_path / "job")
    assert export(job, "openmetrics") == 0
    families = {f.name: f for f in om((job / "metrics.prom").read_text())}
    growth = {s.labels["node"]: s.value for s in families["memprobe_worker_uss_growth_bytes"].samples}
    assert growth == {"node 0 (gpu-01)": 200 * 2**20, 'node 1 (gpu"07)': 300 * 2**20}
    assert export(job, "tensorboard") == 0
    acc = EventAccumulator(str(job / "tensorboard" / "node_1__gpu_07_" / "train"))
    acc.Reload()
    assert acc.Scalars("uss_mb/worker 0")[-1].value == 300.0
    capsys.readouterr()
    manifest = (job / "node1" / "manifest.json").read_bytes()
    assert export(job, "openmetrics", "-o", str(job / "node1" / "manifest.json")) == 2
    assert "a file of the results folder" in _one_error(capsys)
    assert (job / "node1" / "manifest.json").read_bytes() == manifest
    assert export(job, "chrome-trace") == 2
    err = _one_error(capsys)
    assert "holds 2 nodes' results folders; a trace takes one node's" in err
    assert f"memprobe export {job / 'node0'} --format chrome-trace" in err
    assert not (job / "trace.json").exists()


def test_folders_of_two_jobs_are_refused_naming_one_to_export(tmp_path: Path, capsys) -> None:
    two = _job(tmp_path / "two", env=("77", "88"))
    assert export(two, "openmetrics") == 2
    err = _one_error(capsys)
    assert "holds 2 results folders that are not the nodes of one job (they belong to different jobs" in err
    assert f"export each on its own: memprobe export {two / 'node0'} --format openmetrics" in err
    assert not (two / "metrics.prom").exists()


@needs("tensorboard")
def test_a_process_name_with_control_characters_is_a_printable_tensorboard_tag(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    meta, samples = fork_job()
    odd = "helper\x1b]0;HACKED\x07\n"
    meta["processes"][2]["role"] = odd
    samples.loc[samples["pid"] == 12, "role"] = odd
    root = write_results(tmp_path / "odd", meta, samples)
    assert export(root, "tensorboard") == 0
    acc = EventAccumulator(str(root / "tensorboard" / "train"))
    acc.Reload()
    assert "rss_mb/helper\\x1b]0;HACKED\\x07\\n" in acc.Tags()["scalars"]
    assert not any("\x1b" in tag or "\n" in tag for tag in acc.Tags()["scalars"])


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("writer", ["still running", "killed"])
def test_a_folder_still_recording_or_whose_memprobe_was_killed_is_read_and_left_as_it_was(
    tmp_path: Path, writer: str
) -> None:
    """Its rows still in JSON lines, its manifest ``running``: exported from what was saved,
    nothing in it moved, marked or gathered (``memprobe report`` would finish a killed one)."""
    import os

    from memprobe.probe.procfs import process_identity
    from memprobe.results.files import RunWriter, write_json_atomic

    meta, samples = fork_job()
    root = tmp_path / "live"
    run = RunWriter(root / "runs" / "train")
    run.append("samples", json.loads(samples.to_json(orient="records")))
    run.write_meta({**meta, "status": "running"})
    run.close()
    identity = process_identity(os.getpid()) if writer == "still running" else {"pid": 1, "start_ticks": 0}
    write_json_atomic(
        root / "manifest.json",
        {
            "schema_version": 4,
            "kind": "record",
            "scenario": "record-train",
            "scenario_path": None,
            "description": "memprobe record: python train.py",
            "status": "running",
            "started": 1_795_000_000.0,
            "finished": None,
            "runs": ["train"],
            "environment": {"memprobe": "0.0", "python": "3.11", "mem_total_mb": 2048.0},
            "writer": identity,
        },
    )
    before = _files(root)
    out = tmp_path / "m.prom"
    assert export(root, "openmetrics", "-o", str(out)) == 0
    assert _files(root) == before
    status = "running" if writer == "still running" else "interrupted"
    assert f'status="{status}"' in out.read_text()
    assert "memprobe_total_pss_peak_bytes" in out.read_text()


def test_without_the_tensorboard_package_the_format_says_so_in_one_line(
    fork_root: Path, monkeypatch, capsys
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)  # not installed
    assert export(fork_root, "tensorboard") == 2
    assert "the tensorboard format needs the tensorboard package (pip install tensorboard)" in _one_error(
        capsys
    )
    assert not (fork_root / "tensorboard").exists()


def test_openmetrics_states_the_limit_the_time_to_it_and_the_oom_kills_where_the_analysis_has_them(
    fork_root: Path,
) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om

    (run,), results = runs(fork_root)
    limit = {"limit_mb": 4096.0, "minutes_to_limit": 12.5, "oom_kills": 1, "oom_killed": []}
    text = openmetrics([replace(run, summary=replace(run.summary, memory_limit=limit))], results.manifest)
    value = {f.name: (f.unit, f.samples[0].value) for f in om(text) if f.samples}
    assert value["memprobe_time_to_limit_seconds"] == ("seconds", 750.0)
    assert value["memprobe_memory_limit_bytes"] == ("bytes", 4096 * 2**20)
    assert value["memprobe_oom_kills"] == ("", 1.0)
    unknown = {**limit, "minutes_to_limit": None}  # the forecast has none: left out, not 0
    text = openmetrics([replace(run, summary=replace(run.summary, memory_limit=unknown))], results.manifest)
    assert "memprobe_time_to_limit_seconds" not in {f.name for f in om(text)}
