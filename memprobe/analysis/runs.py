"""Which analysis a run gets, chosen by what wrote it before anything is computed: a scenario
run (``memprobe run``, ``profile()``) by :mod:`memprobe.analysis.scenario`, a recorded job
(``memprobe record`` / ``watch``) by :mod:`memprobe.analysis.recorded`. Both give a
:class:`~memprobe.core.summary.RunSummary`, which summary.json, the terminal and the report read.
A run is analysed once per finish or `memprobe report`: :func:`analyse_all` keeps a recorded
job's processes and rows (:class:`~memprobe.analysis.recorded.RecordedAnalysis`) beside its summary,
and the record page draws from them (its analysis ran twice before, summary then page).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from memprobe.analysis import recorded, scenario
from memprobe.analysis.workers import Sweep, sweep_of
from memprobe.core.summary import RunSummary
from memprobe.results.upgrade import is_recorded

__all__ = ["Analysed", "Analyses", "analyse", "analyse_all", "is_recorded", "summarize", "summarize_all"]


@dataclass(frozen=True)
class Analysed:
    """One run analysed: its summary, and for a recorded job what its page draws from."""

    summary: RunSummary
    recorded: recorded.RecordedAnalysis | None = None


class Analyses(list[Analysed]):
    """Each run of a session analysed, in run order, and what is computed across them once:
    the repeats' medians and spreads and the worker-count frontier (:attr:`sweep`,
    :mod:`memprobe.analysis.workers`), which summary.json, the page and the terminal read."""

    def __init__(self, analysed: list[Analysed], sweep: Sweep) -> None:
        super().__init__(analysed)
        self.sweep = sweep


def analyse(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    system: pd.DataFrame,
    *,
    gil_enabled: bool | None = None,
    mem_total_mb: float | None = None,
) -> Analysed:
    """One run by the analysis of its kind; ``meta`` in the current shape, as a loaded results
    folder gives it (:func:`memprobe.results.upgrade.upgrade_recorded`); ``mem_total_mb``: the
    machine's memory, the limit of a recorded job whose cgroup has none."""
    if is_recorded(meta):
        job = recorded.analyse(
            meta, samples, progress, gil_enabled=gil_enabled, system=system, mem_total_mb=mem_total_mb
        )
        return Analysed(job.summary, job)
    return Analysed(scenario.summarize(meta, samples, progress, system, gil_enabled=gil_enabled))


def summarize(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    system: pd.DataFrame,
    *,
    gil_enabled: bool | None = None,
) -> RunSummary:
    """The figures and verdict of one run (:func:`analyse`)."""
    return analyse(meta, samples, progress, system, gil_enabled=gil_enabled).summary


def analyse_all(results: Any) -> Analyses:
    """Each run of a loaded ResultSet (:func:`analyse`), in run order, with the session's sweep."""
    env = results.manifest.get("environment", {})
    runs = [
        analyse(
            m,
            results.run_table("samples", m["run_id"]),
            results.run_table("progress", m["run_id"]),
            results.run_table("system", m["run_id"]),
            gil_enabled=env.get("gil_enabled"),
            mem_total_mb=env.get("mem_total_mb"),
        )
        for m in results.metas
    ]
    return Analyses(runs, sweep_of(results.manifest, [a.summary for a in runs]))


def summarize_all(results: Any) -> list[RunSummary]:
    """One RunSummary per run of a loaded ResultSet, in run order."""
    return [a.summary for a in analyse_all(results)]
