"""The page of a recorded job (``memprobe record`` / ``watch``): who grows and how fast, the
timeline per rank and worker generation, total memory, and what the job would need at other
worker and rank counts. Words and tables here, charts from ``figures``; the page shows only what
the job measured (no items axis without items, no matrix of one cell)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from memprobe.core import cures
from memprobe.core.series import Clock
from memprobe.core.summary import RunSummary, denied, never_read
from memprobe.core.tree_rules import ESTIMATE_FLOOR_MB
from memprobe.core.vocabulary import (
    DENIED_OTHER_USER,
    HELPER_ROLES,
    LAUNCHER,
    MAIN,
    RANK,
    WORKER_KINDS,
    kind_words,
    shell_exit_code,
    signal_name,
)
from memprobe.report import content, epochs, figures, groups, session
from memprobe.report import format as fmt
from memprobe.report.chart import has_a_line, share_x, time_only
from memprobe.report.embed import plotly_js, script_json
from memprobe.report.record_tables import cgroup_facts, labels, process_rows, projection_table
from memprobe.results.folder import ResultSet
from memprobe.results.upgrade import is_recorded as recorded_meta

if TYPE_CHECKING:
    from memprobe.analysis.process import Proc
    from memprobe.analysis.recorded import RecordedAnalysis


def is_recorded(results: ResultSet) -> bool:
    """A results folder of one recorded job (record / watch)."""
    return len(results.metas) == 1 and recorded_meta(results.metas[0])


# -- sampling -------------------------------------------------------------------------------------


def estimate_text(s: RunSummary) -> str | None:
    """'USS estimate vs the next exact reading: median 2.1%, max 8.4% over 310 readings; ...'."""
    e = s.estimate_error
    if not e or not e.get("n"):
        return None
    worst = f" ({fmt.mb(e['max_mb'])})" if fmt.is_num(e.get("max_mb")) else ""
    text = (
        f"USS estimate vs the next exact reading: median {e['median_pct']:.1f}%, max {e['max_pct']:.1f}%{worst} "
        f"over {e['n']:,} reading{'s' if e['n'] != 1 else ''}"
    )
    if e.get("n_events") and fmt.is_num(e.get("events_median_pct")):
        text += (
            f"; over the {e['n_events']:,} interval{'s' if e['n_events'] != 1 else ''} with a fork or a sharer's "
            f"exit, median {e['events_median_pct']:.0f}% (either moves USS without a single fault, so the "
            "counters cannot see it)"
        )
    elif fmt.is_num(e.get("max_mb")):
        text += f" (processes with at least {ESTIMATE_FLOOR_MB:g} MB of USS)"
    return text + "."


def sampling_text(s: RunSummary, meta: dict) -> str:
    sampler = meta.get("sampler") or {}
    exact = sampler.get("exact_readings")
    share = (
        f"{s.sampler_cpu_share:.1%} of one core"
        if s.sampler_cpu_share is not None
        else "an unknown CPU share"
    )
    count, noun = (
        (exact, "exact reading")
        if isinstance(exact, int)
        else (sampler.get("pss_rounds"), "exact round")
        if isinstance(sampler.get("pss_rounds"), int)
        else (None, "exact readings")
    )
    readings = noun if count is None else f"{count:,} {noun}{'s' if count != 1 else ''}"
    return f"The sampler took {readings} over {fmt.seconds(s.duration_s)} and used {share}."


# -- the page -------------------------------------------------------------------------------------


def group_text(kind: str) -> str:
    """A group of processes of one kind on a chart: 'DataLoader workers', 'rank processes',
    'main process'."""
    return kind_words(kind, 2 if kind in (*WORKER_KINDS, RANK) else 1)


def group_names(p: Proc, generations: int) -> tuple[str, ...]:
    """A process's groups on a chart of many processes, finest first: its rank, kind and
    generation ('rank 3 DataLoader workers · gen 2'), then coarser ones down to its kind alone;
    ``generations``: how many its parent had (no 'gen 1' where there was only one)."""
    kind = group_text(p.kind)
    rank = f"rank {p.rank} " if p.rank >= 0 and p.kind != RANK else ""
    gen = f" · gen {p.generation + 1}" if p.generation is not None and generations > 1 else ""
    return tuple(dict.fromkeys((f"{rank}{kind}{gen}", f"{rank}{kind}", f"{kind}{gen}", kind)))


def lifelines(procs: list[Proc], rows: list[dict]) -> list[groups.Lifeline]:
    """Every process that can hold the job's memory (helpers left to the table), named for its
    line, with its groups and its own growth (a chart of many processes draws groups and growers)."""
    label = labels(rows)
    order = {r["pid"]: i for i, r in enumerate(rows)}
    growth = {int(r["pid"]): r.get("growth_mb") for r in rows if r.get("judged")}
    gens: dict[int | None, set] = {}
    for p in procs:
        if p.generation is not None:
            gens.setdefault(p.ppid, set()).add(p.generation)
    out = []
    for p in sorted(procs, key=lambda p: order.get(p.pid, len(order))):
        if p.kind in HELPER_ROLES:
            continue
        name = label.get(p.pid, p.role)
        out.append(
            groups.Lifeline(
                p.pid,
                name,
                p.role,
                p.generation,
                p.start_t,
                p.end_t if p.end_t is not None else p.last_t,
                p.is_worker,
                group_names(p, len(gens.get(p.ppid, ()))),
                growth.get(p.pid) if fmt.is_num(growth.get(p.pid)) else None,
            )
        )
    names = [ln.name for ln in out]
    return [ln if names.count(ln.name) == 1 else replace(ln, name=f"{ln.name} (pid {ln.pid})") for ln in out]


def stack_groups(procs: list[Proc]) -> dict[str, str] | None:
    """Role -> band of the total PSS chart where one band per process would be more than
    ``groups.MAX_LINES``: a rank with every process under it (up to that many ranks), else by kind
    (a role, 'worker 0', is one column for all its generations); None: a band per role."""
    if len({p.role for p in procs}) <= groups.MAX_LINES:
        return None
    ranks = {p.rank for p in procs if p.rank >= 0}
    by_rank = 0 < len(ranks) <= groups.MAX_LINES - 2

    def band(p: Proc) -> str:
        if p.kind in HELPER_ROLES:
            return "helpers"
        if by_rank and p.rank >= 0:
            return f"rank {p.rank}"
        if p.kind in (MAIN, LAUNCHER):
            return p.role
        return group_text(p.kind)

    ordered = sorted(procs, key=lambda p: (p.rank < 0, p.rank, not p.is_parent))
    count: dict[str, int] = {}
    for p in ordered:
        count[band(p)] = count.get(band(p), 0) + 1
    out: dict[str, str] = {}
    for p in ordered:
        b, n = band(p), count[band(p)]
        name = (
            b
            if n == 1
            else f"{b} and its {n - 1} {'child' if n == 2 else 'children'}"
            if b.removeprefix("rank ").isdigit()
            else f"{b} ({n})"
        )
        out.setdefault(p.role, name)
    return out


MAX_RANK_CHARTS = 4  # more ranks: one timeline of them all, by group (not a long column of charts)


def timeline_charts(
    samples: pd.DataFrame,
    procs: list[Proc],
    rows: list[dict],
    clock: Clock,
    max_points: int,
    axes: tuple[str, ...],
) -> list[dict]:
    """One USS timeline per rank (a job without ranks: one); the launcher's own line only when
    it has workers of its own."""
    lines = lifelines(procs, rows)
    rank_of = {p.pid: p.rank for p in procs}
    ranks = sorted({rank_of[ln.pid] for ln in lines})
    has_ranks = any(r >= 0 for r in ranks)
    if sum(r >= 0 for r in ranks) > MAX_RANK_CHARTS:
        chart = figures.chart_timeline(
            "tl-all", "All ranks: USS per process", samples, lines, clock, max_points=max_points, axes=axes
        )
        return [chart] if chart is not None and has_a_line(chart) else []
    charts = []
    for r in ranks:
        mine = [ln for ln in lines if rank_of[ln.pid] == r]
        if has_ranks and r < 0 and not any(ln.worker for ln in mine):
            continue
        title = (
            f"Rank {r}: USS per process"
            if r >= 0
            else "Launcher and its own workers: USS per process"
            if has_ranks
            else "USS per process"
        )
        chart = figures.chart_timeline(
            f"tl-{r + 1}", title, samples, mine, clock, max_points=max_points, axes=axes
        )
        if chart is not None and has_a_line(chart):
            charts.append(chart)
    return charts


def memory_charts(
    samples: pd.DataFrame,
    by_role: pd.DataFrame,
    progress: pd.DataFrame,
    clock: Clock,
    max_points: int,
    items: bool,
    groups: dict[str, str] | None = None,
    charge: pd.Series | None = None,
    limit_mb: float | None = None,
) -> list[dict]:
    """Total PSS stacked by process (by group: ``stack_groups``), sum of RSS next to it with the
    cgroup's charge and the job's limit, and items/s where the job counted items. ``by_role``:
    the samples' PSS per role, as the analysis built it (:class:`~memprobe.analysis.recorded.RecordedAnalysis`)."""
    milestones = figures.Milestones({})
    charts = [
        figures.chart_pss_by_role(
            "mem-pss", by_role, clock, milestones, max_points=max_points, held=True, band_of=groups
        ),
        figures.chart_rss_vs_pss(
            "mem-rss",
            samples,
            by_role,
            clock,
            milestones,
            max_points=max_points,
            held=True,
            charge=charge,
            limit_mb=limit_mb,
        ),
    ]
    if items:
        charts.append(
            figures.chart_items_rate("mem-rate", progress, clock, milestones, max_points=max_points)
        )
    drawn = [c for c in charts if c is not None and has_a_line(c)]
    return drawn if items else [time_only(c) for c in drawn]


def timeline_note(s: RunSummary, has_generations: bool, procs: list[Proc]) -> str:
    est = (
        "Markers: exact readings of USS (smaps_rollup). Dotted: the sampler's estimate between them, from each "
        "process's minor faults and RSS, calibrated at every exact reading. "
        if s.estimate_error
        else "Markers: exact readings of USS (smaps_rollup), joined by lines. "
    )
    workers = [p for p in procs if p.is_worker]
    bands = (
        "Shaded: when each generation of workers was alive (a DataLoader starts a new generation every epoch "
        "unless its workers persist). "
        if has_generations
        else "Shaded: while the workers were alive. "
        if workers
        else ""
    )
    forked = (
        "A forked worker starts at USS 0: it shares every page of its parent at fork. So its parent's USS "
        "falls when it forks, and rises again as its workers copy those pages or exit; neither is the parent's "
        "own growth. "
        if any(p.forked for p in workers)
        else ""
    )
    spawned = (
        "A spawned worker first boots an interpreter and unpickles what it was given: that start-up copy is "
        "not growth; its growth counts from then."
        if any(not p.forked for p in workers)
        else ""
    )
    return (est + bands + forked + spawned).strip()


def culprit_text(s: RunSummary) -> str:
    """The culprit without its leading verdict (the badge next to it says it)."""
    text = s.culprit or s.explanation
    prefix = f"{s.verdict}: " if s.verdict else ""
    body = text[len(prefix) :] if prefix and text.startswith(prefix) else text
    return body[:1].upper() + body[1:]


X_TITLE = "seconds since the command started"


def _retitle(charts: list[dict], kind: str) -> list[dict]:
    """The time axis counts from the command's start (watch: from when memprobe began watching)."""
    text = X_TITLE if kind == "record" else "seconds since memprobe began watching"
    for c in charts:
        if "time" in c["layouts"]:
            c["layouts"]["time"]["xaxis"]["title"]["text"] = text
        if c["kind"] == "items_rate":
            c["title"] = "Items/s, as counted by memprobe.mark"
    return charts


def unread_text(s: RunSummary) -> str | None:
    rows = [r for r in s.processes or [] if not r.get("pss_samples") and not r.get("denied")]
    if not rows:
        return None
    label = labels(s.processes or [])
    roles = [label[int(r["pid"])] for r in rows]
    names = ", ".join(roles[:6]) + (", ..." if len(roles) > 6 else "")
    many = len(roles) != 1
    return (
        f"{len(roles)} process{'es' if many else ''} ({names}) had no exact reading, so total PSS counts "
        f"{'them' if many else 'it'} with an estimate: {'their' if many else 'its'} private memory (USS) "
        f"from {'their' if many else 'its'} page faults, plus {'their' if many else 'its'} share of the "
        f"pages {'they share' if many else 'it shares'} as a process like {'them' if many else 'it'} "
        "(same kind, or its parent) had it at its nearest reading. On 34 jobs memprobe did not write "
        "this total was within 7 % of psutil's. To read every process exactly, record again with a "
        "larger --pss-budget (e.g. 0.05: 5 % of a core)."
    )


def denied_text(s: RunSummary, rss_mb: float) -> str | None:
    """What the page says of processes whose memory map the kernel refused memprobe: why, what
    the total leaves out, and how to read them (not a larger budget: no budget reads them)."""
    rows = denied(s.processes or [])
    if not rows:
        return None
    label = labels(s.processes or [])
    named = [f"{label[int(r['pid'])]} (pid {int(r['pid'])}: {r['denied']})" for r in rows]
    many = len(rows) != 1
    return (
        f"memprobe may not read the memory of {len(rows)} process{'es' if many else ''}: "
        + "; ".join(named[:4])
        + ("; ..." if len(named) > 4 else "")
        + f". The kernel gives {'their' if many else 'its'} RSS but not {'their' if many else 'its'} "
        f"PSS or USS: total PSS leaves {'them' if many else 'it'} out, so the whole tree held up to "
        f"{fmt.mb(rss_mb)} more than it shows ({'their' if many else 'its'} RSS at its peak), and the sum "
        f"of RSS beside it includes {'them' if many else 'it'}. No --pss-budget reads "
        f"{'them' if many else 'it'}: "
        + (
            f"record as the user {'they run' if many else 'it runs'} as, or as root."
            if all(str(r["denied"]).startswith(DENIED_OTHER_USER) for r in rows)
            else "record as root (a process that is not dumpable is root's alone to read)."
        )
    )


def exit_code_text(code: int) -> str:
    """The command's exit code as a shell (and memprobe's own exit) gives it: 128+N for a command
    killed by signal N, which the meta holds as -N (Ctrl-C's job showed "exit code -2")."""
    if code >= 0:
        return str(code)
    return f"{shell_exit_code(code)} (killed by {signal_name(-code)})"


def facts(s: RunSummary, meta: dict, denied_mb: float = 0.0) -> list[tuple[str, str]]:
    unread = len(never_read(s.processes or []))
    left_out = len(denied(s.processes or []))
    notes = []
    if unread:
        notes.append(f"{unread} process{'es' if unread != 1 else ''} never read exactly: estimated")
    if left_out:
        who = f"{left_out} process{'es' if left_out != 1 else ''}"
        notes.append(f"leaves out {who} memprobe may not read: up to {fmt.mb(denied_mb)} more")
    about = "about " if unread or left_out else ""
    rows = [
        (
            "peak total PSS",
            ("about " if unread else "")
            + fmt.mb(s.total_pss_peak_mb)
            + (f" ({'; '.join(notes)})" if notes else ""),
        ),
        (
            "sum of RSS at its peak",
            f"{fmt.mb(s.sum_rss_peak_mb)} (over-counts by {about}{fmt.mb(s.rss_overcount_mb)})",
        ),
        ("duration", fmt.seconds(s.duration_s)),
        ("status", s.status),
    ]
    if meta.get("exit_code") is not None:
        rows.append(("exit code", exit_code_text(meta["exit_code"])))
    if s.items:
        rows += [("items counted (memprobe.mark)", fmt.count(s.items)), ("items/s", fmt.rate(s.items_per_s))]
    workers = [r for r in s.processes or [] if r["kind"] in WORKER_KINDS]
    if workers:
        rows.append(("worker processes", f"{len(workers)} (at most {s.workers} at once)"))
    rows.append(("verdict threshold", f"{fmt.mb(s.growth_threshold_mb)} of a process's own growth"))
    return rows


def context(results: ResultSet, max_points: int, job: RecordedAnalysis) -> dict[str, Any]:
    """The record page's template context (see ``record.html``), from the folder and the job as
    the analysis left it (:class:`~memprobe.analysis.recorded.RecordedAnalysis`): every figure is
    the analysis', the page only draws and words them."""
    meta = results.metas[0]
    samples = results.run_table("samples", meta["run_id"])
    progress = results.run_table("progress", meta["run_id"])
    s, procs = job.summary, job.procs
    denied_mb, basis, limit_mb, limit_of = job.denied_mb, job.basis, job.limit_mb, job.limit_of
    clock = Clock.from_progress(progress)
    items = bool(s.items) and not progress.empty
    axes = ("time", "items") if items else ("time",)
    timelines = timeline_charts(samples, procs, s.processes or [], clock, max_points, axes)
    memory = memory_charts(
        job.samples,
        job.pss_by_role,
        progress,
        clock,
        max_points,
        items,
        stack_groups(procs),
        job.charge,
        limit_mb,
    )
    kind = meta.get("kind") or "record"
    charts = _retitle(share_x(timelines + memory), kind)
    per_epoch = epochs.generations_chart(s)  # its own x axis: generations, not seconds
    table = epochs.fold_generations(process_rows(s), s.processes or [])
    manifest = results.manifest
    env = manifest.get("environment") or {}
    command = meta.get("command") or []
    return {
        "title": f"memprobe {kind} · {s.run_id}",
        "kind": kind,
        "name": s.run_id,
        "s": s,
        "meta": meta,
        "command": " ".join(map(str, command)) if isinstance(command, list) else str(command),
        "tone": content.tone(s),
        "badge": content.badge_text(s),
        "culprit": culprit_text(s),
        "advice": (advice := cures.advice_for(s.causes)),
        "guards": cures.guards(advice, cures.job_of(s)),
        "facts": facts(s, meta, denied_mb) + cgroup_facts(s.memory_limit, env.get("mem_total_mb")),
        "timelines": timelines,
        "memory_charts": memory,
        "items": items,
        "timeline_note": timeline_note(s, any(p.generation for p in procs if p.is_worker), procs),
        "processes": table.rows,
        "folded": table.folded,
        "epochs_chart": per_epoch,
        "forecast": epochs.forecast_text(s),
        "generations": epochs.generations_text(s),
        "show_per_1k": items,
        "projection": projection_table(s, basis, limit_mb, limit_of),
        "estimate": estimate_text(s),
        "sampling": sampling_text(s, meta),
        "unread": unread_text(s),
        "denied": denied_text(s, denied_mb),
        "banner": session.banner(manifest, [s]),
        "manifest": manifest,
        "env": env,
        "env_rows": session.environment_rows(manifest),
        "duration": s.duration_s,
        "downsampled": any(c["downsampled"] for c in charts),
        "max_points": max_points,
        "data_json": script_json({"charts": charts + ([per_epoch] if per_epoch else [])}),
        "chart_count": len(charts) + bool(per_epoch),
        "plotly_js": plotly_js(),
    }
