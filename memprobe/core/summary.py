"""The figures of one run that summary.json, the terminal table and the report read
(:class:`RunSummary`), and the job-wide figures every run has, computed the same way whatever
wrote it: total PSS rounds, the window between the ``warm`` and ``done`` milestones, items/s,
CPU and page faults per item. The scenario analysis (:mod:`memprobe.analysis.scenario`) and the
recorded-job analysis (:mod:`memprobe.analysis.recorded`) each fill the rest;
:mod:`memprobe.analysis` chooses between them by the run's kind.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from memprobe.core import series


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    backend: str
    mode: str
    workers: int
    status: str
    error: str | None
    items: int
    items_per_s: float | None
    time_to_first_batch_s: float | None
    duration_s: float
    total_pss_start_mb: float | None
    total_pss_peak_mb: float | None
    total_pss_end_mb: float | None
    sum_rss_peak_mb: float | None
    rss_overcount_mb: float | None  # sum of RSS at its peak minus total PSS at its peak
    worker_uss_start_mb: float | None  # mean over workers
    worker_uss_growth_mb: float | None  # mean over workers, end minus start of iteration
    worker_uss_growth_max_mb: float | None
    main_uss_growth_mb: float | None
    growth_per_1k_items_per_worker_mb: float | None
    growth_threshold_mb: float
    verdict: str | None  # flat | growing | None when the run produced no window
    expectation: str | None
    expectation_met: bool | None
    explanation: str
    sampler_cpu_share: float | None
    gil_enabled: bool | None = None
    workload: str = "records"
    decoder_backend: str | None = None  # decode workload: e.g. pillow, nvimgcodec-cpu, nvimgcodec-gpu
    mb_per_s: float | None = None  # decode workload: encoded MB/s
    megapixels_per_s: float | None = None
    cpu_cores_used: float | None = None  # CPU seconds of the whole tree per second, in the window
    cpu_ms_per_item: float | None = None  # CPU of the whole tree per item, in the window
    faults_per_item: float | None = None  # minor page faults of the whole tree per item, in the window
    kernel_cpu_share: float | None = None  # kernel (system) part of that CPU: where page faults are paid
    # Recorded jobs (record / watch) only, from memprobe.analysis.recorded:
    processes: list[dict] | None = None  # per process: its window, own growth, built / start-up / released
    culprit: str | None = None  # the verdict in words, naming who grows
    estimate_error: dict | None = (
        None  # USS estimate vs the next exact reading: median_pct, max_pct, max_mb, n
    )
    projection: list[dict] | None = None  # memory at other worker and rank counts
    # The round of the peak total PSS in the parts the projection scales (its time, the total, the
    # USS of the workers it scales and how many, the PSS of the processes counted once).
    projection_peak: dict | None = None
    # The job against the memory it must fit in (memprobe.analysis.limit.against_limit): the limit,
    # the cgroup's charge and its rate, the time to the limit, the OOM kills while it ran.
    memory_limit: dict | None = None
    # What the verdict blames, as memprobe.core.cures names it (what to do is said there); None
    # for a scenario run, whose causes follow from its mode (cures.scenario_causes).
    causes: list[str] | None = None
    # A scenario run's: what its workers allocated over the window (mean, at least: the rise of
    # their anonymous RSS); the rest of their growth is pages copied from their parent. None
    # where not known (results without anonymous RSS).
    worker_allocated_mb: float | None = None
    # A scenario run's: its loader's batch size, and the time 100 batches take at the run's
    # items/s in its window (100 x batch_size / items_per_s): the course exercise's measure.
    batch_size: int | None = None
    time_per_100_batches_s: float | None = None
    # Which of the dataset's structures the forked workers copied, where the run asked
    # (memprobe.analysis.attribution): rows of MB per path and outside the dataset.
    attribution: dict | None = None
    # A recorded job's: each parent of forked workers, the MB its workers copied by where the pages
    # lie (heap, anonymous mappings, file mappings, stack), read from outside, marked or not.
    copied_by_kind: list[dict] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: clean(v) for k, v in asdict(self).items()}


def clean(v: Any) -> Any:
    """JSON-ready: floats rounded, NaN as null, through the per-process lists and dicts too."""
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 3)
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # a numpy scalar
        return clean(v.item())
    return v


# -- the job-wide figures ------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFigures:
    """What every run has, whatever wrote it: the PSS rounds, the growth window between the
    ``warm`` and ``done`` milestones (None, None without one) and the fields of
    :class:`RunSummary` computed from them alone (:meth:`fields`)."""

    rounds: pd.DataFrame
    start: float | None
    end: float | None
    fields: dict[str, Any]


def job_figures(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    gil_enabled: bool | None,
    totals: pd.Series | None = None,
) -> JobFigures:
    """The run's status, items and rate, duration, total PSS in its window, sum of RSS at its
    peak, the sampler's CPU share and the CPU and fault costs per item. ``totals``: the samples'
    total PSS per round where the caller has it (:func:`pss_rounds`)."""
    milestones = meta.get("milestones", {})
    rounds = pss_rounds(samples, totals)
    start, end = window_of(rounds, milestones.get("warm"), milestones.get("done"))
    window = rounds[(rounds["t"] >= start) & (rounds["t"] <= end)] if start is not None else rounds.iloc[0:0]
    sum_rss_peak = peak(series.sum_rss(samples))
    pss_peak = peak(rounds["total_pss_mb"])
    rate = items_rate(progress, milestones.get("warm"), milestones.get("done"))
    info = meta.get("dataset_info") or {}
    fields: dict[str, Any] = {
        "run_id": meta["run_id"],
        "status": meta["status"],
        "error": error_text(meta.get("error")),
        "items": int(meta.get("items") or 0),
        "items_per_s": rate,
        "time_to_first_batch_s": time_to_first_batch(milestones),
        "duration_s": float(meta.get("elapsed_s") or 0.0),
        "total_pss_start_mb": first(window["total_pss_mb"]),
        "total_pss_peak_mb": pss_peak,
        "total_pss_end_mb": last(window["total_pss_mb"]),
        "sum_rss_peak_mb": sum_rss_peak,
        "rss_overcount_mb": (sum_rss_peak - pss_peak)
        if sum_rss_peak is not None and pss_peak is not None
        else None,
        "sampler_cpu_share": sampler_share(meta),
        # As the run's own process saw it (its imports can re-enable the GIL); else the session's.
        "gil_enabled": info.get("gil_enabled", gil_enabled),
        "decoder_backend": info.get("decoder_backend"),
        "cpu_cores_used": cpu_cores_used(samples, start, end),
    }
    if rate is not None and info.get("bytes_per_item"):
        fields["mb_per_s"] = rate * info["bytes_per_item"] / 1e6
    if rate is not None and info.get("pixels_per_item"):
        fields["megapixels_per_s"] = rate * info["pixels_per_item"] / 1e6
    if rate is not None and start is not None and end is not None:
        fields.update(per_item_costs(samples, start, end, rate * (end - start)))
    return JobFigures(rounds, start, end, fields)


def pss_rounds(samples: pd.DataFrame, totals: pd.Series | None = None) -> pd.DataFrame:
    """Per PSS round (one timestamp): total PSS over the tree (:func:`memprobe.core.series.total_pss`,
    NaN for a round with a process that could not be read; ``totals``, where the caller has them),
    and the sum of RSS and number of processes read exactly at that round."""
    totals = series.total_pss(samples) if totals is None else totals
    if totals.empty:
        return pd.DataFrame(columns=["t", "total_pss_mb", "sum_rss_mb", "processes"])
    g = samples[samples["tier"] == "pss"].groupby("t")
    return pd.DataFrame(
        {
            "t": totals.index.to_numpy(float),
            "total_pss_mb": totals.to_numpy(float),
            "sum_rss_mb": g["rss_mb"].sum().reindex(totals.index).to_numpy(float),
            "processes": g["pid"].nunique().reindex(totals.index).to_numpy(),
        }
    )


def per_item_costs(samples: pd.DataFrame, start: float, end: float, items: float) -> dict[str, float | None]:
    """CPU ms, minor page faults and the kernel's share of the CPU, per item fetched between
    ``start`` and ``end``, summed over every process of the tree (worker threads are in their
    process). Faults that cost CPU are paid in the kernel: a high kernel share next to many
    faults per item is page-fault churn (memory handed back to the kernel and faulted in again)."""
    none: dict[str, float | None] = {
        "cpu_ms_per_item": None,
        "faults_per_item": None,
        "kernel_cpu_share": None,
    }
    if samples.empty or items <= 0:
        return none
    w = samples[(samples["t"] >= start) & (samples["t"] <= end) & ~samples["missing"].astype(bool)]
    if w.empty:
        return none
    g = w.sort_values("t").groupby("pid")[[c for c in ("cpu_s", "sys_cpu_s", "minflt") if c in w]]
    delta = g.last() - g.first()
    cpu = float(delta["cpu_s"].sum())
    kernel = (
        float(delta["sys_cpu_s"].sum()) if "sys_cpu_s" in delta and delta["sys_cpu_s"].notna().any() else None
    )
    return {
        "cpu_ms_per_item": cpu / items * 1e3,
        "faults_per_item": float(delta["minflt"].sum()) / items if "minflt" in delta else None,
        "kernel_cpu_share": kernel / cpu if kernel is not None and cpu > 0 else None,
    }


def cpu_cores_used(samples: pd.DataFrame, start: float | None, end: float | None) -> float | None:
    """CPU seconds used by the whole tree per wall second between ``start`` and ``end`` (the mean
    of the CPU chart's total over that time)."""
    if start is None or end is None:
        return None
    return series.cores_used(series.process_counters(samples), start, end)


def window_bounds(samples: pd.DataFrame, milestones: dict) -> tuple[float | None, float | None]:
    """Start and end time of a run's growth window (the PSS rounds forced at warm and done)."""
    return window_of(pss_rounds(samples), milestones.get("warm"), milestones.get("done"))


def window_of(
    rounds: pd.DataFrame, warm: float | None, done: float | None
) -> tuple[float | None, float | None]:
    """The PSS rounds forced at ``warm`` and ``done`` (each is the first round at or after its
    mark: the loader process waits for it before going on)."""
    if warm is None or done is None or rounds.empty:
        return None, None
    after_warm = rounds.loc[rounds["t"] >= warm, "t"]
    after_done = rounds.loc[rounds["t"] >= done, "t"]
    start = float(after_warm.iloc[0]) if len(after_warm) else None
    end = float(after_done.iloc[0]) if len(after_done) else float(rounds["t"].iloc[-1])
    if start is None or end < start:
        return None, None
    return start, end


def items_rate(progress: pd.DataFrame, start: float | None, end: float | None) -> float | None:
    """Items/s between the warm point and the end (pauses for PSS rounds are negligible)."""
    if progress.empty or start is None or end is None or end <= start:
        return None
    before = progress[progress["t"] <= start + 1e-6]
    done_items = float(progress["items"].max())
    first_items = float(before["items"].max()) if len(before) else 0.0
    return (done_items - first_items) / (end - start)


def time_to_first_batch(milestones: dict) -> float | None:
    if "first_batch" not in milestones or "iter_start" not in milestones:
        return None
    return milestones["first_batch"] - milestones["iter_start"]


def error_text(error: dict | None) -> str | None:
    return None if not error else f"{error.get('type')}: {error.get('message')}"


def sampler_share(meta: dict) -> float | None:
    cpu, elapsed = meta.get("sampler", {}).get("cpu_s"), meta.get("elapsed_s")
    return cpu / elapsed if cpu is not None and elapsed else None


def first(s: pd.Series) -> float | None:
    """The first value, None when there is none or it is not a number."""
    return known(s.iloc[0]) if len(s) else None


def last(s: pd.Series) -> float | None:
    """The last value, None when there is none or it is not a number."""
    return known(s.iloc[-1]) if len(s) else None


def peak(s: pd.Series) -> float | None:
    """The largest known value (a total that could not be taken is no peak)."""
    return float(s.max()) if s.notna().any() else None


def known(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def per_1k_items_per_worker(growth_mb: float | None, items: int, workers: int) -> float | None:
    """A worker's growth per 1,000 items it loaded (the items shared evenly by ``workers``), or
    None without a growth or items: how fast a dataset copies, whatever the run's length."""
    per_worker_k = items / max(workers, 1) / 1000
    return growth_mb / per_worker_k if growth_mb is not None and per_worker_k else None


# -- a recorded job's process rows (summary.json ``processes``) -----------------------------------


def never_read(processes: list[dict]) -> list[str]:
    """Roles of the processes the sampler never read exactly though it may: the total PSS holds
    an estimate of their PSS (:func:`memprobe.core.series.held_readings`)."""
    return [r["role"] for r in processes if not r.get("pss_samples") and not r.get("denied")]


def denied(processes: list[dict]) -> list[dict]:
    """The processes whose memory map the kernel refused memprobe: total PSS leaves them out
    (:func:`memprobe.core.series.readable`)."""
    return [r for r in processes if r.get("denied")]
