"""Two results folders side by side (e.g. before and after a fix), as one self-contained page.

Runs are matched by (backend, mode, workers), in run order when a folder holds the same key
twice; runs without a partner are listed. A change counts ("better"/"worse", highlighted) when
it is beyond both an absolute and a relative tolerance, so sampling noise stays plain.

Two recordings (``memprobe record`` / ``watch``) get a page of their own
(:mod:`memprobe.report.compare_recorded`); a recording and a scenario run are refused in one
line: they measured different things (a user's job, memprobe's loader on a dataset).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memprobe.core.errors import UsageError
from memprobe.core.safe_read import display_path
from memprobe.core.summary import RunSummary
from memprobe.report import across, content, session
from memprobe.report import format as fmt
from memprobe.report.chart import SERIES_COLORS, styles
from memprobe.report.deltas import Delta, Metric, delta, delta_text, env_rows, verdict_change
from memprobe.report.render import environment, plotly_js, script_json
from memprobe.results.folder import ResultSet
from memprobe.results.upgrade import RECORDED_KINDS, is_recorded

if TYPE_CHECKING:
    from memprobe.analysis.runs import Analysed

Key = tuple[str, str, int]
METRICS = (
    Metric("peak total PSS", lambda s: s.total_pss_peak_mb, fmt.mb, True, 5.0, 0.05),
    # Shrinking is not better than staying flat: -19 MB -> -4 MB is no change, not "worse".
    Metric("growth", content.measured_growth, fmt.signed_mb, True, 5.0, 0.10, floor=0.0),
    Metric("items/s", lambda s: s.items_per_s, fmt.rate_short, False, 0.0, 0.10),
    Metric("time to first batch", lambda s: s.time_to_first_batch_s, fmt.seconds, True, 0.05, 0.20),
)


@dataclass(frozen=True)
class Pair:
    key: Key
    a: RunSummary
    b: RunSummary
    deltas: list[tuple[Metric, Delta]]
    verdict: str  # better | worse | same

    @property
    def label(self) -> str:
        return content.run_label(self.b)


def key(s: RunSummary) -> Key:
    return (s.backend, s.mode, s.workers)


def match(a: list[RunSummary], b: list[RunSummary]) -> tuple[list[Pair], list[RunSummary], list[RunSummary]]:
    """Pairs in A's run order, then the runs only in A and only in B."""
    left = list(b)
    pairs, only_a = [], []
    for sa in a:
        sb = next((s for s in left if key(s) == key(sa)), None)
        if sb is None:
            only_a.append(sa)
            continue
        left.remove(sb)
        pairs.append(Pair(key(sa), sa, sb, [(m, delta(m, sa, sb)) for m in METRICS], verdict_change(sa, sb)))
    return pairs, only_a, left


def pair_sentence(p: Pair) -> str:
    """One line per pair: the verdict and the peak total PSS, before and after."""
    peak = {m.name: d for m, d in p.deltas}["peak total PSS"]
    va, vb = p.a.verdict or p.a.status, p.b.verdict or p.b.status
    verdict = f"{va} → {vb}" if va != vb else f"still {vb}"
    change = "" if peak.diff is None else f" ({fmt.signed_mb(peak.diff)}, {fmt.percent(peak.rel)})"
    growth = f"; growth {content.growth_text(p.a)} → {content.growth_text(p.b)}"
    return (
        f"{p.label}: {verdict}; peak total PSS {fmt.mb(peak.a)} → {fmt.mb(peak.b)}{change}"
        f"{growth if p.a.verdict or p.b.verdict else ''}."
    )


def compare_chart(
    pairs: list[Pair],
    only_a: list[RunSummary],
    only_b: list[RunSummary],
    ra: ResultSet,
    rb: ResultSet,
    names: tuple[str, str],
) -> dict | None:
    """Total PSS over items fetched: A dashed, B solid, one colour per matched key (every run
    when nothing matched)."""
    colors = styles([content.run_label(s) for s in [*(p.b for p in pairs), *only_a, *only_b]], SERIES_COLORS)
    lines = []
    sides = (
        (("A", ra, [p.a for p in pairs], "dash"), ("B", rb, [p.b for p in pairs], "solid"))
        if pairs
        else (("A", ra, only_a, "dash"), ("B", rb, only_b, "solid"))
    )
    for side, results, runs, dash in sides:
        for s in runs:
            label = content.run_label(s)
            lines.append(
                across.RunLine(
                    f"{side} · {label}",
                    results.run_table("samples", s.run_id),
                    results.run_table("progress", s.run_id),
                    colors[label],
                    dash,
                    label,
                )
            )
    title = f"Total PSS over items fetched: A ({names[0]}) dashed, B ({names[1]}) solid"
    return across.chart_runs_pss("c-compare", title, lines)


def context(
    ra: ResultSet, rb: ResultSet, sa: list[RunSummary], sb: list[RunSummary], names: tuple[str, str]
) -> dict[str, Any]:
    pairs, only_a, only_b = match(sa, sb)
    chart = compare_chart(pairs, only_a, only_b, ra, rb, names)
    charts = [chart] if chart else []
    banners = [(side, session.banner(r.manifest, s)) for side, r, s in (("A", ra, sa), ("B", rb, sb))]
    return {
        "title": f"memprobe compare · {names[0]} vs {names[1]}",
        "names": names,
        "roots": (str(ra.root), str(rb.root)),
        "manifests": (ra.manifest, rb.manifest),
        "pairs": pairs,
        "only_a": only_a,
        "only_b": only_b,
        "metrics": METRICS,
        "sentences": [(p, pair_sentence(p)) for p in pairs],
        "banners": [(side, b) for side, b in banners if b],
        "env_rows": env_rows(ra.manifest, rb.manifest),
        "scenarios": (ra.scenario_text, rb.scenario_text),
        "scenario_diff": scenario_diff(ra, rb, names),
        "chart": chart,
        "chart_count": len(charts),
        "env": rb.manifest.get("environment") or {},
        "data_json": script_json({"charts": charts}),
        "plotly_js": plotly_js(),
        "delta_text": delta_text,
    }


def scenario_diff(ra: ResultSet, rb: ResultSet, names: tuple[str, str]) -> str | None:
    """A unified diff of the two scenario files, or None when they are the same."""
    a, b = ra.scenario_text or "", rb.scenario_text or ""
    if a == b:
        return None
    lines = difflib.unified_diff(
        a.splitlines(), b.splitlines(), f"A: {names[0]}", f"B: {names[1]}", lineterm=""
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class Compared:
    """The page, and what the terminal says of it besides its path (two recordings: each one's
    command, the figures side by side, what changed; nothing for scenario runs)."""

    page: str
    lines: list[str]


def is_recordings(results: ResultSet) -> bool:
    """A results folder of a recorded job (``memprobe record`` / ``watch``), not of scenario runs."""
    if results.metas:
        return all(is_recorded(m) for m in results.metas)
    return results.manifest.get("kind") in RECORDED_KINDS


KIND_WORDS = {
    True: "a recording, of memprobe record or watch",
    False: "scenario runs, of memprobe run or profile()",
}


def compared(
    ra: ResultSet, aa: list[Analysed], rb: ResultSet, ab: list[Analysed], names: tuple[str, str] | None = None
) -> Compared:
    """Two loaded result sets and their analyses (:func:`memprobe.analysis.runs.analyse_all`)
    compared: scenario runs matched by backend, mode and workers; two recordings side by side
    (:mod:`memprobe.report.compare_recorded`); a recording and scenario runs refused
    (:class:`~memprobe.core.errors.UsageError`, naming both folders' kinds)."""
    from memprobe.report import compare_recorded

    names = names or (ra.root.name, rb.root.name)
    recorded = is_recordings(ra), is_recordings(rb)
    if recorded[0] != recorded[1]:
        raise UsageError(
            f"cannot compare {display_path(ra.root)} ({KIND_WORDS[recorded[0]]}) with {display_path(rb.root)} "
            f"({KIND_WORDS[recorded[1]]}): they measured different things; allowed: two recordings, or two "
            "folders of scenario runs"
        )
    if not recorded[0]:
        sa, sb = [x.summary for x in aa], [x.summary for x in ab]
        return Compared(
            environment().get_template("compare.html").render(**context(ra, rb, sa, sb, names)), []
        )
    for r in (ra, rb):
        if len(r.metas) != 1:
            raise UsageError(
                f"{display_path(r.root)}: a recording with {len(r.metas)} runs; allowed: a recording of one "
                "job (memprobe record or watch writes one run)"
            )
    a, b = compare_recorded.recording(ra, aa[0], names[0]), compare_recorded.recording(rb, ab[0], names[1])
    page = environment().get_template("compare_record.html").render(**compare_recorded.context(a, b))
    return Compared(page, compare_recorded.terminal_lines(a, b))
