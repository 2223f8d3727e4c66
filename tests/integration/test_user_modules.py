"""Users' modules and factories that fail in every way (issue 39; docs/reliability.md, "Users'
modules that fail"): `memprobe cure`, `memprobe run --dataset`, a scenario's factory,
`memprobe.profile()` and the pytest fixture each name the reference and what went wrong in one
line (exit 2, or a FactoryError raised), leave no process behind, and end within the time they
state: the user's module is never imported in memprobe's own process.

Each command runs as a user runs it (test_faults.Memprobe: a session of its own, from the folder
holding the user's modules); the cases run four at a time in one module fixture, as
test_faults.py's do.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_faults import Done, Memprobe

pytestmark = pytest.mark.slow

IMPORT_TIMEOUT_S = 3  # a hanging import: nothing else of memprobe's runs in that time
# A factory that never returns: the run's process must get to the call within it first (its start
# took 1-2 s here; 15 leaves room on a machine several times slower).
CALL_TIMEOUT_S = 15
# The run of a factory that does return or fails fast: a timeout that only a hang reaches. With
# CALL_TIMEOUT_S, on 3.13t at load 14 on the 2 cores, factories:a_number's run timed out before its
# process had imported torch (status timeout, not failed).
RUN_TIMEOUT_S = 300
AT_ONCE = 4

MODULES = {
    "raises_at_import": "import json\nrecords = []\nraise RuntimeError('no data here')\ndef f(): pass\n",
    "syntax_error": "def f(:\n    pass\n",
    "exits_at_import": "import sys\nsys.exit(3)\n",
    "os_exit_at_import": "import os, sys\nprint('leaving now', file=sys.stderr, flush=True)\nos._exit(5)\n",
    "crashes_at_import": "import ctypes\nctypes.string_at(0)\n",
    "interrupted_at_import": "raise KeyboardInterrupt\n",
    "hangs_at_import": "import time\ntime.sleep(3600)\ndef f(): pass\n",
    # A helper process in a session of its own, then a hang: the helper must go too.
    "leaves_a_process": (
        "import os, subprocess, time\n"
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "open(os.environ['HELPER_PID_FILE'], 'a').write(f'{p.pid}\\n')\n"
        "time.sleep(3600)\n"
    ),
    "announces_then_hangs": (
        "import os, time\nopen(os.environ['ANNOUNCE_FILE'], 'w').close()\ntime.sleep(3600)\n"
    ),
    "prints_at_import": (
        "import sys\nprint('hello from import')\nprint('warning from import', file=sys.stderr)\n"
        "from torch.utils.data import Dataset\n\n"
        "class Numbers(Dataset):\n    def __len__(self):\n        return 256\n\n"
        "    def __getitem__(self, i):\n        return i\n\n"
        "def f():\n    print('hello from the factory')\n    return Numbers()\n"
    ),
    "factories": (
        "import os, sys, time\n\n"
        "def hangs():\n    time.sleep(3600)\n\n"
        "def exits():\n    os._exit(6)\n\n"
        "def leaves():\n    sys.exit('no split given')\n\n"
        "def a_number():\n    return 42\n"
    ),
}

# reference -> what its one line says after "dataset factory 'REF': " (the import check's)
IMPORT_FAILURES = {
    "raises_at_import:f": "importing module 'raises_at_import' raised RuntimeError: no data here; "
    "at raises_at_import.py:3 in <module> (raise RuntimeError('no data here'))",
    "syntax_error:f": "importing module 'syntax_error' raised SyntaxError: invalid syntax (syntax_error.py, line 1)",
    "exits_at_import:f": "importing module 'exits_at_import' called sys.exit(3); at exits_at_import.py:2",
    "os_exit_at_import:f": "the process importing it ended (exit code 5) while importing module "
    "'os_exit_at_import'; its last output: leaving now",
    "crashes_at_import:f": "the process importing it ended (killed by signal SIGSEGV) while importing "
    "module 'crashes_at_import'",
    "interrupted_at_import:f": "importing module 'interrupted_at_import' raised KeyboardInterrupt",
    "hangs_at_import:f": f"importing module 'hangs_at_import' did not return within {IMPORT_TIMEOUT_S} s",
    "leaves_a_process:f": f"importing module 'leaves_a_process' did not return within {IMPORT_TIMEOUT_S} s",
    "no_such_module_here:f": "cannot import module 'no_such_module_here': No module named",
    "factories:nothing_here": "module 'factories' has no attribute 'nothing_here'",
}
BOUND = {"cure": "(--timeout)", "run": "(the per-run timeout: --timeout, or the scenario's timeout_s)"}

# cure's first run: reference -> its one line after "dataset factory 'REF'"
CALL_FAILURES = {
    "factories:hangs": f": calling it did not return within timeout_s={CALL_TIMEOUT_S}; the dataset "
    "was never built",
    "factories:exits": ": the run's process ended (exit code 6) while calling it; its output: ",
    "factories:leaves": " called sys.exit('no split given'); at factories.py:10 in leaves",
    "factories:a_number": " returned builtins.int, which is not a dataset",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's folder (the commands' current folder) with their modules."""
    d = tmp_path_factory.mktemp("users")
    for name, text in MODULES.items():
        (d / f"{name}.py").write_text(text)
    return d


@pytest.fixture(scope="module")
def outcomes(project: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    """Every case's Done or the exception it raised (a command that did not end within its
    time), keyed by (command, reference), run four at a time."""
    memprobe = Memprobe(project)
    cases: dict[tuple[str, str], Callable[[], Any]] = {}
    for ref in IMPORT_FAILURES:
        for command in ("cure", "run"):
            out = tmp_path_factory.mktemp("out") / "results"
            args = ["cure", ref] if command == "cure" else ["run", "--dataset", ref]
            cases[command, ref] = lambda args=args, out=out: memprobe(
                *args, "--timeout", IMPORT_TIMEOUT_S, "-o", out, results=out, timeout=60
            )
    for ref in CALL_FAILURES:
        out = tmp_path_factory.mktemp("out") / "results"
        cases["cure", ref] = lambda ref=ref, out=out: memprobe(
            "cure", ref, "--timeout", CALL_TIMEOUT_S, "-o", out, results=out, timeout=180
        )
    scenario = tmp_path_factory.mktemp("elsewhere") / "s.yaml"
    scenario.write_text(
        f"name: s\ndataset: {{factory: 'hangs_at_import:f'}}\nmodes: [fork]\ntimeout_s: {IMPORT_TIMEOUT_S}\n"
    )
    out = tmp_path_factory.mktemp("out") / "results"
    cases["scenario", "hangs_at_import:f"] = lambda out=out: memprobe(
        "run", scenario, "-o", out, results=out, timeout=60
    )
    out = tmp_path_factory.mktemp("out") / "results"
    cases["run", "factories:hangs"] = lambda out=out: memprobe(
        "run", "--dataset", "factories:hangs", "--modes", "fork", "--timeout", CALL_TIMEOUT_S,
        "--no-report", "-o", out, results=out, timeout=180,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("out") / "results"
    cases["cure", "prints_at_import:f"] = lambda out=out: memprobe(
        "cure", "prints_at_import:f", "--only", "as-is", "--items", "64", "--batch-size", "8", "-o", out,
        results=out, timeout=300,
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as env, ThreadPoolExecutor(AT_ONCE) as pool:
        env.setenv("HELPER_PID_FILE", str(project / "helper.pids"))  # the commands inherit it
        futures = {key: pool.submit(run) for key, run in cases.items()}
        return {key: f.exception() or f.result() for key, f in futures.items()}


def outcome(outcomes: dict, command: str, ref: str) -> Done:
    found = outcomes[command, ref]
    if isinstance(found, BaseException):
        raise found
    return found


def _line(done: Done) -> str:
    """The command's one error line (other lines of stderr are cure's progress)."""
    assert "Traceback" not in done.err + done.out, done.err[-3000:]
    errors = [line for line in done.err.splitlines() if line.startswith("memprobe: error: ")]
    assert len(errors) == 1, done.err[-3000:]
    return errors[0]


@pytest.mark.parametrize("command", ["cure", "run"])
@pytest.mark.parametrize("ref", list(IMPORT_FAILURES))
def test_a_module_that_cannot_be_imported_stops_the_command_in_one_line_with_nothing_written(
    outcomes: dict, command: str, ref: str
) -> None:
    # Before: a traceback and exit 1 (raises, SyntaxError), exit 3 and no word (sys.exit(3)), a
    # crash of memprobe itself (SIGSEGV), and a hang no timeout ended (memprobe never ended).
    done = outcome(outcomes, command, ref)
    assert done.code == 2, (done.code, done.err[-3000:])
    assert done.one_line_error().startswith(
        f"memprobe: error: dataset factory '{ref}': {IMPORT_FAILURES[ref]}"
    )
    if "did not return" in IMPORT_FAILURES[ref]:
        assert done.one_line_error().endswith(BOUND[command])
    assert done.out == "" and not done.results.exists()  # nothing written, not even the folder
    assert done.left == []


def test_a_process_the_module_started_in_a_session_of_its_own_is_ended_too(
    outcomes: dict, project: Path
) -> None:
    for command in ("cure", "run"):
        assert outcome(outcomes, command, "leaves_a_process:f").code == 2
    pids = [int(line) for line in (project / "helper.pids").read_text().split()]
    assert len(pids) == 2
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue  # gone and reaped
        assert state == "Z", f"the module's helper {pid} is still running"  # ended, not yet reaped


@pytest.mark.parametrize("command", ["cure", "run"])
def test_ctrl_c_while_the_module_is_imported_ends_it_and_leaves_nothing(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("ANNOUNCE_FILE", str(tmp_path / "importing"))
    memprobe, out = Memprobe(project), tmp_path / "results"
    args = (
        ["cure", "announces_then_hangs:f"]
        if command == "cure"
        else ["run", "--dataset", "announces_then_hangs:f"]
    )
    proc = memprobe.start(*args, "-o", out)
    deadline = time.monotonic() + 120
    while not (tmp_path / "importing").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    done = memprobe.finish(proc, timeout=60)
    assert done.code == 130 and done.err == "memprobe: interrupted\n", done.err[-3000:]
    assert done.left == [] and not out.exists()


def test_a_scenario_file_s_factory_is_imported_within_its_timeout(outcomes: dict) -> None:
    done = outcome(outcomes, "scenario", "hangs_at_import:f")
    assert done.code == 2
    assert done.one_line_error() == (
        "memprobe: error: dataset factory 'hangs_at_import:f': importing module 'hangs_at_import' did not "
        f"return within {IMPORT_TIMEOUT_S} s {BOUND['run']}"
    )
    assert done.left == [] and not done.results.exists()


@pytest.mark.parametrize("ref", list(CALL_FAILURES))
def test_cure_finds_a_dataset_that_cannot_be_built_once_before_the_variants(outcomes: dict, ref: str) -> None:
    # Before: each of the five variants ran and failed in turn (a factory that never returns: the
    # whole --timeout five times, "run did not finish"), then exit 0 with a table of failures.
    done = outcome(outcomes, "cure", ref)
    assert done.code == 2, (done.code, done.err[-3000:])
    line = _line(done)
    assert line.startswith(f"memprobe: error: dataset factory '{ref}'{CALL_FAILURES[ref]}"), line
    assert line.endswith("; no other variant was run"), line
    assert f"(results: {done.results / 'r1-as-is'})" in line
    if ref == "factories:hangs":
        assert "(cure's --timeout)" in line
    assert sorted(p.name for p in done.results.iterdir()) == ["r1-as-is"]
    assert done.out == "" and done.left == []


def test_run_names_the_factory_that_never_returned_not_the_run(outcomes: dict) -> None:
    done = outcome(outcomes, "run", "factories:hangs")
    assert done.code == 1  # a run failed (timed out); the runs of a scenario each stand alone
    run = done.summary()["hangs-fork-w2"]
    assert run["status"] == "timeout"
    assert run["error"] == (
        f"FactoryError: dataset factory 'factories:hangs': calling it did not return within "
        f"timeout_s={CALL_TIMEOUT_S}; the dataset was never built"
    )  # before: "run did not finish within timeout_s=15"
    assert done.left == []


def test_what_a_module_prints_stays_out_of_memprobe_s_output(outcomes: dict) -> None:
    done = outcome(outcomes, "cure", "prints_at_import:f")
    assert done.code == 0, done.err[-3000:]
    assert any(line.startswith("as is (fork) ") and line.endswith("flat") for line in done.out.splitlines())
    assert "from import" not in done.out + done.err and "from the factory" not in done.out + done.err
    log = next(done.results.glob("r1-as-is/runs/*/child.log")).read_text()
    assert "hello from import" in log and "hello from the factory" in log  # kept where a run's output goes
    assert done.left == []


# -- memprobe.profile() and the pytest fixture: a FactoryError raised, never a hang -----------------


@pytest.mark.parametrize(
    ("ref", "words", "status"),
    [
        (
            "raises_at_import:f",
            "importing module 'raises_at_import' raised RuntimeError: no data here",
            "failed",
        ),
        ("os_exit_at_import:f", "the run's process ended (exit code 5) while importing module", "failed"),
        ("factories:hangs", f"calling it did not return within timeout_s={CALL_TIMEOUT_S}", "timeout"),
        ("factories:a_number", "returned builtins.int, which is not a dataset", "failed"),
    ],
)
def test_profile_raises_a_factory_error_naming_the_factory(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ref: str, words: str, status: str
) -> None:
    import memprobe
    from memprobe.core.errors import FactoryError

    monkeypatch.syspath_prepend(str(project))
    with pytest.raises(FactoryError) as info:  # before: a result returned, its verdict None
        memprobe.profile(
            ref,
            workers=1,
            items=8,
            batch_size=2,
            timeout_s=CALL_TIMEOUT_S if status == "timeout" else RUN_TIMEOUT_S,
            out=tmp_path / "p",
        )
    assert str(info.value).startswith(f"dataset factory '{ref}'") and words in str(info.value)
    assert str(info.value).endswith(f"(results: {tmp_path / 'p'})")
    result = info.value.result
    assert result.summary.status == status and result.results_dir == tmp_path / "p"
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["status"] == "complete"


def test_the_fixture_fails_the_test_with_the_factory_s_error_in_bounded_time(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(factories=MODULES["factories"])
    pytester.makepyfile(
        test_users=f"""
def test_dataset_stays_flat(memprobe):
    memprobe.profile("factories:hangs", workers=1, items=8, timeout_s={CALL_TIMEOUT_S})
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
    result.assert_outcomes(failed=1)  # before: passed, the run's timeout unseen
    assert "api.py" not in result.stdout.str()  # the user's line and the error, not memprobe's frames
    result.stdout.fnmatch_lines(
        [
            (
                "E * memprobe.core.errors.FactoryError: dataset factory 'factories:hangs': calling it did "
                f"not return within timeout_s={CALL_TIMEOUT_S}; the dataset was never built (results: *)"
            )
        ]
    )
