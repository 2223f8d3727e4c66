"""The analysis of a scenario run (``memprobe run``, ``profile()``): from saved samples to figures
and a verdict, pure functions of the results. A recorded job (``record`` / ``watch``) has its own
(:mod:`memprobe.analysis.recorded`); :mod:`memprobe.analysis` chooses by the run's kind.

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
* time per 100 batches: 100 x the loader's batch size ÷ items/s over the iteration window (the
  course exercise times 100 batches; this is that time at the run's steady rate).
* verdict: ``growing`` when the growth (worker USS for process workers; the main process's
  Private_Dirty for thread and single-process runs) exceeds the scenario's ``growth_threshold_mb``.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from memprobe.analysis.attribution import attribution
from memprobe.core.summary import RunSummary, job_figures, per_1k_items_per_worker
from memprobe.core.vocabulary import MAIN, has_worker_processes, item_noun


def per_process_growth(
    samples: pd.DataFrame, start: float, end: float, warms: list[float] | None = None
) -> pd.DataFrame:
    """USS at the first and last PSS sample of each process inside [start, end]; a worker of a
    later generation (first seen after ``start``) from its generation's warm, the first of
    ``warms`` (every later generation's) from its first sample on."""
    w = samples[(samples["tier"] == "pss") & (samples["t"] >= start) & (samples["t"] <= end)]
    if w.empty:
        return pd.DataFrame(columns=["pid", "role", "worker", "uss_start_mb", "uss_end_mb", "growth_mb"])
    # A worker counts from when it is one: a spawn or forkserver worker first starts and unpickles
    # its dataset under another role (its start-up copy, not growth while iterating).
    w = w[(w["worker"] >= 0) | ~w["pid"].isin(w.loc[w["worker"] >= 0, "pid"].unique())]
    if warms:
        # A later generation's spawn worker is a worker (its role) while it still unpickles its
        # dataset: read then at 101 MB of 152, its start-up counted as +45-50 MB of growth in a
        # job that grew nothing. From its generation's warm, every worker holds its dataset.
        first = samples.loc[samples["worker"] >= 0].groupby("pid")["t"].min()
        marks = sorted([start, *warms])  # the first generation's warm is the window's start
        own_start = first.map(lambda t: next((m for m in marks if m >= t), None)).dropna()
        late = w["pid"].map(own_start)
        w = w[late.isna() | (w["t"] >= late.fillna(0.0))]  # its forced round comes just after it
    w = w.sort_values("t")
    dirty = "private_dirty_mb" if "private_dirty_mb" in w else "uss_mb"
    if "rss_anon_mb" not in w:
        w = w.assign(rss_anon_mb=float("nan"))
    g = w.groupby("pid")
    out = pd.DataFrame(
        {
            "role": g["role"].last(),
            "worker": g["worker"].last(),
            "uss_start_mb": g["uss_mb"].first(),
            "uss_end_mb": g["uss_mb"].last(),
            "dirty_start_mb": g[dirty].first(),
            "dirty_end_mb": g[dirty].last(),
            "anon_start_mb": g["rss_anon_mb"].first(),
            "anon_end_mb": g["rss_anon_mb"].last(),
            "samples": g.size(),
        }
    ).reset_index()
    out["growth_mb"] = out["uss_end_mb"] - out["uss_start_mb"]
    out["dirty_growth_mb"] = out["dirty_end_mb"] - out["dirty_start_mb"]
    # Memory a worker allocated over the window, at least: the rise of its anonymous RSS (a
    # copy-on-access fault replaces a shared anonymous page by a private one, RSS unchanged).
    out["allocated_mb"] = (out["anon_end_mb"] - out["anon_start_mb"]).clip(lower=0.0)
    return out


def summarize(
    meta: dict,
    samples: pd.DataFrame,
    progress: pd.DataFrame,
    system: pd.DataFrame,
    *,
    gil_enabled: bool | None = None,
) -> RunSummary:
    """The figures and verdict for one scenario run (its meta's ``spec``: backend, mode, workers,
    verdict threshold and expectation)."""
    spec = meta["spec"]
    job = job_figures(meta, samples, progress, gil_enabled)
    start, end = job.start, job.end
    warms = [float(t) for t in meta.get("epoch_warms") or []]
    if not warms and "epoch_warm" in meta.get("milestones", {}):  # older metas: the first only
        warms = [float(meta["milestones"]["epoch_warm"])]
    growth = per_process_growth(samples, start, end, warms) if start is not None and end is not None else None
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
    items = job.fields["items"]
    # Items each worker process served: workers recreated every epoch share the items between
    # all their generations, not only the workers alive at once.
    processes = int(growth.loc[growth["worker"] >= 0, "pid"].nunique()) if growth is not None else 0
    batch = (spec.get("loader") or {}).get("batch_size")
    rate = job.fields["items_per_s"]
    summary = RunSummary(
        **job.fields,
        backend=spec["backend"],
        mode=spec["mode"],
        workers=spec["workers"],
        worker_uss_start_mb=_mean(workers["uss_start_mb"]) if workers is not None and len(workers) else None,
        worker_uss_growth_mb=w_growth,
        worker_uss_growth_max_mb=float(workers["growth_mb"].max())
        if workers is not None and len(workers)
        else None,
        worker_allocated_mb=_mean(workers["allocated_mb"].dropna())
        if workers is not None and len(workers) and workers["allocated_mb"].notna().all()
        else None,
        main_uss_growth_mb=m_growth,
        growth_per_1k_items_per_worker_mb=per_1k_items_per_worker(
            measured, items, max(processes, spec["workers"])
        ),
        growth_threshold_mb=threshold,
        verdict=verdict,
        expectation=expect,
        expectation_met=None if expect is None or verdict is None else expect == verdict,
        explanation="",
        workload=spec.get("workload", "records"),
        batch_size=batch,
        time_per_100_batches_s=100 * batch / rate if batch and rate else None,
        attribution=attribution(meta),
    )
    return _explained(summary, process_workers)


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


def _mean(s: pd.Series) -> float | None:
    return float(s.mean()) if len(s) else None
