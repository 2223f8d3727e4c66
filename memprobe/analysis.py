"""Which analysis a run gets, chosen by what wrote it before anything is computed: a scenario
run (``memprobe run``, ``profile()``) by :mod:`memprobe.run.analysis`, a recorded job
(``memprobe record`` / ``watch``) by :mod:`memprobe.record.summary`. Both give a
:class:`~memprobe.core.summary.RunSummary`, which summary.json, the terminal and the report read.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from memprobe.core.summary import RunSummary
from memprobe.record import summary as recorded
from memprobe.results.schema import is_recorded
from memprobe.run import analysis as scenario

__all__ = ["is_recorded", "summarize", "summarize_all"]


def summarize(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    system: pd.DataFrame,
    *,
    gil_enabled: bool | None = None,
) -> RunSummary:
    """The figures and verdict of one run, by the analysis of its kind; ``meta`` in the current
    shape, as a loaded results folder gives it (:func:`memprobe.results.schema.upgrade_recorded`)."""
    if is_recorded(meta):
        return recorded.summarize(meta, samples, progress, gil_enabled=gil_enabled)
    return scenario.summarize(meta, samples, progress, system, gil_enabled=gil_enabled)


def summarize_all(results: Any) -> list[RunSummary]:
    """One RunSummary per run of a loaded ResultSet, in run order."""
    gil = results.manifest.get("environment", {}).get("gil_enabled")
    return [
        summarize(
            m,
            results.run_table("samples", m["run_id"]),
            results.run_table("progress", m["run_id"]),
            results.run_table("system", m["run_id"]),
            gil_enabled=gil,
        )
        for m in results.metas
    ]
