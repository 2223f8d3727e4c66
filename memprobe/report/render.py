"""Render a results folder into one self-contained HTML page (plotly.js inlined, works offline).

The page is a pure function of the saved results: ``render(ResultSet.load(root))``. Words and
tables come from ``content``, charts from ``figures``; the jinja templates only lay them out
(autoescaped) and the chart data is injected once, as JSON, for the page's script to draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from memprobe.core import cures
from memprobe.core.scaling import contention_note, scaling
from memprobe.core.summary import RunSummary, window_bounds
from memprobe.core.system import run_limit
from memprobe.core.vocabulary import THREAD_NAME_PREFIX
from memprobe.report import across, advice, attribution, content, figures, recorded, session, workers
from memprobe.report import format as fmt
from memprobe.report.chart import DASHES, MAX_POINTS, color_styles, name_items_axis, styles
from memprobe.report.embed import plotly_js, script_json
from memprobe.results.files import write_text_atomic
from memprobe.results.folder import ResultSet

if TYPE_CHECKING:
    from memprobe.analysis.runs import Analysed
    from memprobe.analysis.workers import Sweep


@dataclass(frozen=True)
class RunView:
    """Everything the page shows about one run."""

    summary: RunSummary
    meta: dict
    anchor: str
    label: str
    headline: str
    tone: str
    facts: list[tuple[str, str]]
    charts: list[dict]
    traceback: str | None
    has_samples: bool


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("memprobe.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt.FILTERS)
    env.globals.update(
        growth_text=content.growth_text,
        run_label=content.run_label,
        first_line=content.first_line,
        badge_text=content.badge_text,
        tone=content.tone,
        upfront_copy=content.upfront_copy,
        rate_text=content.rate_text,
        cost_text=content.cost_text,
        attribution_view=attribution.view,
        thread_name_prefix=THREAD_NAME_PREFIX,
    )
    return env


def anchors(summaries: list[RunSummary]) -> dict[str, str]:
    return {s.run_id: f"run-{i}-{content.slug(s.run_id)}" for i, s in enumerate(summaries)}


def factories(results: ResultSet) -> dict[str, dict]:
    """Each run's dataset factory where it is a user's (``{"factory", "kwargs"}``): what its
    pytest guard profiles."""
    out = {}
    for meta in results.metas:
        factory = (meta.get("spec") or {}).get("factory")
        if isinstance(factory, dict) and factory.get("factory"):
            out[meta["run_id"]] = factory
    return out


def run_views(results: ResultSet, summaries: list[RunSummary], max_points: int) -> list[RunView]:
    ids = anchors(summaries)
    cpu_count = (results.manifest.get("environment") or {}).get("cpu_count")
    limit_mb = run_limit(results.manifest)[0]
    views = []
    for i, (meta, s) in enumerate(zip(results.metas, summaries, strict=True)):
        samples = results.run_table("samples", s.run_id)
        milestones = meta.get("milestones") or {}
        start, end = window_bounds(samples, milestones) if not samples.empty else (None, None)
        charts = figures.run_charts(
            f"c{i}",
            samples,
            results.run_table("progress", s.run_id),
            results.run_table("system", s.run_id),
            figures.Milestones(milestones, (start, end) if start is not None and end is not None else None),
            max_points=max_points,
            threads=results.run_table("threads", s.run_id),
            decode=figures.DecodeInfo.from_meta(meta),
            cpu_count=cpu_count if isinstance(cpu_count, int) else None,
            gil_enabled=s.gil_enabled,
            limit_mb=limit_mb,
        )
        error = meta.get("error") or {}
        views.append(
            RunView(
                s,
                meta,
                ids[s.run_id],
                content.run_label(s),
                content.headline(s, meta),
                content.tone(s),
                content.run_facts(s, meta),
                charts,
                error.get("traceback"),
                not samples.empty,
            )
        )
    return views


def all_runs_chart(results: ResultSet, summaries: list[RunSummary], max_points: int) -> dict | None:
    # A colour per run (runs of one backend at several worker counts drew the same line), a dash per mode.
    colors = color_styles([s.run_id for s in summaries])
    dashes = styles([s.mode for s in summaries], DASHES)
    lines = [
        across.RunLine(
            content.run_label(s),
            results.run_table("samples", s.run_id),
            results.run_table("progress", s.run_id),
            colors[s.run_id],
            dashes[s.mode],
        )
        for s in summaries
    ]
    limit_mb, limit_of = run_limit(results.manifest)
    chart = across.chart_runs_pss(
        "c-all",
        f"Every run's total PSS over {page_noun(summaries)} fetched",
        lines,
        max_points=max_points,
        limit_mb=limit_mb,
        limit_of=limit_of,
    )
    return name_items_axis([chart], page_noun(summaries))[0] if chart is not None else None


def page_noun(summaries: list[RunSummary]) -> str:
    """'images' on a page of decode runs only, else 'items'."""
    return "images" if summaries and all(s.workload == "decode" for s in summaries) else "items"


def bar_charts(summaries: list[RunSummary], sweep: Sweep | None = None) -> list[dict]:
    """Throughput and peak memory per backend x mode x workers, side by side (ok runs only);
    where runs were repeated, a bar per configuration at the median of its runs (``sweep``'s)."""
    rows = []
    by_id = {s.run_id: s for s in summaries}
    for s in summaries:
        if s.status != "ok":
            continue
        extra = (
            f"{s.mb_per_s:,.1f} MB/s encoded" if s.mb_per_s else f"{(s.cpu_cores_used or 0):.2f} cores used"
        )
        rows.append(
            {
                "label": content.backend_label(s),
                "mode": s.mode,
                "workers": s.workers,
                "items_per_s": s.items_per_s,
                "pss": s.total_pss_peak_mb,
                "extra": extra,
            }
        )
    if sweep is not None and sweep.repeated:
        rows = [
            {
                "label": content.backend_label(by_id[g.run_ids[0]]),
                "mode": g.mode,
                "workers": g.workers,
                "items_per_s": g.median("items_per_s"),
                "pss": g.median("total_pss_peak_mb"),
                "extra": f"median of {len(g.run_ids)} runs",
            }
            for g in sweep.groups
        ]
    if len(rows) < 2:
        return []
    unit = f"{page_noun(summaries)}/s"
    by = "decoder" if unit == "images/s" else "backend"
    charts = [
        across.chart_bars(
            "c-bars-rate",
            f"Throughput ({unit}) per {by}, mode and worker count",
            rows,
            "items_per_s",
            unit,
            "%{y:,.0f} " + unit + " (%{customdata})",
            xtitle=by,
        ),
        across.chart_bars(
            "c-bars-pss",
            f"Peak total PSS per {by}, mode and worker count",
            rows,
            "pss",
            "peak total PSS (MB)",
            "%{y:,.0f} MB",
            xtitle=by,
        ),
    ]
    return [c for c in charts if c is not None]


def context(results: ResultSet, max_points: int, analysed: list[Analysed]) -> dict[str, Any]:
    summaries = [a.summary for a in analysed]
    views = run_views(results, summaries, max_points)
    ids = anchors(summaries)
    overview_chart = all_runs_chart(results, summaries, max_points)
    sweep = getattr(analysed, "sweep", None)  # analyse_all's: the repeats and the worker-count frontier
    bars = bar_charts(summaries, sweep)
    groups = scaling(summaries)
    scaling_chart = across.chart_scaling("c-scaling", groups, page_noun(summaries))
    charts = [c for v in views for c in v.charts] + ([overview_chart] if overview_chart else []) + bars
    charts += [scaling_chart] if scaling_chart else []
    workers_chart = workers.chart_workers("c-workers", sweep, page_noun(summaries)) if sweep else None
    charts += [workers_chart] if workers_chart else []
    manifest = results.manifest
    return {
        "title": f"memprobe · {manifest.get('scenario') or results.root.name}",
        "manifest": manifest,
        "scenario_name": manifest.get("scenario") or results.root.name,
        "description": manifest.get("description") or "",
        "runs": views,
        "overview": content.overview(summaries),
        "banner": session.banner(manifest, summaries),
        "matrices": content.matrices(summaries, ids, run_limit(manifest)),
        "limit": run_limit(manifest),
        "advice": advice.advice(summaries, ids),
        "cause_groups": advice.cause_groups(summaries, ids, factories(results)),
        "unsplit": cures.UNSPLIT,
        "nothing_to_fix": content.nothing_to_fix(summaries),
        "overview_chart": overview_chart,
        "bar_charts": bars,
        "scaling_chart": scaling_chart,
        "contention_note": contention_note(groups),
        "workers_chart": workers_chart,
        "workers_sentences": sweep.sentences() if sweep else [],
        "workers_rows": workers.group_rows(sweep) if sweep and (workers_chart or sweep.repeated) else [],
        "workers_repeated": bool(sweep and sweep.repeated),
        "not_in_bars": content.not_in_bars(summaries) if bars else [],
        "cost_rows": content.cost_rows(summaries, ids),
        "churn_note": content.churn_note(summaries),
        "churn_ids": set(content.churning(summaries)),
        "noun": page_noun(summaries),
        "decode": any(s.workload == "decode" for s in summaries),
        "env_rows": session.environment_rows(manifest),
        "scenario_text": results.scenario_text,
        "failed": [v for v in views if v.summary.status != "ok"],
        "threshold": max((s.growth_threshold_mb for s in summaries), default=50.0),
        "downsampled": any(c["downsampled"] for c in charts),
        "max_points": max_points,
        "env": manifest.get("environment") or {},
        "duration": _duration(manifest),
        "data_json": script_json({"charts": charts}),
        "chart_count": len(charts),
        "plotly_js": plotly_js(),
    }


def _duration(manifest: dict) -> float | None:
    start, end = manifest.get("started"), manifest.get("finished")
    return end - start if fmt.is_num(start) and fmt.is_num(end) else None


def render(results: ResultSet, analysed: list[Analysed], *, max_points: int = MAX_POINTS) -> str:
    """The report page of loaded results and their analyses (:func:`memprobe.analysis.runs.analyse_all`:
    the page computes no figure), as one HTML string: a recorded job (record / watch) gets its
    own page."""
    if recorded.is_recorded(results):
        job = analysed[0].recorded
        assert job is not None  # a record folder: its run is a recorded job
        return environment().get_template("record.html").render(**recorded.context(results, max_points, job))
    return environment().get_template("report.html").render(**context(results, max_points, analysed))


def write_report(root: Path, results: ResultSet, analysed: list[Analysed]) -> Path:
    """Write ``root/report.html`` from the folder's loaded results and their analyses
    (:func:`render`); returns its path."""
    return write_text_atomic(Path(root) / "report.html", render(results, analysed))
