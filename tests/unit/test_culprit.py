"""The verdict in words on a short trial (memprobe.analysis.culprit): copy-on-access and a loop's
steady growth named below the growth threshold, with what they would cost at a larger size, and
the main process's cause chosen by the shape of its growth. Hand-made recorded jobs
(tests/unit/treejobs.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from treejobs import HALF_AND_HALF, MB_PER_FAULT, STEP_AT_START, fork_job, main_job

from memprobe.analysis.runs import summarize

# Items the job counted (memprobe.mark): 30,000 from the workers' start (5 s) to 20 s.
PROGRESS = pd.DataFrame({"t": [5.0, 10.0, 20.0], "items": [0, 10_000, 30_000]})


def _summary(meta: dict, samples: pd.DataFrame, progress: pd.DataFrame | None = None):
    return summarize(meta, samples, progress if progress is not None else pd.DataFrame(), pd.DataFrame())


def test_workers_still_copying_below_the_threshold_are_named_with_what_more_items_cost() -> None:
    """+40 MB each, still rising at their end (a trial cut short): copy-on-access is named (before:
    "flat" and nothing more), at their last third's pace (+20 MB over their last 10,000 items
    each: 2 MB per 1,000), up to a full copy of the 300 MB the main process held."""
    s = _summary(*fork_job(worker_growth=40.0), PROGRESS)
    assert s.verdict == "flat" and s.causes == ["copy-on-access"], s.culprit
    assert (
        "Copy-on-access below the threshold: the main process's 2 DataLoader workers (fork) each grew about 40 MB"
        in s.culprit
    )
    assert (
        "They were still copying as they ended, at 2.00 MB per 1,000 items over their last third" in s.culprit
    )
    assert (
        "each 100,000 more items a worker reads would copy about +200 MB more, up to a full copy of the 300 MB the main process held"
        in s.culprit
    )


def test_workers_that_levelled_off_below_the_threshold_are_named_without_a_projection() -> None:
    meta, samples = fork_job(worker_growth=40.0)
    early = samples["pid"].isin([11, 12]) & (samples["t"] == 10.0)
    samples.loc[early, ["uss_mb", "private_dirty_mb", "pss_mb"]] = [40.0, 40.0, 45.0]
    samples.loc[early, "minflt"] = 40.0 / MB_PER_FAULT
    s = _summary(meta, samples, PROGRESS)
    assert s.verdict == "flat" and s.causes == ["copy-on-access"]
    assert (
        "Each levelled off by its end: about what a worker of this job copies at this dataset's size"
        in s.culprit
    )
    assert "memprobe cure" in s.culprit and "100,000 more items" not in s.culprit


@pytest.mark.parametrize(
    "job, why",
    [
        (lambda: fork_job(worker_growth=20.0), "below half the threshold: a fixed cost's size"),
        (lambda: fork_job(worker_growth=40.0, allocated_share=1.0), "memory they allocated, not copies"),
    ],
)
def test_small_or_allocated_growth_below_the_threshold_names_no_copy(job, why: str) -> None:
    s = _summary(*job(), PROGRESS)
    assert s.verdict == "flat" and "copy-on-access" not in (s.causes or []), why
    assert "Copy-on-access below the threshold" not in s.culprit


def test_a_loop_rising_steadily_below_the_threshold_is_named() -> None:
    """main +6 MB, steadily while its workers run (a loss kept with its graph each step): named
    with its pace (before: "flat", the leak unsaid)."""
    s = _summary(*main_job([301 + 6 * k / 19 for k in range(20)]))
    assert s.verdict == "flat" and s.causes == ["main-keeps"], s.culprit
    assert (
        "The main process rose +6.0 MB of its own after its first worker started, steadily while its loop ran"
        in s.culprit
    )
    assert (
        "a loop that keeps something every step grows with the steps (10 times as many: about +60 MB)"
        in s.culprit
    )


def test_a_main_process_flat_but_for_noise_is_not_named() -> None:
    s = _summary(*main_job([301.0 + (1.0 if k % 2 else 0.0) for k in range(20)]))
    assert s.verdict == "flat" and s.causes == []


@pytest.mark.parametrize(
    "anon, cause, words",
    [
        (None, "main-keeps", "steadily while its loop ran"),
        (STEP_AT_START, "main-index", "in steps as each generation of its workers began"),
        (HALF_AND_HALF, "main-grows", "after its first worker started (758 MB/min)."),
    ],
)
def test_a_growing_main_process_s_cause_is_the_one_its_shape_matches(anon, cause: str, words: str) -> None:
    """A steady rise: the loop keeps something; steps as the workers start: the sampler's index
    list; neither: both are offered (before: both, whatever the shape)."""
    s = _summary(*main_job(anon))
    assert s.verdict == "growing" and s.causes == [cause]
    assert words in s.culprit
