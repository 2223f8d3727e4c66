"""The window over which each kind of process of a recorded job is judged (see
:mod:`memprobe.analysis.growth`): a forked worker from its fork, a spawned one from the end
of its start-up, a parent from just before its first worker to its last tick with workers, and
what a parent built between its worker generations (not growth).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from memprobe.analysis.process import Proc, finite_or, own_workers
from memprobe.core.summary import first
from memprobe.core.tree_rules import STARTUP_MAX_S, startup_end
from memprobe.core.vocabulary import DATALOADER

# A parent's anonymous memory that rose this much between its last tick before its first fork
# and its first tick after was built before the fork (see _parent_before).
BUILT_ACROSS_FORK_MB = 8.0
STILL_MB = 1.0  # a parent's anonymous memory moved less than this before its first worker: nothing built
# A worker's final fall of RSS by this much (or a tenth of its peak), ending with it within
# TEARDOWN_S, is its teardown (see before_teardown).
TEARDOWN_MB, TEARDOWN_S = 16.0, 3.0
FORK_MARGIN_S = 0.5  # a parent's readings this close before its first fork may already follow it
# A worker's start is stamped after the fork copied its parent's page tables, and read in clock
# ticks (START_TICK_S, rounded down): a parent's reading taken from FORK_CLOCK_S before it to a
# tick after may show its pages shared already; one taken later does.
FORK_CLOCK_S, START_TICK_S = 0.05, 0.01
STARTUP_LIFE_SHARE = 0.5  # a spawned worker's start-up ends by then at the latest


Baseline = tuple[pd.DataFrame | None, dict | None, float | None, float | None]


def baseline(
    p: Proc, readings: pd.DataFrame, samples: pd.DataFrame, procs: list[Proc], milestones: dict
) -> Baseline:
    """(readings in the window, a synthetic origin or None, built_mb, startup_mb)."""
    if readings.empty:
        return None, None, None, None
    if p.is_worker and p.forked:
        origin = {"t": p.start_t, "uss_mb": 0.0, "minflt": 0.0, "rss_mb": None, "anon_huge_mb": None}
        return readings[readings["t"] >= p.start_t], origin, None, None
    if p.is_worker:
        t = renamed_t(samples, p.pid)
        if t is None:
            t = settled_t(samples, p)
        window = readings[readings["t"] >= t - 1e-9]
        return window, None, None, first(window["uss_mb"])
    if p.is_parent:
        return _parent_window(p, readings, samples, procs, milestones)
    return readings, None, None, None


def _parent_window(
    p: Proc, readings: pd.DataFrame, samples: pd.DataFrame, procs: list[Proc], milestones: dict
) -> Baseline:
    """From just before its first worker started (the pages a fork then shares are still its own
    there) to its last reading while it had workers: after the last one ends, its pages become
    private again and a program tears its data down, neither of which is growth. With thread
    workers and no worker process, from just before its first thread worker was seen to the last
    tick one was (what it built before is built, not growth: a job whose two thread workers
    read a list built before them was said to grow +69 MB). Without workers: from the job's
    first mark (or its first reading) to its last reading."""
    mine = own_workers(p, procs)
    threads = not mine and p.threads_first_t is not None
    if mine:
        since: float | None = min(q.start_t for q in mine)
    else:
        since = p.threads_first_t if threads else milestones.get("first_mark")
    if since is None:
        return readings, None, None, None
    # Its first tick from then on (read exactly there, as the sampler reads a parent at the tick
    # its children appear, or estimated): what it built just before is not in the window, even
    # when it freed part of it between the last tick before and the fork.
    before = _before_fork(readings[readings["t"] < since], since) if mine else readings[readings["t"] < since]
    pre = _parent_before(p.pid, samples, before, since)
    # Without workers (from the first mark) there is no fork to keep out: the state just before.
    origin = _tick_at(samples, p.pid, since) if mine or threads else pre
    if threads:
        # No fork either, and what it built up to its first tick with them is built: a tick
        # (0.2-0.45 s) can hold the end of a build and a thread's start alike.
        pre = origin if origin is not None and not math.isnan(origin["uss_mb"]) else pre
    if origin is not None:
        window = readings[readings["t"] > origin["t"]]
    else:
        window = readings[readings["t"] >= float(before["t"].iloc[-1])] if len(before) else readings
    if mine or threads:
        # Their last tick alive: once they are seen gone, a program that joined them may already
        # be tearing its data down.
        until = max(q.last_t for q in mine) if mine else finite_or(p.threads_last_t, since)
        during = window[window["t"] <= until]
        window = during if origin is not None or len(during) >= 2 else window
        after = float(window["t"].iloc[-1]) if len(window) else origin["t"] if origin else -math.inf
        window = _to_last_tick(window, samples, p.pid, after, until)
    first = float(readings["uss_mb"].iloc[0])
    if pre is not None:
        built: float | None = pre["uss_mb"] - first
    elif len(before):
        built = float(before["uss_mb"].iloc[-1]) - first
    else:
        built = _built_unread(samples, p.pid, since) if mine else None
    return window, origin, built, None


def _built_unread(samples: pd.DataFrame, pid: int, since: float) -> float | None:
    """What a parent never read exactly before its first worker started built from its first
    tick to then: the rise of its anonymous RSS (read every tick). accelerate's
    ``debug_launcher`` ranks built their lists of dicts (+230 MB each) before a first exact
    reading, and the culprit said the workers copied "pages they shared at fork" instead of what
    each rank built. None when it moved less than a megabyte or was seen only once before."""
    if "rss_anon_mb" not in samples:
        return None
    rows = samples[(samples["pid"] == pid) & (samples["t"] < since)].sort_values("t")
    anon = pd.to_numeric(rows["rss_anon_mb"], errors="coerce").dropna()
    if len(anon) < 2 or abs(float(anon.iloc[-1] - anon.iloc[0])) < STILL_MB:
        return None
    return float(anon.iloc[-1] - anon.iloc[0])


def between_generations(
    p: Proc, samples: pd.DataFrame, procs: list[Proc], t0: float, t1: float
) -> tuple[float | None, float]:
    """What a parent built while none of its workers lived, between two generations of them,
    within its window (``t0`` to ``t1``), and for how long: (MB, or None without such a gap;
    seconds). A gap runs from its last tick with a worker alive to its first tick once the next
    one started, where its window would close and open, and what it built there is the rise of
    its anonymous RSS, the measure of its own growth: what is left of that is its growth while
    workers lived. A Hugging Face job's main ran ``ds.map(num_proc=4)``, then ``to_list()``
    (+65 MB), then a DataLoader, and was said to have grown by it."""
    if "rss_anon_mb" not in samples:
        return None, 0.0
    built, seconds = None, 0.0
    for since, until in worker_gaps(own_workers(p, procs)):
        a, b = _tick_at(samples, p.pid, since), _tick_at(samples, p.pid, until)
        if a is None or b is None or not t0 <= a["t"] <= b["t"] <= t1:
            continue
        rise = finite_or(b["rss_anon_mb"], math.nan) - finite_or(a["rss_anon_mb"], math.nan)
        if not math.isnan(rise):
            built, seconds = (built or 0.0) + rise, seconds + b["t"] - a["t"]
    return built, seconds


def worker_gaps(workers: list[Proc]) -> list[tuple[float, float]]:
    """When none of these processes lived, between two of them: (the last tick one was seen
    alive, the next one's start). Not from the tick they were first seen gone (``end_t``): a
    DataLoader's next workers often start within that tick, and what a Hugging Face job's main
    built between its ``map(num_proc=4)`` pool and its DataLoader was once its "growth"."""
    gaps, alive_until = [], -math.inf
    for q in sorted(workers, key=lambda q: (q.start_t, q.pid)):
        if q.start_t > alive_until > -math.inf:
            gaps.append((alive_until, q.start_t))
        alive_until = max(alive_until, q.last_t)
    return gaps


def _tick_at(samples: pd.DataFrame, pid: int, t: float) -> dict | None:
    """A process's first tick at or after ``t``, as an origin: its exact USS if it was read
    then, else the sampler's estimate (NaN when it had none)."""
    rows = samples[
        (samples["pid"] == pid) & (samples["t"] >= t) & ~samples["missing"].fillna(False).astype(bool)
    ]
    if rows.empty:
        return None
    row = rows.sort_values("t").iloc[0]
    exact = row.get("tier") == "pss" and pd.notna(row.get("uss_mb"))
    uss = row.get("uss_mb") if exact else row.get("uss_est_mb")
    return {
        "t": float(row["t"]),
        "uss_mb": float(uss) if uss is not None and pd.notna(uss) else np.nan,
        "rss_mb": row.get("rss_mb"),
        "rss_anon_mb": row.get("rss_anon_mb"),
        "minflt": row.get("minflt"),
        "anon_huge_mb": row.get("anon_huge_mb") if exact else None,
    }


def before_teardown(samples: pd.DataFrame, pid: int) -> pd.DataFrame:
    """``samples`` without a process's rows taken while it freed its data as it ended: after its
    last tick at its peak RSS, when its RSS then fell by ``TEARDOWN_MB`` or a tenth of that peak
    and it ended within ``TEARDOWN_S``. A spawned worker exits through the interpreter's
    teardown, which frees its copy of the dataset: read then, one had "start-up 97 MB" of its
    139 and a growth of -80 MB. A main process with no worker too: a loop that kept 112 MB was
    caught by its last tick freeing them (RSS 118 -> 36 MB), and its estimate to the end, which
    that tick made lower than its last reading, said "flat". Kept whole where no exact reading of
    it would be left."""
    mine = samples["pid"] == pid
    rows = samples[mine & ~samples["missing"].fillna(False).astype(bool)]
    rows = (
        rows.assign(rss=pd.to_numeric(rows["rss_mb"], errors="coerce"))
        .dropna(subset=["rss"])
        .sort_values("t")
    )
    if len(rows) < 2:
        return samples
    peak = float(rows["rss"].max())
    at_peak = float(rows.loc[rows["rss"] >= peak - STILL_MB, "t"].iloc[-1])
    fell = peak - float(rows["rss"].iloc[-1])
    if fell < max(TEARDOWN_MB, 0.1 * peak) or float(rows["t"].iloc[-1]) - at_peak > TEARDOWN_S:
        return samples
    kept = samples[~mine | (samples["t"] <= at_peak + 1e-9)]
    return kept if ((kept["pid"] == pid) & (kept["tier"] == "pss")).any() else samples


def _to_last_tick(
    window: pd.DataFrame, samples: pd.DataFrame, pid: int, after: float, until: float
) -> pd.DataFrame:
    """A parent's window carried to its last tick while it had workers: its own growth is the
    rise of its anonymous RSS, read every tick, so it needs no exact reading there (its USS there
    is the sampler's estimate). A program that pickled its data to spawn children and freed the
    buffer again has not grown, whenever its last exact reading fell."""
    if "uss_est_mb" not in samples:
        return window
    rows = samples[
        (samples["pid"] == pid)
        & (samples["t"] > after)
        & (samples["t"] <= until)
        & ~samples["missing"].fillna(False).astype(bool)
    ]
    rows = rows[pd.to_numeric(rows["uss_est_mb"], errors="coerce").notna()].sort_values("t")
    if rows.empty:
        return window
    last = rows.iloc[[-1]].assign(uss_mb=lambda d: pd.to_numeric(d["uss_est_mb"]))
    return pd.concat([window, last])


def _before_fork(before: pd.DataFrame, since: float) -> pd.DataFrame:
    """A parent's readings up to its last one before its first fork. A reading is dated by its
    tick's start and taken later in the tick, maybe after a fork that started in between, which
    shows its pages shared already. One taken (``read_t``) after the fork's start is left out (a
    tick dated 0.63 s before a fork of 4 workers read the main process after it, at load 10:
    10.7 MB of its own instead of 209, and the 250 MB it built were said to be 4.5); one taken
    about then (:data:`FORK_CLOCK_S`), or, where a folder does not say when (written before
    ``read_t``), dated within :data:`FORK_MARGIN_S` before it, may follow it: of those and the
    last reading surely before, the largest (a fork only lowers it)."""
    if "read_t" in before:
        taken = pd.to_numeric(before["read_t"], errors="coerce")
        before = before[~(taken >= since + START_TICK_S)]
        taken = taken[before.index]
        unsure = (taken.isna() & (before["t"] >= since - FORK_MARGIN_S)) | (taken >= since - FORK_CLOCK_S)
    else:
        unsure = before["t"] >= since - FORK_MARGIN_S
    if not unsure.any():
        return before
    first_unsure = float(before.loc[unsure, "t"].min())
    sure = before[~unsure & (before["t"] < first_unsure)]
    candidates = pd.concat([sure.iloc[-1:], before[unsure]])
    top = float(candidates.loc[candidates["uss_mb"].idxmax(), "t"])
    return before[before["t"] <= top]


def _parent_before(pid: int, samples: pd.DataFrame, before: pd.DataFrame, since: float) -> dict | None:
    """A parent's state just before ``since`` (its first worker's start, or the first mark) when
    it kept building (or freed) after its last exact reading in ``before``: that reading's USS
    plus the change of its anonymous RSS since (before a first fork every anonymous page is its
    own, and that counter is read every tick). None when it moved less than a megabyte (the
    reading is the start) or there is no reading before."""
    if before.empty or "rss_anon_mb" not in samples:
        return None
    t0, uss0 = float(before["t"].iloc[-1]), float(before["uss_mb"].iloc[-1])
    mine = samples[samples["pid"] == pid].sort_values("t")
    mine = mine.assign(anon=pd.to_numeric(mine["rss_anon_mb"], errors="coerce")).dropna(subset=["anon"])
    rows = mine[(mine["t"] >= t0) & (mine["t"] < since)]
    # A fork leaves the parent's RSS as it was: its first tick after holds no more than it had at
    # the fork, unless it allocated since. What it freed between its last tick and the fork (a
    # temporary list deleted just before the DataLoader started) it did not hold there.
    after = mine[mine["t"] >= since].iloc[:1]
    if len(rows) and len(after):
        rise = float(after["anon"].iloc[0]) - float(rows["anon"].iloc[-1])
        # What it allocated up to that tick, where its window opens, it built before its fork:
        # on a wide tree ticks are up to 2 s apart, and a main process that filled 50 MB more
        # between its last tick before its fork and its first after was said to have built
        # +53.6 MB of its 104. A few MB there may be its workers' set-up after the fork: left out.
        if rise < 0 or rise >= BUILT_ACROSS_FORK_MB:
            rows = pd.concat([rows, after])
    if len(rows) < 2 or abs(float(rows["anon"].iloc[-1] - rows["anon"].iloc[0])) < STILL_MB:
        return None
    last = rows.iloc[-1]
    return {
        "t": float(last["t"]),
        "uss_mb": uss0 + float(last["anon"] - rows["anon"].iloc[0]),
        "rss_mb": last.get("rss_mb"),
        "rss_anon_mb": float(last["anon"]),
        "minflt": last.get("minflt"),
        "anon_huge_mb": None,
    }


def renamed_t(samples: pd.DataFrame, pid: int) -> float | None:
    """When torch renamed a spawn/forkserver DataLoader worker (after it unpickled the dataset):
    its first row as a DataLoader worker after rows as something else."""
    rows = samples[(samples["pid"] == pid) & ~samples["missing"].fillna(False).astype(bool)].sort_values("t")
    if rows.empty:
        return None
    is_dl = (
        rows["kind"] == DATALOADER if "kind" in rows and rows["kind"].notna().any() else rows["worker"] >= 0
    )
    if is_dl.all() or not is_dl.any():
        return None
    return float(rows.loc[is_dl, "t"].iloc[0])


def settled_t(samples: pd.DataFrame, p: Proc) -> float:
    """The end of a spawn/exec child's start-up (:func:`memprobe.core.tree_rules.startup_end`, the rule
    the sampler reads it by), at the latest 10 s after its start or half-way through its life:
    every worker that lives a few seconds has a window to be judged over."""
    end = p.end_t if p.end_t is not None else p.last_t
    limit = p.start_t + min(STARTUP_MAX_S, STARTUP_LIFE_SHARE * max(end - p.start_t, 0.0))
    rows = samples[(samples["pid"] == p.pid) & samples["rss_mb"].notna() & (samples["t"] <= limit)]
    rows = rows.sort_values("t")
    t = rows["t"].to_numpy(float)
    cpu = pd.to_numeric(rows["cpu_s"], errors="coerce").ffill().fillna(0.0) if "cpu_s" in rows else rows["t"]
    found = startup_end(t, rows["rss_mb"].to_numpy(float), cpu.to_numpy(float))
    return found if found is not None else limit
