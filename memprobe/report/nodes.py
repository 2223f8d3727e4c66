"""The page of a job of several nodes (``memprobe report JOBDIR``, :mod:`memprobe.results.job`):
the culprit across nodes in words, every node's total memory against its own memory or limit,
the ranks of all nodes on one wall-clock timeline (the clock offset between nodes stated), a
table per node and per rank, each node's projection and its own per-process table. A node
whose folder is missing or incomplete is named and the rest still reported. The pieces are the
record page's (:mod:`memprobe.report.recorded`, :mod:`memprobe.report.record_tables`); every
string from a folder (host names, paths) is shown by the autoescaping template.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memprobe.core import cures
from memprobe.core.series import total_of, total_pss
from memprobe.core.vocabulary import RANK, WORKER_KINDS
from memprobe.report import content, recorded
from memprobe.report import format as fmt
from memprobe.report.chart import (
    LIMIT_COLOR,
    MAX_POINTS,
    Series,
    color_styles,
    limit_line,
    totals_chart,
)
from memprobe.report.embed import plotly_js, script_json
from memprobe.report.record_tables import ProcessRow, Projection, cgroup_facts, process_rows, projection_table
from memprobe.report.render import environment
from memprobe.results.files import write_text_atomic
from memprobe.results.job import Job, JobNode

CLOCK_NOTE_S = 1.0  # start times further apart than this are stated as the nodes' clock offset


@dataclass(frozen=True)
class NodeView:
    """One node as the page shows it."""

    anchor: str
    label: str
    folder: str
    identity: list[tuple[str, str]]
    problem: str | None
    tone: str
    badge: str
    culprit: str
    facts: list[tuple[str, str]]
    processes: list[ProcessRow]
    projection: Projection | None


def node_limit(node: JobNode) -> tuple[float | None, str]:
    """The memory this node's job must fit in, as its analysis found it: its cgroup's limit,
    else the machine's."""
    s = node.summary
    assert s is not None and node.analysed is not None
    lim = s.memory_limit or {}
    if lim.get("limit_mb"):
        return lim["limit_mb"], lim.get("limit_of") or "its limit"
    job = node.analysed[0].recorded
    mem, of = (job.limit_mb, job.limit_of) if job is not None else (None, "")
    return mem, of or "the machine's memory"


def verdict_key(node: JobNode) -> tuple:
    """What makes two nodes' culprits the same: the verdict and what it blames."""
    s = node.summary
    assert s is not None
    return (s.verdict, tuple(s.causes or ()))


def how_it_differs(node: JobNode, common: str) -> str:
    """A node's verdict against the common one: another verdict, or the same for another cause
    (two nodes both "growing", one of them differing, read as a contradiction)."""
    s = node.summary
    verdict = (s.verdict if s else None) or "no verdict"
    if verdict != common or s is None:
        return verdict
    titles = [a.title[:1].lower() + a.title[1:] for a in cures.advice_for(s.causes)]
    return f"{verdict} too, for {' and '.join(titles) if titles else 'no cause named'}"


def culprit_words(job: Job) -> tuple[str, list[tuple[str, str, bool]]]:
    """The culprit across nodes: a sentence (the same verdict on every node read, or which node
    differs and how), then each node's own culprit as (node, words, whether it differs)."""
    read = [n for n in job.read if n.summary is not None]
    if not read:
        return "No node's recording could be read.", []
    keys = Counter(verdict_key(n) for n in read)
    common, _ = keys.most_common(1)[0]
    each = [
        (n.label, recorded.culprit_text(n.summary), verdict_key(n) != common)
        for n in read
        if n.summary is not None
    ]
    alike = [n for n in read if verdict_key(n) == common]
    first = alike[0].summary
    assert first is not None
    verdict = first.verdict or "no verdict"
    if len(read) == 1:
        return f"{verdict.capitalize()} on the one node read ({read[0].label}).", each
    if len(alike) == len(read):
        return (
            f"{verdict.capitalize()} on each of the {len(read)} nodes, for the same cause on every node:",
            each,
        )
    odd = [n for n in read if verdict_key(n) != common]
    names = ", ".join(n.label for n in alike)
    differs = " ".join(f"{n.label.capitalize()} differs: {how_it_differs(n, verdict)}." for n in odd)
    return f"{verdict.capitalize()} on {len(alike)} of {len(read)} nodes ({names}). {differs}", each


def identity_rows(node: JobNode) -> list[tuple[str, str]]:
    i = node.identity
    if node.said_rank is not None:
        rank = str(node.said_rank)
    elif node.node_rank is not None:  # a whole run of ranks (results.job.ranks_order)
        r = node.ranks
        held = f"rank {r[0]}" if len(r) == 1 else f"ranks {r[0]} to {r[-1]}"
        rank = f"{node.node_rank} (told by its global {held}: its launcher said none)"
    else:
        rank = fmt.DASH
    rows = [("host", str(i.get("host") or "not recorded")), ("node rank", rank)]
    if node.node_count is not None:
        rows.append(("nodes in the job", str(node.node_count)))
    found = i.get("env")
    env: dict = found if isinstance(found, dict) else {}
    rows += [(str(k), str(v)) for k, v in env.items()]
    return rows


def rank_rows(job: Job) -> list[dict[str, str]]:
    """A row per rank of every node: its node, its own growth, its workers and theirs."""
    out = []
    for node in job.read:
        s = node.summary
        if s is None:
            continue
        rows = s.processes or []
        for r in sorted((r for r in rows if r["kind"] == RANK), key=lambda r: r.get("rank", -1)):
            workers = [w for w in rows if w["kind"] in WORKER_KINDS and w.get("rank") == r.get("rank")]
            grown = [w["growth_mb"] for w in workers if w.get("judged") and fmt.is_num(w.get("growth_mb"))]
            out.append(
                {
                    "node": node.label,
                    "rank": str(r.get("rank")),
                    "pid": str(r["pid"]),
                    "own": fmt.signed_mb(r.get("growth_mb")) if r.get("judged") else fmt.DASH,
                    "workers": str(len(workers)),
                    "worker_growth": (
                        f"{fmt.signed_mb(float(np.mean(grown)))} each on average, at most {fmt.signed_mb(max(grown))}"
                        if grown
                        else fmt.DASH
                    ),
                }
            )
    return out


def node_rows(job: Job) -> list[dict[str, str]]:
    """A row per node: its peak total PSS against its own memory or limit, its start on the job's clock."""
    out = []
    for node in job.nodes:
        s = node.summary
        row = {"node": node.label, "folder": str(node.folder), "problem": node.problem or ""}
        if s is None:
            out.append(
                row
                | {
                    "start": fmt.DASH,
                    "duration": fmt.DASH,
                    "verdict": fmt.DASH,
                    "peak": fmt.DASH,
                    "limit": fmt.DASH,
                    "share": fmt.DASH,
                    "ranks": fmt.DASH,
                    "tone": "failed",
                }
            )
            continue
        mem, of = node_limit(node)
        peak = s.total_pss_peak_mb
        ranks = sorted(
            int(r["rank"]) for r in s.processes or [] if r["kind"] == RANK and r.get("rank") is not None
        )
        out.append(
            row
            | {
                "start": f"+{fmt.seconds(job.offset(node))}",
                "duration": fmt.seconds(s.duration_s),
                "verdict": content.badge_text(s),
                "tone": content.tone(s),
                "peak": fmt.mb(peak),
                "limit": f"{fmt.mb(mem)} ({of})" if mem else fmt.DASH,
                "share": f"{peak / mem:.0%}" if mem and fmt.is_num(peak) else fmt.DASH,
                "ranks": ", ".join(map(str, ranks)) or fmt.DASH,
            }
        )
    return out


def clock_note(job: Job) -> str:
    """The nodes' start times on the job's clock: what the timeline's alignment rests on."""
    offsets = [(n, job.offset(n)) for n in job.read if n.started is not None]
    if len(offsets) < 2:
        return "One node on the timeline: its seconds count from its command's start."
    spread = max(o for _, o in offsets)
    lines = "; ".join(f"{n.label} started at +{fmt.seconds(o)}" for n, o in offsets)
    if spread > CLOCK_NOTE_S:
        return (
            f"The nodes' start times disagree by up to {fmt.seconds(spread)} ({lines}): each node's line is "
            "shifted by its own start, read from that node's clock; a node whose clock is off shifts by as much."
        )
    return f"The nodes started within {fmt.seconds(spread)} of each other by their own clocks ({lines})."


Line = tuple[str, np.ndarray, np.ndarray]  # a line's name, seconds on the job's clock, MB


def rank_lines(job: Job) -> list[Line]:
    """Each rank's total PSS (the rank and every process under it) on every node."""
    out = []
    for node in job.read:
        if not node.analysed or node.analysed[0].recorded is None:
            continue
        rec = node.analysed[0].recorded
        by_rank: dict[int, list[int]] = {}
        for p in rec.procs:
            by_rank.setdefault(p.rank, []).append(p.pid)
        for rank, pids in sorted(by_rank.items()):
            pss = total_pss(rec.samples[rec.samples["pid"].isin(pids)]) if rank >= 0 else None
            if pss is not None and not pss.empty:
                t = pss.index.to_numpy(float) + job.offset(node)
                out.append((f"rank {rank} · {node.label}", t, pss.to_numpy(float)))
    return out


def node_lines(job: Job) -> list[Line]:
    """Each node's total PSS: its whole process tree (launcher, ranks, workers, helpers)."""
    out = []
    for node in job.read:
        if node.analysed and node.analysed[0].recorded is not None:
            pss = total_of(node.analysed[0].recorded.pss_by_role)
            if not pss.empty:
                out.append((node.label, pss.index.to_numpy(float) + job.offset(node), pss.to_numpy(float)))
    return out


def node_limits(job: Job) -> list[tuple[str, float, str]]:
    """The memory the nodes must fit in, a line's name, MB and what it is for each distinct
    limit: one "memory limit" where every node has the same, else one per limit naming its nodes."""
    by_limit: dict[tuple[float, str], list[str]] = {}
    for node in job.read:
        if node.summary is not None:
            mem, of = node_limit(node)
            if mem:
                by_limit.setdefault((float(mem), of), []).append(node.label)
    if len(by_limit) == 1:
        ((mem, of),) = by_limit
        return [("memory limit", mem, of)]
    return [(f"limit of {', '.join(labels)}", mem, of) for (mem, of), labels in by_limit.items()]


LIMIT_COLORS = (LIMIT_COLOR, "#5c2d0e", "#3b0764", "#0b3d2e")  # dark: a limit is no node's line


def job_chart(
    chart_id: str,
    title: str,
    lines: list[Line],
    max_points: int,
    limits: list[tuple[str, float, str]] | None = None,
) -> dict | None:
    """Lines on the job's wall-clock axis: seconds since the first node's command started;
    ``limits`` (:func:`node_limits`) drawn across them where a line reaches a quarter of one."""
    colors = color_styles([name for name, _, _ in lines])
    series = [
        Series(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "line": {"color": colors[name], "width": 2, "shape": "hv"},
                "marker": {"size": 4},
                "hovertemplate": "%{y:,.0f} MB at %{x:.1f} s<extra>%{fullData.name}</extra>",
            },
            t,
            y,
        )
        for name, t, y in lines
    ]
    limit_colors = color_styles([name for name, _, _ in limits or []], LIMIT_COLORS)
    drawn = [
        limit_line(mb, series, name=name, of=of, color=limit_colors[name]) for name, mb, of in limits or []
    ]
    series += [line for line in drawn if line is not None]
    chart = totals_chart(chart_id, "timeline", title, series, "time", max_points=max_points, legend_room=260)
    if chart is not None:
        chart["layouts"]["time"]["xaxis"]["title"]["text"] = "seconds since the first node's command started"
    return chart


def node_view(i: int, node: JobNode) -> NodeView:
    s = node.summary
    anchor = f"node-{i}"
    base = (anchor, node.label, str(node.folder), identity_rows(node), node.problem)
    if s is None or node.analysed is None or node.analysed[0].recorded is None:
        return NodeView(*base, "failed", "not read", node.problem or "not read", [], [], None)
    job = node.analysed[0].recorded
    mem, of = node_limit(node)
    env = (node.results.manifest.get("environment") or {}) if node.results else {}
    basis = job.basis
    return NodeView(
        *base,
        content.tone(s),
        content.badge_text(s),
        recorded.culprit_text(s),
        recorded.facts(s, node.meta) + cgroup_facts(s.memory_limit, env.get("mem_total_mb")),
        process_rows(s),
        projection_table(s, basis, mem, of),
    )


def context(job: Job, name: str, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The job page's template context (see ``nodes.html``)."""
    timeline = job_chart(
        "nodes-ranks",
        "Every rank's total PSS (the rank and its workers), all nodes on one clock",
        rank_lines(job),
        max_points,
    )
    totals = job_chart(
        "nodes-total",
        "Each node's total PSS (its whole process tree) against the memory it must fit in",
        node_lines(job),
        max_points,
        node_limits(job),
    )
    charts = [c for c in (totals, timeline) if c is not None]
    first = job.read[0].results if job.read else None
    env = (first.manifest.get("environment") or {}) if first is not None else {}
    problems = [f"{n.label} ({n.folder}): {n.problem}" for n in job.nodes if n.problem] + job.lost()
    commands = {" ".join(map(str, n.meta.get("command") or [])) for n in job.read}
    return {
        "title": f"memprobe job · {name}",
        "name": name,
        "started": job.start,
        "culprit": (culprit := culprit_words(job))[0],
        "culprits": culprit[1],
        "tone": "growing" if any(n.summary and n.summary.verdict == "growing" for n in job.read) else "flat",
        "problems": problems,
        "node_rows": node_rows(job),
        "rank_rows": rank_rows(job),
        "clock_note": clock_note(job),
        "timeline": timeline,
        "totals": totals,
        "nodes": [node_view(i, n) for i, n in enumerate(job.nodes)],
        "commands": sorted(c for c in commands if c),
        "env": env,
        "downsampled": any(c["downsampled"] for c in charts),
        "max_points": max_points,
        "data_json": script_json({"charts": charts}),
        "chart_count": len(charts),
        "plotly_js": plotly_js(),
    }


def job_name(paths: list[Path]) -> str:
    return paths[0].name if len(paths) == 1 else " + ".join(p.name for p in paths)


def render_job(job: Job, name: str, max_points: int = MAX_POINTS) -> str:
    """The job's page, as one HTML string."""
    return environment().get_template("nodes.html").render(**context(job, name, max_points))


def write_job_report(path: Path, job: Job, name: str) -> Path:
    """Write the job's page to ``path``; returns it."""
    return write_text_atomic(path, render_job(job, name))
