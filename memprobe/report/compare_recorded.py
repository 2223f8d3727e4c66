"""Two recordings side by side (``memprobe compare`` of two ``memprobe record`` / ``watch``
results folders, e.g. a job before and after a fix), as one page and a few lines for the terminal.

A recording's folder holds one run, named after its command: the two are compared whatever their
names (``train.py`` and ``train_fixed.py``). Each figure is the recording's own summary's
(:mod:`memprobe.analysis.recorded`): the total PSS peak, each parent's own growth, the workers'
growth, the verdicts and the causes they name; what changed is said in one sentence. Total PSS
is drawn against the seconds since each command started, and against the items counted as well
where both counted some (``memprobe.mark()``); a recording without marks has no items axis.
A recording is never compared with a scenario run: :func:`memprobe.report.compare.compared`
refuses the pair in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from memprobe.core import cures
from memprobe.core.series import total_of
from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import FORK, PARENT_KINDS
from memprobe.report import across, session
from memprobe.report import format as fmt
from memprobe.report.chart import SERIES_COLORS
from memprobe.report.content import badge_text
from memprobe.report.deltas import Delta, Metric, delta, delta_text, env_rows, verdict_change
from memprobe.report.embed import plotly_js, script_json
from memprobe.results.folder import ResultSet

if TYPE_CHECKING:
    from memprobe.analysis.recorded import RecordedAnalysis
    from memprobe.analysis.runs import Analysed

TIME_TITLE = "seconds since the command started"


@dataclass(frozen=True)
class Recording:
    """One side: the folder's name, its one run's meta, summary and analysis."""

    name: str
    root: str
    manifest: dict
    meta: dict
    summary: RunSummary
    job: RecordedAnalysis
    progress: pd.DataFrame

    @property
    def command(self) -> str:
        command = self.meta.get("command") or []
        return " ".join(map(str, command)) if isinstance(command, list) else str(command)

    @property
    def counted_items(self) -> bool:
        """Whether the job counted items (``memprobe.mark()``): only then has it an items axis."""
        return bool(self.summary.items) and not self.progress.empty


def recording(results: ResultSet, analysed: Analysed, name: str) -> Recording:
    """A recording's folder and its analysis, as the page compares them."""
    assert analysed.recorded is not None  # compare.is_recordings: a recorded job's analysis
    meta = results.metas[0]
    return Recording(
        name,
        str(results.root),
        results.manifest,
        meta,
        analysed.summary,
        analysed.recorded,
        results.run_table("progress", meta["run_id"]),
    )


# -- the figures side by side -----------------------------------------------------------------------


TOTAL_PEAK = Metric("total PSS peak", lambda s: s.total_pss_peak_mb, fmt.mb, True, 5.0, 0.05)
# Shrinking is not better than staying flat: -19 MB -> -4 MB is no change, not "worse".
WORKER_GROWTH = Metric(
    "each worker's own growth (mean)", lambda s: s.worker_uss_growth_mb, fmt.signed_mb, True, 5.0, 0.10, 0.0
)
WORKER_MAX = Metric(
    "the most a worker grew", lambda s: s.worker_uss_growth_max_mb, fmt.signed_mb, True, 5.0, 0.10, 0.0
)
MAIN_GROWTH = Metric(
    "the main process's own growth", lambda s: s.main_uss_growth_mb, fmt.signed_mb, True, 5.0, 0.10, 0.0
)
WORKER_START = Metric(
    "a worker's memory at its start", lambda s: s.worker_uss_start_mb, fmt.mb, True, 5.0, 0.10
)
ITEMS_RATE = Metric("items/s", lambda s: s.items_per_s, fmt.rate_short, False, 0.0, 0.10)


@dataclass(frozen=True)
class Row:
    """One figure of both recordings: A, B and the change (B − A), its tone where it has one."""

    name: str
    a: str
    b: str
    change: str
    tone: str  # better | worse | same | na


def parent_growth(s: RunSummary, role: str) -> float | None:
    """The own growth of the parent process ``role`` (its row of the summary's process table)."""
    row = next((p for p in parents(s) if p["role"] == role), None)
    return None if row is None else row.get("growth_mb")


def parents(s: RunSummary) -> list[dict]:
    """The judged parents (main process, ranks) of the summary's process table, in its order."""
    return [
        p
        for p in s.processes or []
        if p.get("kind") in PARENT_KINDS and p.get("judged") and p.get("growth_mb") is not None
    ]


def role_growth(role: str) -> Metric:
    """The own growth of the parent ``role`` (a rank) as a figure to compare."""

    def value(s: RunSummary) -> float | None:
        return parent_growth(s, role)

    return Metric(f"{role}'s own growth", value, fmt.signed_mb, True, 5.0, 0.10, 0.0)


def metrics(a: RunSummary, b: RunSummary) -> list[Metric]:
    """The figures both recordings are compared on: total PSS peak, each parent's own growth (the
    main process's, or each rank's by its role), the workers' growth, a worker's memory at its
    start where either did not fork, items/s where both counted items."""
    roles = list(dict.fromkeys(p["role"] for s in (a, b) for p in parents(s)))
    own = [MAIN_GROWTH] if len(roles) <= 1 else [role_growth(role) for role in roles]
    out = [TOTAL_PEAK, *own, WORKER_GROWTH, WORKER_MAX]
    if any(s.workers and s.mode != FORK for s in (a, b)):
        out.append(WORKER_START)
    if a.items and b.items:
        out.append(ITEMS_RATE)
    return out


def rows(a: RunSummary, b: RunSummary) -> list[tuple[Metric, Delta]]:
    """Each figure either recording has, with its change."""
    both = [(m, delta(m, a, b)) for m in metrics(a, b)]
    return [(m, d) for m, d in both if d.a is not None or d.b is not None]


def plain_rows(a: Recording, b: Recording) -> list[Row]:
    """Facts that are neither better nor worse: the workers at once, the start method, the length."""
    sa, sb = a.summary, b.summary

    def row(name: str, va: str, vb: str) -> Row:
        return Row(name, va, vb, "", "na")

    return [
        row("workers at once", str(sa.workers), str(sb.workers)),
        row("start method", sa.mode, sb.mode),
        row("recorded for", fmt.seconds(sa.duration_s), fmt.seconds(sb.duration_s)),
        row(
            "items counted", f"{sa.items:,}" if sa.items else "none", f"{sb.items:,}" if sb.items else "none"
        ),
    ]


def change_text(metric: Metric, d: Delta) -> str:
    """The change in the figure's unit; a growth's without a percentage (+45 MB -> +0.1 MB is
    not "−100%" of anything a user holds)."""
    if metric.show is fmt.signed_mb:
        return fmt.DASH if d.diff is None else fmt.signed_mb(d.diff)
    return delta_text(metric, d)


def figure_rows(a: Recording, b: Recording) -> list[Row]:
    measured = [
        Row(m.name, m.show(d.a), m.show(d.b), change_text(m, d), d.tone)
        for m, d in rows(a.summary, b.summary)
    ]
    return measured + plain_rows(a, b)


# -- what changed, in one sentence -------------------------------------------------------------------


# The figure each cause is measured by, and its words ("the workers' copy-on-access went from
# +144 MB each to +11 MB"); shared memory growing has none in the summary (the culprit says it).
CAUSE_FIGURES: dict[str, tuple[str, Metric, str]] = {
    cures.COPY_ON_ACCESS: ("copy-on-access", WORKER_GROWTH, " each"),
    cures.WORKERS_ALLOCATE: ("own allocations", WORKER_GROWTH, " each"),
    cures.MAIN_GROWS: ("the main process's own growth", MAIN_GROWTH, ""),
    cures.STARTUP_COPY: ("each worker's start-up copy", WORKER_START, ""),
}


def causes(s: RunSummary) -> list[str]:
    return cures.causes_of(s) if s.verdict == "growing" else []


def went(d: Delta, metric: Metric, each: str) -> str:
    """'went from +262 MB each to +1 MB'; 'stayed at +62 MB each' within the noise tolerance."""
    a, b = metric.show(d.a), metric.show(d.b)
    if d.tone == "same":
        return f"stayed at {b}{each}" if a == b else f"stayed about the same ({a}{each}, then {b})"
    return f"went from {a}{each} to {b}"


def what_changed(a: RunSummary, b: RunSummary) -> str:
    """'The workers' copy-on-access went from +144 MB each to +11 MB; total PSS peak 1,297 MB →
    568 MB (−729 MB, −56%); verdict growing → flat.': each cause either names, by its figure (the
    main process's growth, in a job of ranks the most any parent grew of its own); any other
    growth that changed beyond the noise; the peak; the verdicts."""
    named = [c for c in cures.CAUSES if c in causes(a) or c in causes(b)]
    parts: list[str] = []
    said: set[str] = set()
    workers = [CAUSE_FIGURES[c][0] for c in named if CAUSE_FIGURES.get(c, ("", None, ""))[1] is WORKER_GROWTH]
    if workers:
        d = delta(WORKER_GROWTH, a, b)
        if d.diff is not None:
            parts.append(f"the workers' {' and '.join(workers)} {went(d, WORKER_GROWTH, ' each')}")
            said.add(WORKER_GROWTH.name)
    for c in named:
        if c == cures.SHARED_GROWS:
            where = (
                "in both"
                if c in causes(a) and c in causes(b)
                else ("in A only" if c in causes(a) else "in B only")
            )
            parts.append(f"shared memory kept by the training loop (/dev/shm growing) is named {where}")
            continue
        words, metric, each = CAUSE_FIGURES[c]
        if metric.name in said:
            continue
        if metric is MAIN_GROWTH and len({p["role"] for s in (a, b) for p in parents(s)}) > 1:
            words = "the most a parent process grew of its own"
        d = delta(metric, a, b)
        if d.diff is not None:
            parts.append(f"{words} {went(d, metric, each)}")
            said.add(metric.name)
    for metric, d in rows(a, b):
        if (
            metric.name in said
            or metric in (TOTAL_PEAK, ITEMS_RATE, WORKER_MAX)
            or d.tone not in ("better", "worse")
        ):
            continue
        parts.append(f"{metric.name} {went(d, metric, ' each' if metric is WORKER_GROWTH else '')}")
    peak = delta(TOTAL_PEAK, a, b)
    change = "" if peak.diff is None else f" ({fmt.signed_mb(peak.diff)}, {fmt.percent(peak.rel)})"
    parts.append(f"total PSS peak {fmt.mb(peak.a)} → {fmt.mb(peak.b)}{change}")
    va, vb = badge_text(a), badge_text(b)
    parts.append(f"verdict {va} → {vb}" if va != vb else f"both {va}")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


# -- the chart ------------------------------------------------------------------------------------------


def chart(a: Recording, b: Recording) -> dict | None:
    """Total PSS (the analysis's, whose highest is the peak the table states) over the seconds
    since each command started, A dashed and B solid; with an items axis where both counted items."""
    colors = dict(zip(("A", "B"), SERIES_COLORS[:2], strict=True))
    lines = [
        across.RunLine(
            f"{side} · {r.name}",
            r.job.samples,
            r.progress,
            colors[side],
            dash,
            total=total_of(r.job.pss_by_role),
        )
        for side, r, dash in (("A", a, "dash"), ("B", b, "solid"))
    ]
    title = f"Total PSS: A ({a.name}) dashed, B ({b.name}) solid"
    spec = across.chart_runs_pss("c-compare", title, lines, axis="time")
    if spec is None:
        return None
    spec["layouts"]["time"]["xaxis"]["title"]["text"] = TIME_TITLE
    if a.counted_items and b.counted_items:
        items = across.chart_runs_pss("c-compare", title, lines, axis="items")
        if items is not None:
            spec["x"]["items"] = items["x"]["items"]
            spec["layouts"]["items"] = items["layouts"]["items"]
    return spec


# -- the page and the terminal ------------------------------------------------------------------------


def context(a: Recording, b: Recording) -> dict[str, Any]:
    spec = chart(a, b)
    charts = [spec] if spec else []
    banners = [(side, session.banner(r.manifest, [r.summary])) for side, r in (("A", a), ("B", b))]
    return {
        "title": f"memprobe compare · {a.name} vs {b.name}",
        "a": a,
        "b": b,
        "changed": what_changed(a.summary, b.summary),
        "verdict": verdict_change(a.summary, b.summary),
        "rows": figure_rows(a, b),
        "causes": [
            (side, r, [x.title for x in cures.advice_for(causes(r.summary))])
            for side, r in (("A", a), ("B", b))
        ],
        "banners": [(side, x) for side, x in banners if x],
        "env_rows": env_rows(a.manifest, b.manifest),
        "chart": spec,
        "items_axis": bool(spec and "items" in spec["x"]),
        "chart_count": len(charts),
        "env": b.manifest.get("environment") or {},
        "data_json": script_json({"charts": charts}),
        "plotly_js": plotly_js(),
    }


def terminal_lines(a: Recording, b: Recording) -> list[str]:
    """What ``memprobe compare`` prints for two recordings: each side's command, the figures side
    by side, the verdicts and causes, and what changed."""
    table = [("", f"A: {a.name}", f"B: {b.name}", "change (B − A)")]
    table += [(r.name, r.a, r.b, r.change) for r in figure_rows(a, b)]
    table.append(("verdict", badge_text(a.summary), badge_text(b.summary), ""))
    table.append(
        (
            "causes",
            ", ".join(causes(a.summary)) or fmt.DASH,
            ", ".join(causes(b.summary)) or fmt.DASH,
            "",
        )
    )
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = [f"A: {a.name}: {a.command}", f"B: {b.name}: {b.command}", ""]
    lines += [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    ]
    return [*lines, "", f"what changed: {what_changed(a.summary, b.summary)}"]
