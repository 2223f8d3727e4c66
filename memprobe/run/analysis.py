"""From saved samples to figures and verdicts: pure functions of the results.

Definitions (times are seconds since the run's process started):

* iteration window: from ``warm`` (every worker has delivered its first batch, so spawn and
  forkserver workers have loaded their copy of the dataset) to the last batch (``done``); the
  loader process pauses at both ends while the supervisor takes a PSS round, workers alive.
* total PSS at a round: the sum of PSS over every process of the run's tree (the tree's real
  cost). Summing RSS instead counts each shared page once per process that maps it. Totals come
  from :mod:`memprobe.core.series`, as the report's charts do: a round with a process that could not
  be read has no total (None), never a smaller one.
* worker USS growth: for each worker process, USS at its last PSS sample in the window minus USS
  at its first; the mean over workers. In a forked worker that is copy-on-access.
* verdict: ``growing`` when the growth (worker USS for process workers; the main process's
  Private_Dirty for thread and single-process runs) exceeds the scenario's ``growth_threshold_mb``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd

from memprobe.core import series
from memprobe.core.vocabulary import MAIN, has_worker_processes
from memprobe.record import tree_analysis, tree_verdict


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
    # Recorded jobs (record / watch) only, from memprobe.record.tree_analysis:
    processes: list[dict] | None = None  # per process: its window, own growth, built / start-up / released
    culprit: str | None = None  # the verdict in words, naming who grows
    estimate_error: dict | None = (
        None  # USS estimate vs the next exact reading: median_pct, max_pct, max_mb, n
    )
    projection: list[dict] | None = None  # memory at other worker and rank counts

    def to_dict(self) -> dict[str, Any]:
        return {k: _clean(v) for k, v in asdict(self).items()}


def _clean(v: Any) -> Any:
    """JSON-ready: floats rounded, NaN as null, through the per-process lists and dicts too."""
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 3)
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # a numpy scalar
        return _clean(v.item())
    return v


def pss_rounds(samples: pd.DataFrame) -> pd.DataFrame:
    """Per PSS round (one timestamp): total PSS over the tree (:func:`memprobe.core.series.total_pss`,
    NaN for a round with a process that could not be read), and the sum of RSS and number of
    processes read exactly at that round."""
    totals = series.total_pss(samples)
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


def per_process_growth(samples: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """USS at the first and last PSS sample of each process inside [start, end]."""
    w = samples[(samples["tier"] == "pss") & (samples["t"] >= start) & (samples["t"] <= end)]
    if w.empty:
        return pd.DataFrame(columns=["pid", "role", "worker", "uss_start_mb", "uss_end_mb", "growth_mb"])
    # A worker counts from when it is one: a spawn or forkserver worker first starts and unpickles
    # its dataset under another role (its start-up copy, not growth while iterating).
    w = w[(w["worker"] >= 0) | ~w["pid"].isin(w.loc[w["worker"] >= 0, "pid"].unique())]
    w = w.sort_values("t")
    dirty = "private_dirty_mb" if "private_dirty_mb" in w else "uss_mb"
    g = w.groupby("pid")
    out = pd.DataFrame(
        {
            "role": g["role"].last(),
            "worker": g["worker"].last(),
            "uss_start_mb": g["uss_mb"].first(),
            "uss_end_mb": g["uss_mb"].last(),
            "dirty_start_mb": g[dirty].first(),
            "dirty_end_mb": g[dirty].last(),
            "samples": g.size(),
        }
    ).reset_index()
    out["growth_mb"] = out["uss_end_mb"] - out["uss_start_mb"]
    out["dirty_growth_mb"] = out["dirty_end_mb"] - out["dirty_start_mb"]
    return out


def summarize(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    system: pd.DataFrame,
    *,
    gil_enabled: bool | None = None,
) -> RunSummary:
    """The figures and verdict for one run."""
    spec = meta["spec"]
    milestones = meta.get("milestones", {})
    rounds = pss_rounds(samples)
    start, end = _window(rounds, milestones.get("warm"), milestones.get("done"))
    window = rounds[(rounds["t"] >= start) & (rounds["t"] <= end)] if start is not None else rounds.iloc[0:0]
    growth = per_process_growth(samples, start, end) if start is not None and end is not None else None
    # A worker with a single PSS sample in the window (one that was ending when a watch began, or
    # lived shorter than the gap between rounds) has no growth to show, not a growth of zero.
    workers = (
        growth[(growth["worker"] >= 0) & (growth.get("samples", 2) >= 2)] if growth is not None else None
    )
    main = growth[growth["role"] == MAIN] if growth is not None else None
    w_growth = _mean(workers["growth_mb"]) if workers is not None and len(workers) else None
    # The main process is judged on Private_Dirty: its Private_Clean also grows when another
    # process that shared the same library pages exits (seen on a shared machine: +56 MB USS,
    # -4 MB dirty). Copies made by writes - what a verdict is about - are always dirty.
    m_growth = float(main["dirty_growth_mb"].iloc[0]) if main is not None and len(main) else None
    process_workers = has_worker_processes(spec["mode"], spec["workers"])
    measured = w_growth if process_workers else m_growth
    threshold = float(spec["verdict"]["growth_threshold_mb"])
    verdict = None if measured is None else ("growing" if measured > threshold else "flat")
    expect = spec.get("expect")
    items = int(meta.get("items") or 0)
    sum_rss_peak = _peak(series.sum_rss(samples))
    pss_peak = _peak(rounds["total_pss_mb"])
    # Items each worker process served: workers recreated every epoch (or by a recorded job)
    # share the items between all their generations, not only the workers alive at once.
    processes = int(growth.loc[growth["worker"] >= 0, "pid"].nunique()) if growth is not None else 0
    per_worker_items = items / max(processes, spec["workers"], 1) / 1000
    summary = RunSummary(
        run_id=meta["run_id"],
        backend=spec["backend"],
        mode=spec["mode"],
        workers=spec["workers"],
        status=meta["status"],
        error=_error_text(meta.get("error")),
        items=items,
        items_per_s=_rate(progress, milestones.get("warm"), milestones.get("done")),
        time_to_first_batch_s=_ttfb(milestones),
        duration_s=float(meta.get("elapsed_s") or 0.0),
        total_pss_start_mb=_first(window["total_pss_mb"]),
        total_pss_peak_mb=pss_peak,
        total_pss_end_mb=_last(window["total_pss_mb"]),
        sum_rss_peak_mb=sum_rss_peak,
        rss_overcount_mb=(sum_rss_peak - pss_peak)
        if sum_rss_peak is not None and pss_peak is not None
        else None,
        worker_uss_start_mb=_mean(workers["uss_start_mb"]) if workers is not None and len(workers) else None,
        worker_uss_growth_mb=w_growth,
        worker_uss_growth_max_mb=float(workers["growth_mb"].max())
        if workers is not None and len(workers)
        else None,
        main_uss_growth_mb=m_growth,
        growth_per_1k_items_per_worker_mb=(measured / per_worker_items)
        if measured is not None and per_worker_items
        else None,
        growth_threshold_mb=threshold,
        verdict=verdict,
        expectation=expect,
        expectation_met=None if expect is None or verdict is None else expect == verdict,
        explanation="",
        sampler_cpu_share=_sampler_share(meta),
        # As the run's own process saw it (its imports can re-enable the GIL); else the session's.
        gil_enabled=(meta.get("dataset_info") or {}).get("gil_enabled", gil_enabled),
    )
    summary = replace(summary, **_workload_figures(meta, samples, start, end, summary.items_per_s))
    if tree_analysis.is_recorded(meta):
        # A job memprobe did not write: each process over the window that fits what it is.
        return tree_verdict.summarize_tree(summary, meta, samples, progress)
    return _explained(summary, process_workers)


def _workload_figures(
    meta: dict, samples: pd.DataFrame, start: float | None, end: float | None, rate: float | None
) -> dict[str, Any]:
    info = meta.get("dataset_info") or {}
    out: dict[str, Any] = {
        "workload": meta["spec"].get("workload", "records"),
        "decoder_backend": info.get("decoder_backend"),
        "cpu_cores_used": cpu_cores_used(samples, start, end),
    }
    if rate is not None and info.get("bytes_per_item"):
        out["mb_per_s"] = rate * info["bytes_per_item"] / 1e6
    if rate is not None and info.get("pixels_per_item"):
        out["megapixels_per_s"] = rate * info["pixels_per_item"] / 1e6
    if rate is not None and start is not None and end is not None:
        out.update(per_item_costs(samples, start, end, rate * (end - start)))
    return out


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


def item_noun(workload: str) -> str:
    """What a run's loader yields, in words: images for the decode workload, items otherwise."""
    return "images" if workload == "decode" else "items"


def _explained(s: RunSummary, process_workers: bool) -> RunSummary:
    if s.verdict is None:
        why = f"no verdict: the run ended {s.status} before its iteration window closed"
        return replace(s, explanation=why + (f" ({s.error})" if s.error else ""))
    who = (
        "the main process's private dirty memory"
        if not process_workers
        else "the worker's private memory (USS)"
        if s.workers == 1
        else f"each of {s.workers} workers' private memory (USS)"
    )
    grew = s.worker_uss_growth_mb if process_workers else s.main_uss_growth_mb
    noun = item_noun(s.workload)
    over = f"over {s.items:,} {noun}" if s.items else f"over the run ({noun} not counted)"
    mean = " (mean)" if process_workers and s.workers > 1 else ""
    parts = [
        (
            f"{s.verdict}: {who} grew {grew:+.1f} MB{mean} {over}, "
            f"against a threshold of {s.growth_threshold_mb:g} MB"
        )
    ]
    if s.growth_per_1k_items_per_worker_mb is not None:
        parts.append(f"{s.growth_per_1k_items_per_worker_mb:.3f} MB per 1,000 {noun} per worker")
    if s.rss_overcount_mb is not None and s.total_pss_peak_mb:
        ratio = (s.sum_rss_peak_mb or 0) / s.total_pss_peak_mb
        parts.append(
            f"summing RSS would have reported {s.sum_rss_peak_mb:,.0f} MB at peak, "
            f"{s.rss_overcount_mb:,.0f} MB ({ratio:.2f}x) more than the real total (PSS) "
            f"of {s.total_pss_peak_mb:,.0f} MB"
        )
    return replace(s, explanation="; ".join(parts))


def window_bounds(samples: pd.DataFrame, milestones: dict) -> tuple[float | None, float | None]:
    """Start and end time of a run's growth window (the PSS rounds forced at warm and done)."""
    return _window(pss_rounds(samples), milestones.get("warm"), milestones.get("done"))


def _window(
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


def _rate(progress: pd.DataFrame, start: float | None, end: float | None) -> float | None:
    """Items/s between the warm point and the end (pauses for PSS rounds are negligible)."""
    if progress.empty or start is None or end is None or end <= start:
        return None
    before = progress[progress["t"] <= start + 1e-6]
    done_items = float(progress["items"].max())
    first = float(before["items"].max()) if len(before) else 0.0
    return (done_items - first) / (end - start)


def _ttfb(milestones: dict) -> float | None:
    if "first_batch" not in milestones or "iter_start" not in milestones:
        return None
    return milestones["first_batch"] - milestones["iter_start"]


def _error_text(error: dict | None) -> str | None:
    return None if not error else f"{error.get('type')}: {error.get('message')}"


def _sampler_share(meta: dict) -> float | None:
    cpu, elapsed = meta.get("sampler", {}).get("cpu_s"), meta.get("elapsed_s")
    return cpu / elapsed if cpu is not None and elapsed else None


def _mean(s: pd.Series) -> float | None:
    return float(s.mean()) if len(s) else None


def _first(s: pd.Series) -> float | None:
    return _known(s.iloc[0]) if len(s) else None


def _last(s: pd.Series) -> float | None:
    return _known(s.iloc[-1]) if len(s) else None


def _peak(s: pd.Series) -> float | None:
    """The largest known value (a total that could not be taken is no peak)."""
    return float(s.max()) if s.notna().any() else None


def _known(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


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
