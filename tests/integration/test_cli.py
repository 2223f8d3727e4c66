"""The `memprobe` command as a user runs it: help, bad input, a small run, re-rendering the
report, and Ctrl-C in the middle of a run (fork and forkserver).

Help, refusals and re-rendering run the command in-process (the ``cli`` fixture, tests/conftest.py);
a real process is started where the process is what is tested: the installed script, the imports
a refusal makes, a run with its progress and table, Ctrl-C and SIGTERM, a file-size limit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from memprobe.cli.run import QUICK_RECORDS
from memprobe.probe import procfs

REPO = Path(__file__).resolve().parents[2]


def memprobe(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memprobe", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


# -- help --------------------------------------------------------------------------------------


def test_help_shows_examples(cli) -> None:
    r = cli("--help")
    assert r.returncode == 0
    assert "examples:" in r.stdout and "memprobe run lists_vs_arrays" in r.stdout
    assert "memprobe scenarios copy" in r.stdout
    for command in ("run", "scenarios", "report"):
        assert command in r.stdout


def test_run_help_shows_examples_and_flags(cli) -> None:
    r = cli("run", "--help")
    assert r.returncode == 0
    assert "examples:" in r.stdout and "memprobe run lists_vs_arrays" in r.stdout
    assert "memprobe run my.yaml" in r.stdout
    for flag in ("--quick", "-o", "--no-report", "--strict", "--timeout"):
        assert flag in r.stdout


def test_no_command_prints_help_and_exits_2(cli) -> None:
    r = cli()
    assert r.returncode == 2 and "usage:" in r.stdout + r.stderr


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "memprobe"
    assert script.exists()
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "memprobe" in r.stdout


# -- bad input: exit code 2, a message naming file/key/value/allowed, no traceback -------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: x\nbakends: [list]\n", ["unknown key 'bakends'", "backends"]),
        ("dataset: {records: 10, recrods: 5}\n", ["dataset.recrods", "records, floats, seed"]),
        ("modes: [fork, vfork]\n", ["'modes'", "'vfork'", "forkserver"]),
        ("backends: [list, parquet]\n", ["'backends'", "'parquet'", "numpy"]),
        ("loader: {batch_size: big}\n", ["'loader.batch_size'", "'big'", "integer"]),
        ("expect: [{backend: list, verdict: up}]\n", ["'expect[0].verdict'", "'up'", "flat, growing"]),
        ("modes: [fork\n", ["not valid YAML", "line"]),
    ],
)
def test_bad_scenario_exits_2_with_a_clear_message(
    cli, tmp_path: Path, text: str, expected: list[str]
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = cli("run", f, "-o", tmp_path / "out")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("memprobe: error:")
    assert str(f) in r.stderr
    for word in expected:
        assert word in r.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


def test_missing_scenario_file_exits_2(cli, tmp_path: Path) -> None:
    r = cli("run", tmp_path / "nope.yaml")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(tmp_path / "nope.yaml") in r.stderr and "no such" in r.stderr


REFUSE_AND_LIST_IMPORTS = """
import sys
from memprobe.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("pandas", "pyarrow", "torch", "plotly") if m in sys.modules)
print(code, *heavy, file=sys.__stdout__)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["run", "{bad}", "-o", "{tmp}/out"],
        ["run", "{tmp}/nope.yaml"],
        ["run", "{repo}/scenarios/quick.yaml", "--timeout", "0"],
        ["record", "--interval", "0", "--", "true"],
        ["record", "--interval", "nan", "--", "true"],
        ["watch", "1", "--pss-budget", "2"],
        ["watch", "1", "--duration", "nan"],
        ["top", "1", "--pss-budget", "2"],
    ],
)
def test_bad_input_is_refused_before_the_heavy_imports(tmp_path: Path, args: list[str]) -> None:
    """A refusal takes a fraction of a second: pandas, pyarrow and torch are imported only once
    the arguments and the scenario are known to be good."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbakends: [list]\n")
    argv = [a.format(bad=bad, tmp=tmp_path, repo=REPO) for a in args]
    r = subprocess.run(
        [sys.executable, "-c", REFUSE_AND_LIST_IMPORTS, *argv], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2"], r.stdout  # exit code 2, and none of the heavy modules


def test_report_of_a_folder_that_is_not_results_exits_2(cli, tmp_path: Path) -> None:
    r = cli("report", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(tmp_path) in r.stderr


# -- a small run -------------------------------------------------------------------------------

SMALL = """\
name: cli-small
dataset: {records: 250000}
backends: [arrow]
modes: [fork, thread]
workers: [2]
expect:
  - {mode: fork, verdict: flat}
  - {mode: thread, verdict: growing}   # deliberately wrong: reported, not fatal without --strict
timeout_s: 120
"""


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory):
    """`memprobe run small.yaml --quick -o DIR --no-report` (~15 s on 2 idle cores)."""
    d = tmp_path_factory.mktemp("cli")
    scenario = d / "small.yaml"
    scenario.write_text(SMALL)
    out = d / "results"
    return memprobe("run", scenario, "--quick", "-o", out, "--no-report"), out


@pytest.mark.slow
def test_run_prints_a_summary_row_per_run_and_the_results_path(cli_run) -> None:
    r, out = cli_run
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = next(line for line in lines if line.startswith("run "))
    for column in ("status", "PSS start", "PSS peak", "sum RSS", "verdict"):
        assert column in header
    rows = {line.split()[0]: line for line in lines if line.startswith("arrow-")}
    assert set(rows) == {"arrow-fork-w2", "arrow-thread-w2"}
    assert all(" ok " in row and " MB" in row for row in rows.values())
    assert "flat met" in rows["arrow-fork-w2"] and "NOT MET" in rows["arrow-thread-w2"]
    assert f"results: {out}" in r.stdout
    # Progress on stderr, one line per run at least; the unmet expectation is named.
    assert "[1/2] arrow-fork-w2" in r.stderr and "[2/2] arrow-thread-w2" in r.stderr
    assert "expectation not met: arrow-thread-w2" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_quick_caps_the_dataset_and_no_report_skips_the_html(cli_run) -> None:
    _, out = cli_run
    summary = json.loads((out / "summary.json").read_text())
    assert [r["items"] for r in summary["runs"]] == [QUICK_RECORDS] * 2  # 250k capped by --quick
    assert not (out / "report.html").exists()
    assert (out / "samples.parquet").exists() and (out / "manifest.json").exists()


@pytest.mark.slow
def test_report_rerenders_from_saved_results(cli, cli_run) -> None:
    _, out = cli_run
    r = cli("report", out)
    assert r.returncode == 0, r.stderr
    assert "arrow-fork-w2" in r.stdout and "report:" in r.stdout
    html = out / "report.html"
    assert html.exists() and html.stat().st_size > 1000
    assert "arrow-fork-w2" in html.read_text(encoding="utf-8")


# -- Ctrl-C ------------------------------------------------------------------------------------

INTERRUPT = """\
name: ctrl-c
dataset: {{records: 40000}}
backends: [arrow]
modes: [{mode}]
workers: [0, 2]          # arrow-single-w0 completes, then arrow-{mode}-w2 is interrupted
loader: {{batch_size: 16, epochs: 3}}
timeout_s: 120
"""


def _events(run_dir: Path) -> list[dict]:
    try:
        text = (run_dir / "events.jsonl").read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def _alive(pid: int, before: float) -> bool:
    try:
        p = psutil.Process(pid)
        return p.create_time() <= before and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, sig, code",
    [
        ("fork", signal.SIGINT, 130),
        ("forkserver", signal.SIGINT, 130),
        # A cancelled CI job or `kill`: the run's group is its own, so memprobe must end it itself.
        ("forkserver", signal.SIGTERM, 143),
    ],
)
def test_ctrl_c_saves_what_was_measured_and_leaves_no_process(
    tmp_path: Path, mode: str, sig: int, code: int
) -> None:
    scenario = tmp_path / "ctrl-c.yaml"
    scenario.write_text(INTERRUPT.format(mode=mode))
    out = tmp_path / "results"
    victim = f"arrow-{mode}-w2"
    render = sig == signal.SIGTERM  # one case renders the report, to see it marked interrupted
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memprobe",
            "run",
            str(scenario),
            "-o",
            str(out),
            *([] if render else ["--no-report"]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not any(e["event"] == "first_batch" for e in _events(out / "runs" / victim)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the second run never started iterating"
            time.sleep(0.02)
        time.sleep(0.2)
        os.kill(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    ended = time.time()

    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    if render:
        html = (out / "report.html").read_text(encoding="utf-8")
        assert "interrupted" in html.lower() and victim in html
    summary = {r["run_id"]: r for r in json.loads((out / "summary.json").read_text())["runs"]}
    done = summary["arrow-single-w0"]
    assert done["status"] == "ok" and done["items"] == 120_000 and done["verdict"] in ("flat", "growing")
    assert summary[victim]["status"] == "interrupted"
    assert 0 < summary[victim]["items"] < 120_000
    assert victim in stdout and "interrupted" in stdout  # the table still shows the run

    # Partial samples were saved (and consolidated) for the interrupted run, workers included.
    samples = pd.read_parquet(out / "samples.parquet")
    partial = samples[samples["run_id"] == victim]
    assert len(partial) > 5 and {"main", "worker 0", "worker 1"} <= set(partial["role"])
    if mode == "forkserver":
        assert "forkserver" in set(partial["role"])
    progress = pd.read_parquet(out / "progress.parquet")
    assert (progress["run_id"] == victim).any()

    # Nothing of the interrupted run is left: not its processes, not its process group.
    started = next(e for e in _events(out / "runs" / victim) if e["event"] == "started")
    assert procfs.processes_in_group(started["pid"]) == []
    left = [pid for pid in set(samples["pid"].astype(int)) if _alive(pid, ended)]
    assert not left, left


# -- a full disk -------------------------------------------------------------------------------

# The run would take hours (10,000 epochs), so it ends only when a write fails: the samples are
# written at the sampler's interval whatever the machine's speed, and pass the file-size limit
# within seconds on any machine (a 20-epoch run once finished on a fast machine before they did).
FULL_DISK = """\
name: full-disk
dataset: {records: 100000}
backends: [arrow]
modes: [thread]
workers: [2]
loader: {batch_size: 64, epochs: 10000}
timeout_s: 120
"""


def _limit_file_size(limit: int) -> None:
    import resource

    # A write past the limit fails with EFBIG, as on a full disk, once SIGXFSZ is ignored.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.slow
def test_a_full_disk_ends_the_run_with_a_clear_error_and_keeps_what_was_saved(tmp_path: Path) -> None:
    scenario = tmp_path / "full.yaml"
    scenario.write_text(FULL_DISK)
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, "-m", "memprobe", "run", str(scenario), "-o", str(out), "--no-report"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        preexec_fn=lambda: _limit_file_size(48 * 1024),
    )
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    (run,) = json.loads((out / "summary.json").read_text())["runs"]
    # The run ended when its samples could no longer be written, not by its timeout (which is
    # status "timeout"): said by the run whatever the machine's speed, where the test asserted
    # before that it took under 90 s.
    assert run["status"] == "failed", run
    assert "sampling stopped" in run["error"] and "samples.jsonl" in run["error"]
    assert run["items"] < 10_000 * 100_000
    samples = pd.read_parquet(out / "samples.parquet")
    assert len(samples) > 10 and samples["t"].is_monotonic_increasing
    assert not [p.name for p in out.rglob(".*.tmp")]


# -- flags that must stop before anything runs (issue 13) --------------------------------------


def test_run_help_names_the_limits_override(cli) -> None:
    r = cli("run", "--help")
    assert r.returncode == 0 and "--no-limits" in r.stdout


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--items", "0"], ["loader.items", "got 0"]),
        (["--batch-size", "0"], ["loader.batch_size", "got 0"]),
        (["--workers", "2,x"], ["--workers", "'x'"]),
        (["--kwargs", "[1]"], ["kwargs", "a mapping"]),
    ],
)
def test_bad_one_off_flags_exit_2(cli, tmp_path: Path, flags: list[str], words: list[str]) -> None:
    r = cli("run", "--dataset", "user_datasets:coco_style", *flags, "-o", tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert all(w in r.stderr for w in words), r.stderr
    assert not (tmp_path / "out").exists()


def test_compare_output_must_be_a_file_in_a_folder_memprobe_can_create(cli, tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"schema_version": 1, "status": "complete"}')
    for out, words in ((tmp_path, "is a folder"), (Path("/proc/self/x/c.html"), "cannot create the folder")):
        r = cli("compare", tmp_path, tmp_path, "-o", out)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.startswith(f"memprobe: error: -o {out}: {words}"), r.stderr
