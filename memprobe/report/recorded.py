"""The page of a recorded job (``memprobe record`` / ``watch``): who grows and how fast, the
timeline per rank and worker generation, total memory, and what the job would need at other
worker and rank counts. Words and tables here, charts from ``figures``; the page shows only what
the job measured (no items axis without items, no matrix of one cell)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from memprobe import analysis
from memprobe.core.series import Clock
from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import (
    DATALOADER,
    DENIED_OTHER_USER,
    HELPER_ROLES,
    LAUNCHER,
    MAIN,
    PARENT_KINDS,
    RANK,
    WORKER_KINDS,
    kind_words,
    shell_exit_code,
    signal_name,
)
from memprobe.record import culprit, projection
from memprobe.record import summary as record_summary
from memprobe.record.process import Proc
from memprobe.record.table import ESTIMATE_FLOOR_MB
from memprobe.record.tree_analysis import LEVEL_SHARE
from memprobe.report import content, figures, groups
from memprobe.report import format as fmt
from memprobe.report.chart import has_a_line, share_x, time_only
from memprobe.report.embed import plotly_js, script_json
from memprobe.results.folder import ResultSet


def is_recorded(results: ResultSet) -> bool:
    """A results folder of one recorded job (record / watch)."""
    return len(results.metas) == 1 and analysis.is_recorded(results.metas[0])


def kind_text(row: dict) -> str:
    """'DataLoader worker (fork)', 'forked child', 'rank process', 'helper (forkserver)'."""
    if row["kind"] == DATALOADER:
        return "DataLoader worker" + (f" ({row['start_method']})" if row.get("start_method") else "")
    return kind_words(row["kind"])


# -- who grows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessRow:
    """One line of the 'who grows' table."""

    role: str
    kind: str
    pid: int
    alive: str
    readings: int
    uss: str
    growth: str
    per_min: str
    per_1k: str
    notes: list[str]
    tone: str  # growing | flat | unjudged


def process_rows(s: RunSummary) -> list[ProcessRow]:
    rows = s.processes or []
    parents = {r.get("parent_pid") for r in rows if r["kind"] in WORKER_KINDS}
    ranks = any(r["kind"] == RANK for r in rows)
    names = labels(rows)
    return [
        replace(_process_row(r, s.growth_threshold_mb, r["pid"] in parents, ranks), role=names[int(r["pid"])])
        for r in rows
    ]


def labels(rows: list[dict]) -> dict[int, str]:
    """Each process's name on the page (table, timelines' legends, the unread list): its role,
    and its generation where its parent had more than one (the table listed "rank 0 worker 0"
    twice, once per epoch)."""
    gens: dict[object, set] = {}
    for r in rows:
        if r.get("generation") is not None:
            gens.setdefault(r.get("parent_pid"), set()).add(r["generation"])
    return {
        int(r["pid"]): f"{r['role']} · gen {r['generation'] + 1}"
        if r.get("generation") is not None and len(gens.get(r.get("parent_pid"), ())) > 1
        else r["role"]
        for r in rows
    }


def _process_row(r: dict, threshold: float, has_workers: bool, has_ranks: bool = False) -> ProcessRow:
    judged = bool(r.get("judged"))
    growth = r.get("growth_mb")
    tone = "unjudged" if not judged or growth is None else "growing" if growth > threshold else "flat"
    start, end = r.get("start_t", r.get("first_t")), r.get("end_t", r.get("last_t"))
    alive = fmt.span(start, end)
    uss = (
        f"{fmt.mb(r.get('uss_start_mb'))} → {fmt.mb(r.get('uss_end_mb'))}"
        if fmt.is_num(r.get("uss_start_mb"))
        else fmt.mb(r.get("uss_end_mb"))
    )

    def shown(text: str) -> str:
        return text if judged else fmt.DASH

    return ProcessRow(
        r["role"],
        kind_text(r),
        int(r["pid"]),
        alive,
        int(r.get("pss_samples") or 0),
        uss,
        shown(fmt.signed_mb(growth)),
        shown(fmt.signed(r.get("growth_mb_per_min"))),
        shown(fmt.signed(r.get("growth_per_1k_items_mb"), 2)),
        _notes(r, judged, has_workers, has_ranks),
        tone,
    )


def _notes(r: dict, judged: bool, has_workers: bool, has_ranks: bool = False) -> list[str]:
    notes = []
    if fmt.is_num(r.get("built_mb")) and abs(r["built_mb"]) >= 1:
        # A launcher's window opens at its first rank (record.process.own_workers), not at a mark.
        since = (
            "its ranks started"
            if r["kind"] == LAUNCHER or (r["kind"] == MAIN and has_ranks and not has_workers)
            else "its workers started"
            if has_workers
            else "its thread workers started"
            if r.get("threads_first_t") is not None
            else "the job's first memprobe.mark"
        )
        seen = " (what memprobe saw: it was running before)" if culprit.seen_late(r.get("start_t")) else ""
        notes.append(f"built {fmt.signed_mb(r['built_mb'])} before {since}{seen}")
    if fmt.is_num(r.get("built_between_mb")) and abs(r["built_between_mb"]) >= 1:
        notes.append(
            f"{culprit.built_or_freed(r['built_between_mb'])} between worker generations, while none of "
            "its workers lived (not growth)"
        )
    if fmt.is_num(r.get("startup_mb")):
        notes.append(f"start-up copy {fmt.mb(r['startup_mb'])} (not growth)")
    if fmt.is_num(r.get("uss_start_mb")) and r["kind"] in WORKER_KINDS and r.get("startup_mb") is None:
        notes.append("from USS 0 at its fork")
    if fmt.is_num(r.get("allocated_mb")) and r["allocated_mb"] >= 1:
        # The rest of its growth is pages it copied from its parent (``Growth.allocated_mb``, memprobe.record.tree_analysis).
        notes.append(f"at least {fmt.signed_mb(r['allocated_mb'])} allocated by itself, the rest copied")
    if r.get("estimated"):
        notes.append(
            "estimated from its page faults: "
            + (
                "no exact reading while it lived"
                if not r.get("pss_samples")
                else "its exact readings missed its growth"
            )
        )
    if fmt.is_num(r.get("released_mb")) and r["released_mb"] >= 1:
        notes.append(f"{fmt.signed_mb(r['released_mb'])} made private by others (not growth)")
    if fmt.is_num(r.get("written_mb")) and r["written_mb"] >= 1:
        notes.append(
            f"{fmt.signed_mb(r['written_mb'])} made private by its own writes to pages its workers "
            "share (not growth)"
        )
    if r.get("denied"):
        notes.append(str(r["denied"]))  # the sampler's reason: permission denied, whose process
    if not judged:
        notes.append(
            "helper: shown, not judged"
            if r["kind"] in HELPER_ROLES
            else "not readable: no growth"
            if r.get("denied")
            else "too few exact readings for a growth"
            if r["kind"] in WORKER_KINDS + PARENT_KINDS
            else "not judged"
        )
    return notes


# -- projection -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProjectionCell:
    measured: str
    full_copy: str | None
    as_measured: bool
    over_ram: bool  # as measured, more than the machine's memory
    full_over_ram: bool


@dataclass(frozen=True)
class Projection:
    columns: list[str]
    rows: list[tuple[str, list[ProjectionCell]]]
    assumptions: list[str]
    ram: str | None  # this machine's memory
    over_ram: bool  # some cell needs more than that


def projection_table(
    s: RunSummary, basis: projection.Basis | None, ram_mb: float | None
) -> Projection | None:
    """Workers per rank down, rank counts across (one column for a job without ranks); each cell
    as measured and, for forked workers, with every worker holding a full copy."""
    if not s.projection or basis is None:
        return None
    ranks = sorted({r["ranks"] for r in s.projection})
    columns = (
        [f"{r} rank{'s' if r != 1 else ''}" + (" (measured)" if r == basis.ranks else "") for r in ranks]
        if basis.has_ranks
        else ["this job"]
    )
    rows = []
    for w in sorted({r["workers_per_rank"] for r in s.projection}):
        cells = []
        for r in ranks:
            p = next(x for x in s.projection if x["ranks"] == r and x["workers_per_rank"] == w)
            cells.append(
                ProjectionCell(
                    fmt.size(p["measured_mb"]),
                    fmt.size(p["full_copy_mb"]) if basis.forked else None,
                    bool(p["as_measured"]),
                    bool(ram_mb and p["measured_mb"] > ram_mb),
                    bool(ram_mb and basis.forked and p["full_copy_mb"] > ram_mb),
                )
            )
        rows.append(
            (f"{w} worker{'s' if w != 1 else ''}" + (" (measured)" if w == basis.workers else ""), cells)
        )
    over = any(c.over_ram or c.full_over_ram for _, cells in rows for c in cells)
    return Projection(columns, rows, assumptions(basis), fmt.size(ram_mb) if ram_mb else None, over)


def assumptions(b: projection.Basis) -> list[str]:
    """The projection's assumptions, in words, with the measured numbers they scale."""
    share = " (the pages its forked workers share are counted once)" if b.forked else ""
    between = " and what it built between worker generations" if b.built_between else ""
    parent = (
        "Each rank holds what its process held just before its first worker started plus that process's own growth "
        f"since{between}: {fmt.mb(b.parent_mb)} (the mean over {b.ranks} rank{'s' if b.ranks != 1 else ''}), once per "
        f"rank{share}."
        if b.has_ranks
        else "The main process holds what it held just before its first worker started plus its own growth since"
        f"{between}: {fmt.mb(b.parent_mb)}, once{share}."
    )
    start = (
        "it starts at 0 MB, sharing its parent's pages"
        if b.forked
        else f"its start-up copy is {fmt.mb(b.worker_start_mb)}"
    )
    each = (
        f"Each worker adds its private memory as measured over the same duration ({fmt.seconds(b.duration_s)} "
        f"per worker): {start}, then {fmt.signed_mb(b.worker_growth_mb)} of its own growth, the mean of the "
        f"{b.workers_measured} worker{'s' if b.workers_measured != 1 else ''} measured. A longer run grows "
        "further while workers are still growing."
    )
    out = [parent, each]
    if b.forked and b.levelled and b.levelled >= b.workers_measured:
        out.append(
            f"“Full copy” is as measured: {_all_of(b.workers_measured)} measured levelled off (over the last third of "
            f"{'its' if b.workers_measured == 1 else 'their'} life, USS rose less than "
            f"{LEVEL_SHARE:.0%} of {'its' if b.workers_measured == 1 else 'their'} growth), short of a copy of "
            f"everything {'its' if b.workers_measured == 1 else 'their'} parent held ({fmt.mb(b.full_copy_mb)})."
        )
    elif b.forked:
        levelled = (
            f" The {b.levelled} of {b.workers_measured} workers measured whose USS levelled off (over the last third "
            f"of their life it rose less than {LEVEL_SHARE:.0%} of their growth) count as measured."
            if b.levelled
            else ""
        )
        out.append(
            f"“Full copy”: every forked worker ends with a private copy of everything its parent held when it "
            f"started ({fmt.mb(b.full_copy_mb)}): where copy-on-access ends once workers have read every "
            "record." + levelled
        )
    if b.others_mb >= 1:
        out.append(
            f"Other processes (launcher, helpers, processes without workers): {fmt.mb(b.others_mb)}, once."
        )
    return out


def _all_of(n: int) -> str:
    return "the one worker" if n == 1 else f"all {n} workers"


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
    progress: pd.DataFrame,
    clock: Clock,
    max_points: int,
    items: bool,
    groups: dict[str, str] | None = None,
) -> list[dict]:
    """Total PSS stacked by process (by group: ``stack_groups``), sum of RSS next to it, and
    items/s where the job counted items."""
    milestones = figures.Milestones({})
    charts = [
        figures.chart_pss_by_role(
            "mem-pss", samples, clock, milestones, max_points=max_points, held=True, band_of=groups
        ),
        figures.chart_rss_vs_pss("mem-rss", samples, clock, milestones, max_points=max_points, held=True),
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


def never_read(s: RunSummary) -> list[str]:
    """Roles of the processes the sampler never read exactly: total PSS holds an estimate of theirs."""
    return record_summary.never_read(s.processes or [])


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


def denied_rss_mb(s: RunSummary, samples: pd.DataFrame) -> float:
    """The most the processes memprobe may not read held at once: their RSS summed per tick, at
    its peak (their PSS is at most that: what total PSS may miss)."""
    pids = {int(r["pid"]) for r in record_summary.denied(s.processes or [])}
    if not pids or samples.empty:
        return 0.0
    rows = samples[samples["pid"].isin(pids) & ~samples["missing"].fillna(False).astype(bool)]
    peak = rows.groupby("t")["rss_mb"].sum().max() if not rows.empty else 0.0
    return float(peak) if pd.notna(peak) else 0.0


def denied_text(s: RunSummary, rss_mb: float) -> str | None:
    """What the page says of processes whose memory map the kernel refused memprobe: why, what
    the total leaves out, and how to read them (not a larger budget: no budget reads them)."""
    rows = record_summary.denied(s.processes or [])
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
    unread = len(never_read(s))
    left_out = len(record_summary.denied(s.processes or []))
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


def context(results: ResultSet, max_points: int) -> dict[str, Any]:
    """The record page's template context (see ``record.html``)."""
    meta = results.metas[0]
    samples = results.run_table("samples", meta["run_id"])
    progress = results.run_table("progress", meta["run_id"])
    gil = results.manifest.get("environment", {}).get("gil_enabled")
    job = record_summary.analyse(meta, samples, progress, gil_enabled=gil)
    s, procs = job.summary, job.procs
    denied_mb = denied_rss_mb(s, samples)
    basis = projection.projection_basis(job.rows, procs)
    clock = Clock.from_progress(progress)
    items = bool(s.items) and not progress.empty
    axes = ("time", "items") if items else ("time",)
    timelines = timeline_charts(samples, procs, s.processes or [], clock, max_points, axes)
    memory = memory_charts(job.samples, progress, clock, max_points, items, stack_groups(procs))
    kind = meta.get("kind") or "record"
    charts = _retitle(share_x(timelines + memory), kind)
    manifest = results.manifest
    env = manifest.get("environment") or {}
    command = (meta.get("spec") or {}).get("command") or []
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
        "facts": facts(s, meta, denied_mb),
        "timelines": timelines,
        "memory_charts": memory,
        "items": items,
        "timeline_note": timeline_note(s, any(p.generation for p in procs if p.is_worker), procs),
        "processes": process_rows(s),
        "show_per_1k": items,
        "projection": projection_table(s, basis, env.get("mem_total_mb")),
        "estimate": estimate_text(s),
        "sampling": sampling_text(s, meta),
        "unread": unread_text(s),
        "denied": denied_text(s, denied_mb),
        "banner": content.banner(manifest, [s]),
        "manifest": manifest,
        "env": env,
        "env_rows": content.environment_rows(manifest),
        "duration": s.duration_s,
        "downsampled": any(c["downsampled"] for c in charts),
        "max_points": max_points,
        "data_json": script_json({"charts": charts}),
        "chart_count": len(charts),
        "plotly_js": plotly_js(),
    }
