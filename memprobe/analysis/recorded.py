"""The summary of a recorded job (``memprobe record`` / ``watch``): each process's own growth
over the window of its kind (:mod:`memprobe.analysis.growth`), the verdict on it, the
culprit in words and the projection (:mod:`memprobe.analysis.culprit`, :mod:`memprobe.analysis.projection`), with the job-wide
figures every run has (:func:`memprobe.core.summary.job_figures`). Nothing of a scenario's
analysis is computed for it: :mod:`memprobe.analysis` chooses this one by the run's kind.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from memprobe.analysis import forecast
from memprobe.analysis.attribution import attribution, copied_by_kind
from memprobe.analysis.culprit import judge
from memprobe.analysis.growth import Growth, grown, judged_parents, judged_workers
from memprobe.analysis.limit import against_limit, cgroup_charge, entered_at, memory_limit, oom_words
from memprobe.analysis.process import Proc, as_analysed, own_workers
from memprobe.analysis.processes import processes
from memprobe.analysis.projection import Basis, projection, projection_basis, projection_rounds
from memprobe.analysis.table import estimate_error, table
from memprobe.core import series
from memprobe.core.summary import (
    RunSummary,
    denied,
    first,
    job_figures,
    last,
    never_read,
    per_1k_items_per_worker,
)
from memprobe.core.vocabulary import DATALOADER


@dataclass(frozen=True)
class RecordedAnalysis:
    """A recorded job analysed once: its processes (:class:`Proc`), their growth rows
    (:class:`Growth`, the per-process table), its samples with each process's final role and
    lineage (:func:`~memprobe.analysis.process.as_analysed`), their PSS summed per role at each
    round (:func:`~memprobe.core.series.pss_by_role`: most of an analysis's time), the summary,
    and what the page states besides it: the projection's basis, the cgroup's charge over the
    job, the memory it must fit in (``limit_mb``, ``limit_of``: the machine's memory for a folder
    without a cgroup reading) and the most the processes memprobe may not read held at once
    (``denied_mb``). The record page draws from it without deriving any of it again."""

    procs: list[Proc]
    rows: list[Growth]
    samples: pd.DataFrame
    pss_by_role: pd.DataFrame
    summary: RunSummary
    basis: Basis | None = None
    charge: pd.Series | None = None
    limit_mb: float | None = None
    limit_of: str = "this machine's memory"
    denied_mb: float = 0.0


def analyse(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    *,
    gil_enabled: bool | None = None,
    system: pd.DataFrame | None = None,
    mem_total_mb: float | None = None,
) -> RecordedAnalysis:
    """Every process of the job over the window that fits what it is, and the job's summary
    (with the job against its memory limit: ``system``, the machine's ``mem_total_mb``).
    ``meta`` in the current shape, as a loaded folder gives it (an older version's upgraded:
    :func:`memprobe.results.upgrade.upgrade_recorded`, its process list completed:
    :func:`memprobe.results.upgrade.complete_processes`).

    Long because it is the one place a recorded job's summary is put together, field by field
    in summary.json's order: split, each part would take the same dozen figures again."""
    procs = processes(meta)
    rows = table(meta, samples, progress, procs)
    analysed = as_analysed(samples, procs)
    # The rounds' times are the samples' either way (as_analysed adds roles and lineage, no row).
    held = series.held_readings(analysed)
    by_role = series.pss_by_role(analysed, held)
    all_totals = series.total_of(by_role)
    job = job_figures(meta, samples, progress, gil_enabled, all_totals)
    threshold = float(meta["verdict"]["growth_threshold_mb"])
    workers, parents = judged_workers(rows), judged_parents(rows)
    shm = shm_growth(system, samples, procs)
    verdict = _verdict(workers + parents, shm, threshold)
    main = max(parents, key=grown) if parents else None
    w_mean = float(np.mean([grown(g) for g in workers])) if workers else None
    items = job.fields["items"]
    # The same totals as the scenario summary and the record page's chart: a round with a process
    # that could not be read is a gap (left out here), never a smaller sum.
    totals = all_totals.dropna()
    fields = _with_totals(job.fields, totals)
    # The projection scales these rounds: the configuration that ran is the peak total PSS.
    rounds = projection_rounds(
        rows, totals, series.by_pid(held, "pss_mb", totals.index), series.by_pid(held, "uss_mb", totals.index)
    )
    summary = RunSummary(
        **fields,
        # The command's name (the run's id), the workers' start method (else the run's kind).
        backend=meta["run_id"],
        mode=meta.get("start_method") or meta["kind"],
        workers=meta["max_workers"],
        worker_uss_start_mb=float(np.mean([g.uss_start_mb for g in workers])) if workers else None,
        worker_uss_growth_mb=w_mean,
        worker_uss_growth_max_mb=max(map(grown, workers), default=None),
        main_uss_growth_mb=grown(main) if main else None,
        growth_per_1k_items_per_worker_mb=per_1k_items_per_worker(w_mean, items, len(workers)),
        growth_threshold_mb=threshold,
        verdict=verdict,
        expectation=None,
        expectation_met=None,
        explanation="",
        workload=meta["kind"],
        attribution=attribution(meta),
        copied_by_kind=copied_by_kind(meta),
        processes=[g.to_dict() for g in rows],
        estimate_error=estimate_error(samples, meta.get("sampler")),
        projection=projection(basis := projection_basis(rows, procs), rounds),
        projection_peak=rounds.peak() if rounds is not None and basis is not None else None,
        memory_limit=against_limit(
            meta,
            samples,
            system if system is not None else pd.DataFrame(),
            mem_total_mb,
            total=totals if len(totals) else None,
            workers=worker_lives(procs, rows),
            parents=forecast.parents_memory(samples, parent_windows(procs, parents)),
            estimated=len(never_read([g.to_dict() for g in rows])),
        ),
    )
    words, causes = judge(rows, procs, verdict, threshold, shm)
    if killed := oom_words(summary.memory_limit):
        words = f"{words} {killed}" if words else killed
    limit_mb, limit_of = memory_limit(meta, mem_total_mb)
    return RecordedAnalysis(
        procs,
        rows,
        analysed,
        by_role,
        replace(summary, culprit=words, causes=causes, explanation=explanation(summary, words)),
        basis=basis,
        charge=cgroup_charge(system if system is not None else pd.DataFrame(), samples, entered_at(meta)),
        limit_mb=limit_mb,
        limit_of=limit_of,
        denied_mb=denied_rss_mb(summary.processes or [], samples),
    )


def _verdict(judged: list[Growth], shm: float | None, threshold: float) -> str | None:
    """growing where a judged process grew past ``threshold`` of its own, or /dev/shm rose by
    more (held in shared memory: in no process's own growth, :func:`shm_growth`); None with no
    process judged."""
    if not judged:
        return None
    if max(map(grown, judged)) > threshold or (shm is not None and shm > threshold):
        return "growing"
    return "flat"


def _with_totals(fields: dict, totals: pd.Series) -> dict:
    """The job-wide fields with total PSS at its start, peak and end (the rounds' totals, a
    round with a process that could not be read left out) and what summing RSS over-counts."""
    if len(totals):
        fields = fields | {
            "total_pss_start_mb": first(totals),
            "total_pss_peak_mb": float(totals.max()),
            "total_pss_end_mb": last(totals),
        }
    if fields["sum_rss_peak_mb"] is not None and fields["total_pss_peak_mb"] is not None:
        fields = fields | {"rss_overcount_mb": fields["sum_rss_peak_mb"] - fields["total_pss_peak_mb"]}
    return fields


def summarize(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    system: pd.DataFrame | None = None,
    *,
    gil_enabled: bool | None = None,
    mem_total_mb: float | None = None,
) -> RunSummary:
    """The summary of one recorded job (:func:`analyse`)."""
    return analyse(
        meta, samples, progress, gil_enabled=gil_enabled, system=system, mem_total_mb=mem_total_mb
    ).summary


def parent_windows(procs: list[Proc], parents: list[Growth]) -> list[tuple[int, float, float]]:
    """Each judged parent's window for the forecast (pid, from, to): from where its own growth
    counts to its last tick while it had workers (after, a program tears its data down), or to
    its last tick alive without workers (a main process killed for memory: its kill)."""
    by_pid = {p.pid: p for p in procs}
    out = []
    for g in parents:
        p = by_pid.get(g.pid)
        if p is None or g.baseline_t is None:
            continue
        mine = own_workers(p, procs)
        out.append((g.pid, g.baseline_t, max(q.last_t for q in mine) if mine else p.last_t))
    return out


def worker_lives(
    procs: list[Proc], rows: list[Growth]
) -> list[tuple[int | None, float, float | None, float | None]]:
    """Each worker process's generation, start, end (None: alive as the record ended) and own
    growth (None: not judged), for its generation (:func:`memprobe.analysis.forecast.generations`)."""
    growth = {g.pid: g.growth_mb for g in rows if g.judged}
    return [(p.generation, p.start_t, p.end_t, growth.get(p.pid)) for p in procs if p.is_worker]


RAMP_SHARE = 0.25  # each half of a /dev/shm rise at least this share of it: a ramp, not a step


def shm_growth(system: pd.DataFrame | None, samples: pd.DataFrame, procs: list[Proc]) -> float | None:
    """How much /dev/shm in use rose while the job's worker processes lived, where the job is the
    likely cause: its level over the last third of that time less its level over the first third
    (medians: batches in flight, a constant cost, cancel out; the job's teardown, after its
    workers, is left out). What the workers handed over as shared-memory tensors and something
    kept (a training loop's list of batches): those pages are in no process's USS or PSS until a
    process reads them, so no process's own growth counts them.

    /dev/shm is the whole machine's, so None unless the job hands tensors over in shared memory
    (it has DataLoader worker processes, which send every tensor through it, or its processes
    were seen mapping shared memory) and the rise is a ramp over the workers' life (the middle
    third's level at least ``RAMP_SHARE`` of the rise from each end): another program starting
    or ending in the window is a step. None too without worker processes, or without two
    /dev/shm readings in the first and last thirds and one in the middle."""
    if system is None or system.empty or "dev_shm_mb" not in system:
        return None
    workers = [p for p in procs if p.is_worker and p.start_t is not None]
    if not workers or not (any(p.kind == DATALOADER for p in workers) or series.shm_used(samples)):
        return None
    start, end = min(p.start_t for p in workers), max(p.last_t for p in workers)
    third = (end - start) / 3
    shm = system.dropna(subset=["dev_shm_mb"])
    levels = [
        shm[(shm["t"] >= a) & (shm["t"] <= a + third)]["dev_shm_mb"]
        for a in (start, start + third, end - third)
    ]
    early, middle, late = levels
    if len(early) < 2 or len(middle) < 1 or len(late) < 2:
        return None
    low, mid, high = early.median(), middle.median(), late.median()
    rise = float(high - low)
    if rise > 0 and (mid - low < RAMP_SHARE * rise or high - mid < RAMP_SHARE * rise):
        return 0.0  # a step: another program's files appearing, or the job's in-flight level changing
    return rise


def explanation(s: RunSummary, words: str) -> str:
    left_out = len(denied(s.processes or []))
    if s.verdict is None:
        why = (
            "no verdict: no worker or parent process has two exact readings in its window"
            if s.status == "ok"
            else f"no verdict: the command ended {s.status} before enough was measured"
        )
        why += f" ({s.error})" if s.error else ""
        if left_out:
            why += (
                f"; memprobe may not read {left_out} process{'es' if left_out != 1 else ''} of it "
                "(permission denied)"
            )
        return why
    parts = [words]
    unread = len(never_read(s.processes or []))
    if s.rss_overcount_mb is not None and s.total_pss_peak_mb and unread:
        # Their PSS was never read: the total holds an estimate of it (series.held_readings).
        parts.append(
            f"Summing RSS would have reported {s.sum_rss_peak_mb:,.0f} MB at peak; the real total (PSS) "
            f"was about {s.total_pss_peak_mb:,.0f} MB ({unread} process{'es' if unread != 1 else ''} "
            f"never read exactly count{'' if unread != 1 else 's'} with an estimate)."
        )
    elif s.rss_overcount_mb is not None and s.total_pss_peak_mb and not left_out:
        parts.append(
            f"Summing RSS would have reported {s.sum_rss_peak_mb:,.0f} MB at peak, "
            f"{s.rss_overcount_mb:,.0f} MB more than the real total (PSS) of {s.total_pss_peak_mb:,.0f} MB."
        )
    if left_out:
        # Their memory map is not memprobe's to read: left out of the total (series.readable).
        parts.append(
            f"Total PSS leaves out {left_out} process{'es' if left_out != 1 else ''} memprobe may not "
            "read (permission denied); summing RSS, which counts "
            f"{'them' if left_out != 1 else 'it'}, would have reported {s.sum_rss_peak_mb or 0:,.0f} MB at peak."
        )
    return " ".join(parts)


def denied_rss_mb(processes: list[dict], samples: pd.DataFrame) -> float:
    """The most the processes memprobe may not read held at once: their RSS summed per tick, at
    its peak (their PSS is at most that: what total PSS may miss)."""
    pids = {int(r["pid"]) for r in denied(processes)}
    if not pids or samples.empty:
        return 0.0
    rows = samples[samples["pid"].isin(pids) & ~samples["missing"].fillna(False).astype(bool)]
    peak = rows.groupby("t")["rss_mb"].sum().max() if not rows.empty else 0.0
    return float(peak) if pd.notna(peak) else 0.0
