"""The pytest plugin as a user meets it: the ``memprobe`` fixture and ``assert_flat``."""

from __future__ import annotations

import pytest

# Only the growing list needs 100k items to show its growth; the flat ones read 20k.
USER_TESTS = """
import numpy as np

def build_list(n=150_000):
    return [{"id": i, "name": f"item-{i:08d}", "vals": [float(i)] * 4} for i in range(n)]

def build_numpy(n=150_000):
    return np.arange(n * 4, dtype=np.float32).reshape(n, 4)

def test_list_dataset_stays_flat(memprobe):
    result = memprobe.profile(build_list, mode="fork", workers=2, items=100_000, batch_size=256)
    result.assert_flat(max_worker_growth_mb=5)

def test_numpy_dataset_stays_flat(memprobe):
    result = memprobe.profile(build_numpy, mode="fork", workers=2, items=20_000, batch_size=256)
    result.assert_flat(max_worker_growth_mb=60)

def test_thread_mode_checks_the_main_process(memprobe):
    result = memprobe.profile(build_list, mode="thread", workers=2, items=20_000, batch_size=256)
    assert result.workers == ()
    result.assert_flat(max_worker_growth_mb=20)
"""


@pytest.mark.slow
def test_fixture_fails_a_growing_dataset_with_a_readable_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    # One headline: which worker, how much, over how many items, against which limit.
    result.stdout.re_match_lines(
        [
            (
                r".*AssertionError: worker [01] \(DataLoader worker, fork; pid \d+\) grew \d+\.\d MB "
                r"over [\d,]+ items "
                r"\(fork, 2 workers, dataset build_list\); limit 5 MB"
            )
        ]
    )
    # Then a per-worker table and what to do about the cause: each fix with its change and cost.
    assert "worker 0" in out and "worker 1" in out and "USS start" in out
    assert "what to do: copy-on-access of Python objects" in out
    assert "change: self.records = memprobe.SharedList(self.records)" in out and "cost: " in out
    # Pure copy-on-access (its workers' anonymous RSS did not rise): no second cause that is not
    # there (before: "workers allocating memory of their own ... lru_cache" too).
    assert "workers allocating memory of their own" not in out and "lru_cache" not in out
    # The user's own line is shown, not memprobe's assert_flat internals (__tracebackhide__).
    assert "result.assert_flat(max_worker_growth_mb=5)" in out and "def assert_flat" not in out
    assert "test_list_dataset_stays_flat" in out and "test_numpy_dataset_stays_flat PASSED" not in out


def test_fixture_is_registered_by_the_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fixture="def test_has_fixture(memprobe):\n    assert hasattr(memprobe, 'profile')\n"
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_profile_rejects_a_lambda(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_lambda="""
import pytest
from memprobe.core.errors import UsageError

def test_lambda(memprobe):
    with pytest.raises(UsageError, match="importable by name"):
        memprobe.profile(lambda: [1, 2, 3])
"""
    )
    # A process of its own (~1.5 CPU-s): pytester's in-process run forgets the modules its inner
    # run imported (numpy among them, through memprobe.profile), and numpy cannot be imported
    # again in a process: every later test of this xdist worker that imports numpy or pandas
    # failed (test_cure_command's in-process `memprobe cure`, found by running the two in a row).
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_profile_runs_a_partial_with_its_arguments(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_partial="""
import functools
import numpy as np

def build_numpy(n, floats=4):
    return np.zeros((n, floats), dtype=np.float32)

def test_partial(memprobe):
    result = memprobe.profile(functools.partial(build_numpy, 20_000, floats=2), mode="fork", workers=1,
                              items=5_000, batch_size=256)
    result.assert_ok()
    meta = __import__("json").loads((result.results_dir / "runs" / result.summary.run_id / "meta.json").read_text())
    assert meta["spec"]["factory"]["kwargs"] == {"n": 20_000, "floats": 2}
    # The same manifest as every results folder, and a summary: `memprobe report` renders it later.
    manifest = __import__("json").loads((result.results_dir / "manifest.json").read_text())
    assert manifest["kind"] == "profile" and manifest["status"] == "complete"
    assert manifest["finished"] >= manifest["started"] and "build_numpy" in manifest["description"]
    assert manifest["environment"]["cpu_count"] >= 1
    assert (result.results_dir / "summary.json").exists()
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


LOOP = """
import time
kept = []
for step in range(300):
    out = b"x" * 400_000
    if KEEP:
        kept.append(out)  # a loop that keeps something every step
    time.sleep(0.01)
"""
# A 3 s loop: at the default 1 % a slow machine's cheap ticks leave it one exact reading (3.13t
# on the build VM), and assert_flat says it could judge nothing; 5 % reads the loop's rise.
LOOP_TESTS = f"""
import sys

LOOP = {LOOP!r}

def test_a_loop_that_keeps_its_outputs(memprobe):
    result = memprobe.record([sys.executable, "-c", "KEEP = True" + LOOP], pss_budget=0.05)
    result.assert_flat(max_main_growth_mb=20)

def test_a_loop_that_keeps_nothing(memprobe):
    result = memprobe.record([sys.executable, "-c", "KEEP = False" + LOOP], pss_budget=0.05)
    result.assert_flat(max_main_growth_mb=20)
"""


def test_the_fixture_records_a_training_loop_and_fails_one_that_keeps_its_outputs(
    pytester: pytest.Pytester,
) -> None:
    """The guard for a training loop's own growth (outputs or losses kept), which a dataset's
    profile cannot see: ``memprobe.record([...])`` records the command in a process of its own;
    ``assert_flat(max_main_growth_mb=...)`` fails naming the main process, its growth and its
    shape, with what to do; the loop that keeps nothing passes."""
    pytester.makepyfile(test_loop=LOOP_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.re_match_lines(
        [r".*AssertionError: main \(pid \d+\) grew \+\d+\.\d MB of its own; limit 20 MB"]
    )
    out = " ".join(result.stdout.str().split())
    assert "steadily while its loop ran" in out
    assert "what to do: the training loop keeping something every step" in out
    assert "FAILED test_loop.py::test_a_loop_that_keeps_its_outputs" in out
