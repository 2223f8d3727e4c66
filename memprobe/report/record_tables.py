"""The tables of a recorded job's page: who grows (a row per process, with what its numbers
mean in notes) and the projection to other worker and rank counts with its assumptions in
words. The page around them is :mod:`memprobe.report.recorded`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from memprobe.core import forecast_words
from memprobe.core.summary import RunSummary
from memprobe.core.tree_rules import ALONE_MB, LEVEL_SHARE, seen_late
from memprobe.core.units import built_or_freed
from memprobe.core.vocabulary import (
    CGROUP_PARTS,
    DATALOADER,
    HELPER_ROLES,
    LAUNCHER,
    MAIN,
    PARENT_KINDS,
    RANK,
    WORKER_KINDS,
    kind_words,
)
from memprobe.report import format as fmt

if TYPE_CHECKING:
    from memprobe.analysis.projection import Basis


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
    count: int = 1  # processes the row stands for (report.epochs folds a parent's middle generations)


def process_rows(s: RunSummary) -> list[ProcessRow]:
    rows = s.processes or []
    parents = {r.get("parent_pid") for r in rows if r["kind"] in WORKER_KINDS}
    ranks = any(r["kind"] == RANK for r in rows)
    names = labels(rows)
    return [
        replace(process_row(r, s.growth_threshold_mb, r["pid"] in parents, ranks), role=names[int(r["pid"])])
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


def process_row(r: dict, threshold: float, has_workers: bool, has_ranks: bool = False) -> ProcessRow:
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
        notes(r, judged, has_workers, has_ranks),
        tone,
    )


def notes(r: dict, judged: bool, has_workers: bool, has_ranks: bool = False) -> list[str]:
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
        seen = " (what memprobe saw: it was running before)" if seen_late(r.get("start_t")) else ""
        notes.append(f"built {fmt.signed_mb(r['built_mb'])} before {since}{seen}")
    if fmt.is_num(r.get("built_between_mb")) and abs(r["built_between_mb"]) >= 1:
        notes.append(
            f"{built_or_freed(r['built_between_mb'])} between worker generations, while none of "
            "its workers lived (not growth)"
        )
    if fmt.is_num(r.get("startup_mb")):
        notes.append(f"start-up copy {fmt.mb(r['startup_mb'])} (not growth)")
    if fmt.is_num(r.get("uss_start_mb")) and r["kind"] in WORKER_KINDS and r.get("startup_mb") is None:
        notes.append("from USS 0 at its fork")
    if fmt.is_num(r.get("allocated_mb")) and r["allocated_mb"] >= 1:
        # The rest of its growth is pages it copied from its parent (``Growth.allocated_mb``, memprobe.analysis.growth).
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
    ram: str | None  # the memory the job must fit in
    over_ram: bool  # some cell needs more than that
    ram_words: str = "this machine's memory"  # what that memory is (memory_limit)


def projection_table(
    s: RunSummary,
    basis: Basis | None,
    ram_mb: float | None,
    ram_words: str = "this machine's memory",
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
    return Projection(
        columns,
        rows,
        assumptions(basis, s.projection_peak),
        fmt.size(ram_mb) if ram_mb else None,
        over,
        ram_words,
    )


def assumptions(b: Basis, peak: dict | None = None) -> list[str]:
    """The projection's assumptions, in words, with the measured numbers they scale; ``peak``:
    the round of the peak total PSS in its parts (summary.json's ``projection_peak``), where the
    projection scales the recording's rounds (:func:`memprobe.analysis.projection.projection`)."""
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
    if peak is not None:
        return [*peak_words(b, peak), *worker_words(b, scaled=True), *others_words(peak["once_mb"])]
    return [parent, *worker_words(b), *others_words(b.others_mb)]


def peak_words(b: Basis, peak: dict) -> list[str]:
    """How the projection scales the recording, and the peak total PSS in its parts: the workers'
    own memory then and the rest, against what the main process (or each rank) held and grew."""
    ranks = " and the ranks' part for the ranks in the column" if b.has_ranks else ""
    lead = (
        "Each figure is this recording's total PSS at its highest, with its workers' private memory (USS) "
        f"counted for the workers in the row in place of the {b.workers} that ran{ranks}: the outlined cell is "
        f"the peak total PSS itself ({fmt.mb(peak['total_mb'])}, at {fmt.seconds(peak['t'])})."
    )
    k, own, once = int(peak["workers"]), float(peak["workers_uss_mb"]), float(peak["once_mb"])
    whose = "the ranks'" if b.has_ranks else "the main process's"
    if not k:
        alone = (
            f"No worker was alive then: the peak is {whose} alone, and no worker count takes it below "
            f"{fmt.mb(peak['total_mb'])}."
        )
        return [lead, alone]
    rest = peak["total_mb"] - own - once
    per_rank = rest / b.ranks
    then = (
        f"Then {k} worker{'s' if k != 1 else ''} held {fmt.mb(own)} of their own ({fmt.mb(own / k)} each); "
        f"the other {fmt.mb(rest)} {'were' if b.has_ranks else 'was'} {whose}"
        + (f" ({fmt.mb(per_rank)} per rank)" if b.has_ranks and b.ranks > 1 else "")
        + (f" and {fmt.mb(once)} of the processes counted once" if once >= 1 else "")
        + "."
    )
    held = (
        f"What {'each rank' if b.has_ranks else 'the main process'} held just before its first worker started "
        "plus its own growth since"
        + (" and what it built between worker generations" if b.built_between else "")
        + f" is {fmt.mb(b.parent_mb)}"
    )
    gap = per_rank - b.parent_mb
    if gap >= 1:
        written = (
            f"pages it copied by writing to pages its workers share ({fmt.signed_mb(b.written_mb)}: the old "
            "pages stay with the workers) and "
            if b.written_mb >= 1
            else ""
        )
        held += (
            f" of it; the other {fmt.signed_mb(gap)} are in no process's own growth: {written}its share of "
            "pages other processes map too (libraries, shared memory)."
        )
    elif gap <= -1:
        held += (
            f"; total PSS counted {fmt.mb(-gap)} less at the peak: that growth came after it, or the process "
            "freed pages it had held."
        )
    else:
        held += " of it."
    return [lead, then, held]


def worker_words(b: Basis, *, scaled: bool = False) -> list[str]:
    """A worker's memory as the projection counts it, and with a full copy of its parent;
    ``scaled``: the projection scales the recording's rounds (the workers' USS at each)."""
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
        if not scaled
        else f"A worker's own memory over its life ({fmt.seconds(b.duration_s)} on average): {start}, then "
        f"{fmt.signed_mb(b.worker_growth_mb)} of its own growth, the mean of the {b.workers_measured} "
        f"worker{'s' if b.workers_measured != 1 else ''} measured. A longer run grows further while workers "
        "are still growing."
    )
    out = [each]
    if b.forked and b.levelled and b.levelled >= b.workers_measured:
        out.append(
            f"“Full copy” is as measured: {all_of(b.workers_measured)} measured levelled off (over the last third of "
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
    return out


def others_words(once_mb: float) -> list[str]:
    if once_mb < 1:
        return []
    return [f"Other processes (launcher, helpers, processes without workers): {fmt.mb(once_mb)}, once."]


def all_of(n: int) -> str:
    return "the one worker" if n == 1 else f"all {n} workers"


def cgroup_facts(limit: dict | None, mem_total_mb: float | None) -> list[tuple[str, str]]:
    """The job against its memory limit (the summary's ``memory_limit``,
    :func:`memprobe.analysis.limit.against_limit`): the limit that applies, the cgroup's charge and
    whose it is, the job's total PSS above it and why, the forecast of the time to the limit, the
    OOM kills while it ran."""
    if not limit:
        return []
    where = f"cgroup v{limit.get('cgroup_version')} {limit.get('cgroup_path')}"
    own = limit.get("cgroup_limit_mb")
    rows = [
        (
            "memory limit",
            f"{fmt.mb(own)} ({where})"
            if own is not None
            else f"none on its cgroup ({where}): the machine's {fmt.mb(mem_total_mb)} applies",
        )
    ]
    start, peak, end = limit.get("charge_start_mb"), limit.get("charge_peak_mb"), limit.get("charge_end_mb")
    if end is not None:
        rows.append(
            (
                "cgroup charge",
                (f"{fmt.mb(start)} as the job started, " if start is not None else "")
                + f"{fmt.mb(end)} at its end"
                + (f", at most {fmt.mb(peak)} read while it ran (once a second)" if peak is not None else "")
                + " (what the OOM killer counts: page cache, shared and kernel memory too, not total PSS; "
                + whose_charge(limit)
                + ")",
            )
        )
    if fmt.is_num(limit.get("pss_above_charge_mb")):
        rows.append(("total PSS above the charge", above_charge_words(limit)))
    parts = limit.get("charge_end_parts_mb")
    if isinstance(parts, dict) and end is not None:
        said = [(CGROUP_PARTS[k], float(parts[k])) for k in CGROUP_PARTS if fmt.is_num(parts.get(k))]
        rows.append(
            (
                "the charge at its end",
                "; ".join(f"{fmt.mb(v)} {words}" for words, v in sorted(said, key=lambda x: -x[1]))
                + " (the cgroup's memory.stat)",
            )
        )
    if isinstance(limit.get("forecast"), dict):
        # Brief among the facts: the record page's section and the terminal say it whole.
        rows.append(
            ("time to the limit", forecast_words.words(limit["forecast"], limit.get("limit_mb"), brief=True))
        )
    kills = limit.get("oom_kills")
    if kills is not None:
        seen = "; ".join(
            f"at {fmt.seconds(k['t'])}: "
            + (", ".join(k["victims"]) if k["victims"] else "no process of the job vanished then")
            for k in limit.get("oom_killed") or []
        )
        rows.append(
            (
                "OOM kills in its cgroup",
                f"{kills} while it ran"
                + (f" ({seen})" if seen else " (a process was killed for memory)" if kills else ""),
            )
        )
    if machine := limit.get("machine_oom_killed"):
        rows.append(
            (
                "OOM kills on the machine",
                f"{sum(int(k.get('kills') or 1) for k in machine)} (a machine-wide count, /proc/vmstat) right "
                "before the job lost "
                + "; ".join(f"{', '.join(k['victims'])} at {fmt.seconds(k['t'])}" for k in machine)
                + ": the machine ran out of memory",
            )
        )
    return rows


def whose_charge(limit: dict) -> str:
    """Whose memory the charge is (:func:`memprobe.analysis.forecast.alone`), in words."""
    others = limit.get("cgroup_others") or {}
    if limit.get("cgroup_alone") is True:
        return (
            "the cgroup held the job alone: its processes, memprobe's and others of under "
            f"{fmt.mb(ALONE_MB)} together"
        )
    if limit.get("cgroup_alone") is False:
        n = int(others.get("processes") or 0)
        named = ", ".join(
            f"{o.get('name')} (pid {o.get('pid')}, {fmt.mb(o.get('rss_mb'))})"
            for o in others.get("largest") or []
        )
        return (
            f"the whole cgroup's: {n} other process{'es' if n != 1 else ''} in it held "
            f"{fmt.mb(others.get('rss_mb'))} of RSS at their most"
            + (f", the largest {named}" if named else "")
            + "; the time to the limit is made of the job's own memory, its room of the whole charge"
        )
    return "the whole cgroup, memprobe and any other process in it included"


def above_charge_words(limit: dict) -> str:
    """Why the job's total PSS peaked above its cgroup's charge: pages charged to other cgroups."""
    why = limit.get("pss_above_charge_why") or {}
    parts = []
    if fmt.is_num(why.get("entered_t")):
        parts.append(
            f"what it allocated before it entered this cgroup, {fmt.seconds(why['entered_t'])} after its start, "
            "stays charged to the cgroup it started in (the kernel does not move a charge with a process)"
        )
    files = (
        f" ({fmt.mb(why['files_mb'])} of files and shared memory resident in its processes then)"
        if fmt.is_num(why.get("files_mb"))
        else ""
    )
    parts.append(
        f"files it maps{files} that a process of another cgroup read first (the interpreter, its "
        "libraries, its data) stay charged to that cgroup, while total PSS counts the job's share of them"
    )
    n = why.get("estimated")
    if isinstance(n, int) and n > 0:
        parts.append(
            f"and total PSS counts {n} process{'es' if n != 1 else ''} never read exactly with an estimate"
        )
    return (
        f"{fmt.signed_mb(limit['pss_above_charge_mb'])} at its peak: pages the job maps are charged to other "
        "cgroups: " + "; ".join(parts)
    )
