"""The verdict on a recorded job in words (the culprit): who grows, how fast, why, and why the
others are not blamed, from each process's own growth over its window
(:mod:`memprobe.analysis.growth`).
"""

from __future__ import annotations

import numpy as np

from memprobe.analysis.growth import Growth, grown, judged_parents, judged_workers
from memprobe.analysis.process import Proc
from memprobe.analysis.shape import EPOCH_STEPS, SHAPE_MIN_MB, STEADY
from memprobe.core.cures import (
    COPY_ON_ACCESS,
    MAIN_GROWS,
    MAIN_INDEX,
    MAIN_KEEPS,
    SHARED_GROWS,
    STARTUP_COPY,
    WORKERS_ALLOCATE,
    new_memory_part,
)
from memprobe.core.tree_rules import seen_late
from memprobe.core.units import built_or_freed, mb, signed
from memprobe.core.vocabulary import (
    DATALOADER,
    FORK,
    LAUNCHER,
    MAIN,
    RANK,
    WORKER_KINDS,
    kind_words,
)

RELEASED_WORTH_MB = 10.0  # pages made private by others worth a sentence in the culprit
BETWEEN_WORTH_MB = 10.0  # what a parent built between its worker generations worth a sentence
# Below the threshold, forked workers that copied at least this share of it are named: a short
# trial's copy-on-access grows with the dataset (+44 MB each at 100,000 records, ~+350 at 800,000).
COPY_NAMED_SHARE = 0.5
SCALE = 10  # a loop's steady growth below the threshold, projected to this many times the steps


# -- the culprit in words ------------------------------------------------------------------------------


def who(role: str) -> str:
    """'the main process', 'rank 0', 'the launcher'."""
    return {MAIN: "the main process", LAUNCHER: "the launcher"}.get(role, role)


def _possessive(role: str) -> str:
    return f"{who(role)}'s"


def _duration(seconds: float) -> str:
    """'48 s', '12 min', '2.5 h': as long as a job runs, in the unit a person would say."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 2 * 3600 else f"{seconds / 3600:.1f} h"


def _kind_words(kind: str, n: int, method: str | None, generations: int = 1) -> str:
    """'4 DataLoader workers (fork, 2 generations)', '3 forked children'."""
    noun = kind_words(kind, n, default=("worker", "workers"))
    notes = ([method] if kind == DATALOADER and method else []) + (
        [f"{generations} generations"] if generations > 1 else []
    )
    return f"{noun} ({', '.join(notes)})" if notes else noun


def culprit(rows: list[Growth], procs: list[Proc], verdict: str | None, threshold: float) -> str:
    """The verdict in plain words, naming who grows, how fast, and why the others are not blamed."""
    return judge(rows, procs, verdict, threshold)[0]


def judge(
    rows: list[Growth], procs: list[Proc], verdict: str | None, threshold: float, shm_mb: float | None = None
) -> tuple[str, list[str]]:
    """The verdict in words (:func:`culprit`) and the causes it names (:mod:`memprobe.core.cures`'
    names, in the order the words give them; what to do about each is said there). ``shm_mb``:
    how much /dev/shm rose while the job's workers ran
    (:func:`memprobe.analysis.recorded.shm_growth`), blamed above ``threshold``."""
    if verdict is None:
        return "no verdict: no worker or parent process has two exact readings in its window.", []
    if shm_mb is not None and shm_mb > threshold:
        own = judged_workers(rows) + judged_parents(rows)
        words, causes = judge(
            rows, procs, "growing" if any(grown(g) > threshold for g in own) else "flat", threshold
        )
        rest = words.split(": ", 1)[1]  # what the processes did, without its verdict
        return f"growing: {_shm_words(shm_mb)} {_capital(rest)}", [SHARED_GROWS, *causes]
    by_pid = {g.pid: g for g in rows}
    workers, parents = judged_workers(rows), judged_parents(rows)
    unjudged = [g for g in rows if g.kind in WORKER_KINDS and not g.judged]
    tail = (
        f" {len(unjudged)} worker{'s' if len(unjudged) != 1 else ''} had no exact reading to judge "
        f"({', '.join(g.role for g in unjudged[:4])}{', ...' if len(unjudged) > 4 else ''})."
        if unjudged
        else ""
    )
    if verdict == "flat":
        words, causes = _flat_words(workers, parents, threshold, by_pid)
        return words + tail, causes
    growing = [g for g in workers if grown(g) > threshold]
    said = [_group_words(group, by_pid) for group in _worker_groups(growing, by_pid)]
    sentences, causes = [text for text, _ in said], [cause for _, cause in said]
    grew = [g for g in parents if grown(g) > threshold]
    sentences += [_parent_grows(g, workers) for g in grew]
    causes += [parent_cause(g) for g in grew]
    for g in _steady_below(parents, threshold):
        sentences.append(_steady_words(g, workers))
        causes.append(MAIN_KEEPS)
    calm = [
        g
        for g in parents
        if grown(g) <= threshold and (g.released_mb or 0) + (g.written_mb or 0) >= RELEASED_WORTH_MB
    ]
    if calm:
        sentences.append(_not_growing(calm))
    sentences += [
        _capital(f"{who(g.role)} {_between(g)}: not growth.")
        for g in parents
        if grown(g) <= threshold and _between(g)
    ]
    return "growing: " + " ".join(sentences) + tail, list(dict.fromkeys(causes))


def _since(g: Growth, workers: list[Growth]) -> str:
    """Where a parent's window began, in words."""
    if any(w.parent_pid == g.pid for w in workers):
        return "after its first worker started"
    if g.threads_first_t is not None:
        return "after its first thread worker started"
    return "after its first rank started" if g.kind == LAUNCHER else "while the job ran"


def _parent_grows(g: Growth, workers: list[Growth]) -> str:
    besides = f"; besides, it {_between(g)} (not growth)" if _between(g) else ""
    return _capital(
        f"{who(g.role)} grew {signed(grown(g))} of its own {_since(g, workers)}{_rate(g)}"
        f"{SHAPE_WORDS.get(g.shape or '', '')}{besides}."
    )


SHAPE_WORDS = {
    STEADY: ", steadily while its loop ran (the shape of a loop that keeps something every step)",
    EPOCH_STEPS: ", in steps as each generation of its workers began (the shape of a sampler's list of the "
    "epoch's indices)",
}


def parent_cause(g: Growth) -> str:
    """A growing parent's cause, by the shape of its growth: a loop keeping references (a steady
    rise), the sampler's index list (steps as epochs begin), or either (:data:`MAIN_GROWS`)."""
    return {STEADY: MAIN_KEEPS, EPOCH_STEPS: MAIN_INDEX}.get(g.shape or "", MAIN_GROWS)


def _steady_below(parents: list[Growth], threshold: float) -> list[Growth]:
    """Parents whose own growth is below the threshold but a steady rise while their loop ran:
    it grows with the job's steps, however short the trial."""
    return [g for g in parents if g.shape == STEADY and SHAPE_MIN_MB <= grown(g) <= threshold]


def _steady_words(g: Growth, workers: list[Growth]) -> str:
    pace = ([f"{g.growth_mb_per_min:,.1f} MB/min"] if g.growth_mb_per_min is not None else []) + (
        [f"{g.growth_per_1k_items_mb:,.3f} MB per 1,000 items"] if g.growth_per_1k_items_mb else []
    )
    return _capital(
        f"{who(g.role)} rose {signed(grown(g))} of its own {_since(g, workers)}, steadily while its loop "
        f"ran{_listed(pace)}: below the threshold, but a loop that keeps "
        f"something every step grows with the steps ({SCALE} times as many: about {signed(SCALE * grown(g))})."
    )


def _listed(parts: list[str]) -> str:
    return f" ({', '.join(parts)})" if parts else ""


def _between(g: Growth) -> str:
    """What a parent built while none of its workers lived, between two generations of them, in
    words where it is worth saying ('built +65 MB between ...'); '' where it is not."""
    b = g.built_between_mb
    if b is None or abs(b) < BETWEEN_WORTH_MB:
        return ""
    return f"{built_or_freed(b)} between worker generations, while none of its workers lived"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _rate(g: Growth) -> str:
    return f" ({g.growth_mb_per_min:,.0f} MB/min)" if g.growth_mb_per_min is not None else ""


def _worker_groups(workers: list[Growth], by_pid: dict[int, Growth]) -> list[list[Growth]]:
    """Workers of one kind and start method together; per parent, except that the workers of
    every rank make one group (a torchrun job repeats itself per rank)."""
    groups: dict[tuple, list[Growth]] = {}
    for g in workers:
        parent = by_pid.get(g.parent_pid) if g.parent_pid is not None else None
        who_key = "ranks" if parent is not None and parent.kind == RANK else g.parent_pid
        groups.setdefault((who_key, g.kind, g.start_method), []).append(g)
    return list(groups.values())


def _group_words(group: list[Growth], by_pid: dict[int, Growth]) -> tuple[str, str]:
    g0 = group[0]
    parents = list({g.parent_pid: by_pid[g.parent_pid] for g in group if g.parent_pid in by_pid}.values())
    n = len(group)
    gens = len({(g.parent_pid, g.generation) for g in group}) // max(len(parents), 1)
    mean = float(np.mean([g.growth_mb for g in group]))
    span = float(np.mean([(g.last_t or 0) - (g.baseline_t or 0) for g in group]))
    rates = [g.growth_mb_per_min for g in group if g.growth_mb_per_min is not None]
    if n > 1 and rates and span > 0.5:
        # The pace of the figures the sentence gives: a mean of rates over windows of different
        # lengths once said "each grew ~+116 MB in 4 s (3,036 MB/min)".
        rates = [mean / span * 60]
    grew = f"each grew about {mean:,.0f} MB" if n > 1 else f"grew {signed(mean)}"
    workers = _kind_words(g0.kind, n, g0.start_method, gens)
    if len(parents) > 1:
        names = [p.role for p in parents]
        head = f"the {n} {workers} of {', '.join(names[:-1])} and {names[-1]} ({n // len(parents)} each)"
    else:
        head = (f"{_possessive(parents[0].role)} " if parents else "") + (f"{n} " if n > 1 else "") + workers
    per_1k = [g.growth_per_1k_items_mb for g in group if g.growth_per_1k_items_mb is not None]
    pace = ([f"{np.mean(rates):,.0f} MB/min"] if rates else []) + (
        [f"{np.mean(per_1k):,.2f} MB per 1,000 items"] if len(per_1k) == n else []
    )
    said = [", ".join(pace)] if pace else []
    said += [e] if (e := _estimate_words(group)) else []
    text = f"{head} {grew} in {_duration(span)}" + (f" ({'; '.join(said)})" if said else "")
    cause, why = _cause(group, parents)
    return _capital(text + why) + ".", cause


def _estimate_words(group: list[Growth]) -> str:
    """Which figures came from the sampler's estimate, and why (exact readings missed the growth)."""
    guessed = [g for g in group if g.estimated]
    if not guessed:
        return ""
    n, unread = len(group), all(g.pss_samples == 0 for g in guessed)
    why = (
        "no exact reading while " + ("they" if n > 1 else "it") + " lived"
        if unread
        else "they went on growing after their last exact reading"
        if n > 1
        else "it went on growing after its last exact reading"
    )
    if len(guessed) == n:
        return f"estimated from {'their' if n > 1 else 'its'} page faults: {why}"
    return f"{len(guessed)} of them estimated from page faults: the exact readings missed their growth"


def _cause(group: list[Growth], parents: list[Growth]) -> tuple[str, str]:
    """Why such workers grow, named (:mod:`memprobe.core.cures`) and in words: copy-on-access of
    what their parent built, or their own memory."""
    g0 = group[0]
    if not (g0.start_method in (None, FORK) and g0.startup_mb is None):
        return WORKERS_ALLOCATE, ": private memory that grows as they run, after their start-up"
    mostly, new = _new_memory_words(group)
    if mostly:
        return WORKERS_ALLOCATE, new
    return COPY_ON_ACCESS, _copied(parents, new)


def _copied(parents: list[Growth], new: str) -> str:
    """Copy-on-access in words: of what the parent built (or held, when watched late)."""
    built = [p.built_mb for p in parents if p.built_mb is not None]
    if not built:
        return ": copy-on-access of pages they shared at fork" + new
    held = [p.held_mb for p in parents if p.held_mb is not None]
    if held and any(seen_late(p.start_t) for p in parents):
        # Watched from the middle of its life: what memprobe saw it build is not what it built.
        whose = f"{who(parents[0].role)}" if len(parents) == 1 else "each rank"
        amount = (
            f"{min(held):,.0f} MB"
            if max(held) - min(held) < 1
            else f"{min(held):,.0f} to {max(held):,.0f} MB"
        )
        return (
            f": copy-on-access of what {whose} held when {'its' if len(parents) == 1 else 'their'} workers "
            f"started ({amount}; already running when memprobe began watching)" + new
        )
    if len(parents) == 1:
        return (
            f": copy-on-access of what {who(parents[0].role)} built ({signed(built[0])} before its workers "
            "started)" + new
        )
    amount = (
        signed(built[0]) if max(built) - min(built) < 1 else f"{signed(min(built))} to {signed(max(built))}"
    )
    return f": copy-on-access of what each rank built ({amount} before its workers started)" + new


def _shm_words(shm_mb: float) -> str:
    return (
        f"Shared memory in /dev/shm (the whole machine's) rose {signed(shm_mb)} from the first third of "
        "the workers' life to the last, and the job's processes map shared memory: batches the workers "
        "handed over as tensors, kept; no process's own growth counts them, nor total PSS until a process "
        "reads them."
    )


def _new_memory_words(group: list[Growth]) -> tuple[bool, str]:
    """What part of forked workers' growth is memory they allocated (the rise of their anonymous
    RSS since their first tick: a lower bound) rather than pages they copied from their parent:
    (whether it is most of it, so the cause; the words: the cause, a clause when it is a fair
    part, nothing when it is small or not known). The rule is :func:`memprobe.core.cures.new_memory_part`."""
    allocated = [g.allocated_mb for g in group if g.allocated_mb is not None]
    if len(allocated) != len(group):
        return False, ""
    growth = float(np.mean([g.growth_mb or 0.0 for g in group]))
    new = min(float(np.mean(allocated)), growth)
    copied = growth - new
    each, they, their = (" each", "they", "their") if len(group) > 1 else ("", "it", "its")
    part = new_memory_part(growth, new)
    if part == "most":
        return True, (
            f": mostly new memory of {their} own (at least {signed(new)}{each} allocated; at most "
            f"{signed(copied)} copied from {their} parent)"
        )
    if part == "part":
        return False, f"; at least {signed(new)} of that{each} is new memory {they} allocated"
    return False, ""


def _not_growing(parents: list[Growth]) -> str:
    """Why parents whose USS rose are not blamed: their pages became private as their workers
    copied or exited, or by their own writes to pages the workers share; neither is new memory."""

    def why(released: str, written: str, its: str) -> str:
        parts = [f"{released} of {its} pages became private because {its} workers copied or exited"]
        if written:
            parts.append(f"{written} by {its} own writes to pages {its} workers share")
        return "; ".join(parts)

    if len(parents) == 1:
        g = parents[0]
        written = signed(g.written_mb or 0.0) if (g.written_mb or 0.0) >= 1 else ""
        return _capital(
            f"{who(g.role)} is not growing ({signed(grown(g))} of its own): "
            + why(signed(g.released_mb or 0.0), written, "its")
            + "."
        )
    names = ", ".join(who(g.role) for g in parents[:-1]) + f" and {who(parents[-1].role)}"
    low, high = min(g.released_mb or 0.0 for g in parents), max(g.released_mb or 0.0 for g in parents)
    most_written = max(g.written_mb or 0.0 for g in parents)
    return _capital(
        f"{names} are not growing (at most {signed(max(map(grown, parents)))} of their own): "
        + why(
            f"{signed(low)} to {signed(high)}",
            f"up to {signed(most_written)}" if most_written >= 1 else "",
            "their",
        )
        + "."
    )


def _flat_words(
    workers: list[Growth], parents: list[Growth], threshold: float, by_pid: dict[int, Growth]
) -> tuple[str, list[str]]:
    parts = []
    if workers:
        top = max(workers, key=grown)
        guessed = sum(1 for g in workers if g.estimated)
        parts.append(
            f"{len(workers)} worker{'s' if len(workers) != 1 else ''} grew at most {signed(grown(top))}"
            f" ({top.role}{f'; {guessed} estimated from page faults' if guessed else ''})"
        )
    for g in parents:
        since = _since(g, workers)
        text = f"{who(g.role)} {signed(grown(g))}" + (f" {since}" if since != "while the job ran" else "")
        before = "before them" if since == "after its first thread worker started" else "before"
        built = (
            [f"built {signed(g.built_mb)} {before}"]
            if g.built_mb is not None and abs(g.built_mb) >= 1
            else []
        )
        if g.built_between_mb is not None and abs(g.built_between_mb) >= 1:
            built.append(
                f"{'' if built else 'built '}{signed(g.built_between_mb)} between worker generations"
            )
        if built:
            text += f" ({', '.join(built)})"
        parts.append(text)
    text = f"flat: no process grew more than {threshold:g} MB of its own: " + "; ".join(parts) + "."
    causes: list[str] = []
    for group in _copying_below(workers, threshold, by_pid):
        text += " " + _short_trial_copy(group, by_pid)
        causes.append(COPY_ON_ACCESS)
    for g in _steady_below(parents, threshold):
        text += " " + _steady_words(g, workers)
        causes.append(MAIN_KEEPS)
    upfront = [g.startup_mb for g in workers if g.startup_mb is not None]
    if upfront and float(np.mean(upfront)) >= threshold:
        text += (
            f" But each {'spawned ' if len(upfront) == len(workers) else ''}worker started with "
            f"~{float(np.mean(upfront)):,.0f} MB of its own (its start-up copy: paid up front, not growth)."
        )
        causes.append(STARTUP_COPY)
    return text, list(dict.fromkeys(causes))


def _copying_below(workers: list[Growth], threshold: float, by_pid: dict[int, Growth]) -> list[list[Growth]]:
    """Groups of forked workers that copied their parent's pages below the threshold, at least
    :data:`COPY_NAMED_SHARE` of it each on average: copy-on-access on a short trial."""
    out = []
    for group in _worker_groups(workers, by_pid):
        g0 = group[0]
        forked = g0.start_method in (None, FORK) and g0.startup_mb is None
        mean = float(np.mean([grown(g) for g in group]))
        if forked and mean >= COPY_NAMED_SHARE * threshold and not _new_memory_words(group)[0]:
            out.append(group)
    return out


def _short_trial_copy(group: list[Growth], by_pid: dict[int, Growth]) -> str:
    """Copy-on-access below the threshold in words. Still copying as they ended (a trial cut
    short): at their last third's pace per item, what more items would cost, up to a full copy of
    what their parent held. Levelled off: what that size costs, and what tells how it scales."""
    said, _ = _group_words(group, by_pid)
    n = len(group)
    levelled = [g.levelled for g in group]
    head = f"Copy-on-access below the threshold: {said[0].lower()}{said[1:]}"
    if levelled and not any(levelled) and all(v is not None for v in levelled):
        parents = [by_pid[g.parent_pid] for g in group if g.parent_pid in by_pid]
        held = min((p.held_mb for p in parents if p.held_mb is not None), default=None)
        pace = [g.tail_per_1k_items_mb for g in group if g.tail_per_1k_items_mb is not None]
        upto = (
            f", up to a full copy of the {mb(held)} {who(parents[0].role)} held" if held and parents else ""
        )
        more = (
            f" at {float(np.mean(pace)):,.2f} MB per 1,000 items over their last third: each 100,000 more "
            f"items a worker reads would copy about {signed(100 * float(np.mean(pace)))} more{upto}"
            if len(pace) == n
            else f": reading on, each copies more{upto}"
        )
        return f"{head} They were still copying as they ended,{more} (a short trial shows only the start)."
    return (
        f"{head} {'Each' if n > 1 else 'It'} levelled off by its end: about what a worker of this job copies "
        "at this dataset's size. The part of it that is the records' reference counts grows with the "
        "dataset; a part may be a fixed cost (the cyclic GC writing the interpreter's own objects once, "
        "which gc.freeze() removes): record the job at its full size, or try the fixes on the dataset "
        "with memprobe cure, to see which."
    )
