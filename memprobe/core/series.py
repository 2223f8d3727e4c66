"""Time series reduced from a run's saved tables: the numbers the summary states and the charts
draw come from these functions alone, so a chart and the figure beside it cannot disagree.

Pure functions, tables in, series out. How unreadable processes count, everywhere:

* a row ``missing`` because its process ended (its reason starts with ``exited``, ``zombie`` or
  ``exiting``: :data:`memprobe.core.vocabulary.ENDED_REASONS`) adds nothing: the process is gone;
* a process that was there but could not be read (``missing`` for another reason, or a PSS read
  that failed: a ``cheap`` row with a reason at a PSS round) makes every total it belongs to at
  that time unknown (NaN), never smaller: missing is not zero;
* a process whose memory map the kernel refused memprobe (another user's process: its reason
  starts with :data:`memprobe.core.vocabulary.DENIED_REASON`) would never be readable: the PSS totals
  leave it out for its whole life (:func:`readable`), and the report says so;
* a recorded job's sampler reads exactly only the processes whose memory moved, so at a PSS round
  each other live process counts with its last exact reading, a worker plus what its estimated
  USS gained since, any other process plus what its anonymous RSS gained since
  (:func:`held_readings`); its total is taken at its exact readings and, between them, at cheap
  ticks at least ``TOTAL_STEP_S`` apart (:func:`total_times`), from its first exact reading on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from memprobe.core.vocabulary import (
    DENIED_REASON,
    ENDED_REASONS,
    THREAD_NAME_PREFIX,
    is_loader_role,
    is_worker_role,
    role_order,
)

CPU_MIN_WINDOW_S = 0.5  # CPU times count in 1/100 s: over 0.5 s a rate is good to 0.02 cores
# A recorded job's total between its exact readings: at a cheap tick this long after the last
# time it was taken. Exact readings are spent where memory moves, within a 1 % CPU budget: on a
# tree of 200 forked children (each writing 256 KiB) none came after their fork, and the total,
# taken at exact readings only, had no value while they lived (1-4 MB where every smaps_rollup
# summed to 200 MB, in the recording).
TOTAL_STEP_S = 1.0


# -- items fetched over time ------------------------------------------------------------------


@dataclass(frozen=True)
class Clock:
    """Maps seconds since the run started to the number of items fetched by then."""

    t: np.ndarray
    items: np.ndarray

    @classmethod
    def from_progress(cls, progress: pd.DataFrame) -> Clock:
        if progress.empty or "items" not in progress:
            return cls(np.zeros(0), np.zeros(0))
        p = progress.sort_values("t")
        return cls(p["t"].to_numpy(float), np.maximum.accumulate(p["items"].to_numpy(float)))

    def items_at(self, ts: Sequence[float] | np.ndarray) -> np.ndarray:
        ts = np.asarray(ts, dtype=float)
        if not len(self.t):
            return np.zeros(len(ts))
        idx = np.searchsorted(self.t, ts, side="right") - 1
        return np.where(idx >= 0, self.items[np.clip(idx, 0, None)], 0.0)

    def convert(self, axis: str, ts: Sequence[float] | np.ndarray) -> np.ndarray:
        return np.asarray(ts, dtype=float) if axis == "time" else self.items_at(ts)


def item_rate(
    progress: pd.DataFrame, start: float | None, min_dt: float = 0.25
) -> tuple[np.ndarray, np.ndarray]:
    """Items/s between progress reports at least ``min_dt`` apart, as steps (x: each interval's start)."""
    if progress.empty:
        return np.zeros(0), np.zeros(0)
    p = progress.sort_values("t").drop_duplicates("t", keep="last")
    t, items = p["t"].to_numpy(float), np.maximum.accumulate(p["items"].to_numpy(float))
    # The rate ends with the last item: reports after it (the loader's closing report) add no
    # items and would draw a drop to zero that is not a slowdown.
    last = int(np.argmax(items >= items[-1])) if len(items) else 0
    t, items = t[: last + 1], items[: last + 1]
    if start is not None and (not len(t) or start < t[0]):
        t, items = np.r_[start, t], np.r_[0.0, items]
    span = t[-1] - t[0] if len(t) else 0.0
    step = max(min_dt, span / 400)
    picked = [0]
    for i in range(1, len(t)):
        if t[i] - t[picked[-1]] >= step or i == len(t) - 1:
            picked.append(i)
    # A last interval much shorter than the others (a few items over a few ms) would show as a
    # spike: it joins the interval before it.
    if len(picked) > 2 and t[picked[-1]] - t[picked[-2]] < step / 2:
        del picked[-2]
    t, items = t[picked], items[picked]
    if len(t) < 2:
        return np.zeros(0), np.zeros(0)
    rate = np.diff(items) / np.diff(t)
    return t, np.r_[rate, rate[-1]]  # each rate from its interval's start; the last repeated to the end


# -- which rows count ----------------------------------------------------------------------------


def _reasons(rows: pd.DataFrame) -> pd.Series:
    """Each row's reason as text, "" where it has none (a column of no reasons is read as floats)."""
    return rows["reason"].astype(object).fillna("").astype(str)


def ended(rows: pd.DataFrame) -> pd.Series:
    """Rows whose process had ended (missing, and nothing to count)."""
    return _reasons(rows).str.startswith(ENDED_REASONS)


def failed_reads(rows: pd.DataFrame) -> pd.Series:
    """Rows whose process was there but could not be read (a gap, not a zero)."""
    missing = rows["missing"].fillna(False).astype(bool)
    pss_failed = (rows["tier"] == "cheap") & rows["reason"].notna()
    return (missing & ~ended(rows)) | pss_failed


def readable(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of the processes memprobe may read: those of a process whose memory map the
    kernel refused (a failed PSS read's reason says permission denied) are left out, all of them:
    a gap at every round it lived made the total unknown for the whole run."""
    denied = _reasons(rows).str.startswith(DENIED_REASON) & (rows["tier"] == "cheap")
    return rows[~rows["pid"].isin(rows.loc[denied, "pid"].unique())] if denied.any() else rows


# -- memory totals ----------------------------------------------------------------------------


def total_times(samples: pd.DataFrame) -> np.ndarray:
    """When a total PSS is taken: at every exact reading; for a recorded job (its rows carry the
    sampler's estimate, ``uss_est_mb``) also at cheap ticks ``TOTAL_STEP_S`` or more after the
    last of those times, from its first exact reading on (before it, nothing is known of any
    process's sharing: no total is drawn from nothing)."""
    if samples.empty or "tier" not in samples:
        return np.zeros(0)
    exact = np.sort(samples.loc[samples["tier"] == "pss", "t"].unique().astype(float))
    if not len(exact) or "uss_est_mb" not in samples:
        return exact
    live = ~samples["missing"].fillna(False).astype(bool)  # a tick of ended processes only: nothing to sum
    ticks = np.sort(samples.loc[live & (samples["t"] >= exact[0]), "t"].unique().astype(float))
    out, last = [], -np.inf
    for t, read in zip(ticks, np.isin(ticks, exact), strict=True):
        if read or t - last >= TOTAL_STEP_S - 1e-9:
            out.append(t)
            last = t
    return np.asarray(out, dtype=float)


def held_readings(samples: pd.DataFrame) -> pd.DataFrame:
    """Exact readings, plus, at every time a total is taken (:func:`total_times`), each other
    live process's last exact reading (readings are spent where memory moves, not on every
    process at once; one that was not read has not moved). A live process never read exactly yet
    counts with an estimate (:func:`_unread_pss`). Rows: t, pid, role, pss_mb, uss_mb, held; a
    held worker's USS, like its PSS, plus what its estimated USS gained since its reading."""
    cols = ["t", "pid", "role", "pss_mb", "uss_mb", "held"]
    samples = readable(samples) if not samples.empty else samples
    if samples.empty or not (samples["tier"] == "pss").any():
        return pd.DataFrame(columns=cols)
    missing = samples["missing"].fillna(False).astype(bool)
    exact = samples[(samples["tier"] == "pss") & ~missing].assign(held=False)
    times = total_times(samples)
    # Alive and not read at a reading time; a cheap row with a reason is a failed read, not a hold.
    idle = samples[
        samples["t"].isin(times) & (samples["tier"] == "cheap") & ~missing & samples["reason"].isna()
    ]
    if idle.empty:
        return exact[cols].reset_index(drop=True)
    anon = ["rss_anon_mb"] if "rss_anon_mb" in exact and "rss_anon_mb" in idle else []
    last = (
        exact[["t", "pid", "pss_mb", "uss_mb", "rss_mb", *anon]]
        .rename(columns={"t": "read_t", "rss_mb": "rss_read_mb", "rss_anon_mb": "anon_read_mb"})
        .sort_values("read_t")
    )
    keep = ["t", "pid", "role"] + [c for c in (*_ESTIMATE_COLUMNS, *anon, *LINEAGE) if c in idle]
    carried = pd.merge_asof(
        idle[keep].sort_values("t"), last, left_on="t", right_on="read_t", by="pid", direction="backward"
    ).assign(held=True)
    held = carried.dropna(subset=["pss_mb"])
    if "uss_est_mb" in held:
        # A worker carried at its last reading has gone on: each page it copied or allocated since
        # is a new page of the machine's, which its estimated USS counts (a parent's USS also
        # rises by pages its workers' copies leave it alone with: no new page, not added). Held
        # at their readings alone, the workers of the copy-on-access demo, read once in 18 s
        # while they copied 190 MB more, left its total PSS 13 % under psutil's. What any other
        # process freed since (its RSS fell) is gone from the total: a Lightning rank held at
        # its reading from before it freed 135 MB stood that much over psutil's total.
        # What any other process allocated since (its anonymous RSS rose: a fork and its
        # workers' copies leave that counter as it was) is new pages of its own: the main process
        # of a wide fork tree, read as it started and not again, counted 2 MB where it held 100.
        rise = pd.to_numeric(held["uss_est_mb"], errors="coerce") - held["uss_mb"]
        worker = pd.Series([is_worker_role(str(r)) for r in held["role"]], index=held.index, dtype=bool)
        fell = (held["rss_read_mb"] - pd.to_numeric(held["rss_mb"], errors="coerce")).clip(lower=0.0)
        built = pd.Series(0.0, index=held.index)
        if anon:
            anon_now = pd.to_numeric(held["rss_anon_mb"], errors="coerce")
            built = (anon_now - held["anon_read_mb"]).clip(lower=0.0)
        gained = rise.where(worker & rise.notna(), 0.0)
        held = held.assign(
            pss_mb=held["pss_mb"]
            + gained
            + built.where(~worker, 0.0).fillna(0.0)
            - fell.where(~worker, 0.0).fillna(0.0),
            uss_mb=held["uss_mb"] + gained,
        )
    parts = [exact[cols], held[cols]]
    if "uss_est_mb" in carried:
        unread = carried[carried["pss_mb"].isna()].drop(columns=["pss_mb", "uss_mb"])
        unread = unread.assign(uss_mb=pd.to_numeric(unread["uss_est_mb"], errors="coerce")).dropna(
            subset=["uss_mb"]
        )
        parts.append(_unread_pss(unread, exact)[cols])
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True).sort_values(["t", "pid"], ignore_index=True)


# A process's parent and start (run clock), put on the samples of a recorded job by
# :func:`memprobe.analysis.process.as_analysed`: who holds the pages a process never read shares.
LINEAGE = ("ppid", "start_t")
_ESTIMATE_COLUMNS = ("uss_est_mb", "rss_mb", "kind", "rank")


def _unread_pss(unread: pd.DataFrame, exact: pd.DataFrame) -> pd.DataFrame:
    """PSS of processes never read exactly (``unread``: t, pid, uss_mb from the sampler's
    estimate, rss_mb, kind, rank and, where known, LINEAGE): their USS plus their share of the
    pages they share, RSS - USS times the share (PSS - USS) / (RSS - USS) that the nearest reading
    of a process like them found (same kind and rank, else same kind, else their parent). Only
    where their parent was read after they started: before that, the parent's held reading still
    holds the pages they share. Counted by USS alone, the 8-16 DataLoader workers of torchrun
    and Lightning jobs, read once or never, left total PSS 10-31 % under psutil's (34 outside
    jobs: within 7 % of it with the shares; docs/perf/record.md)."""
    if unread.empty or not set(LINEAGE) <= set(unread.columns) or "rss_mb" not in unread:
        return unread.assign(pss_mb=unread["uss_mb"])
    gap = exact["rss_mb"] - exact["uss_mb"]
    likes = exact.assign(
        share=((exact["pss_mb"] - exact["uss_mb"]) / gap.where(gap >= 1.0)),
        kind=exact["kind"].fillna("") if "kind" in exact else "",
        rank=exact["rank"].fillna(-1).astype(int) if "rank" in exact else -1,
    ).dropna(subset=["share"])[["t", "pid", "kind", "rank", "share"]]
    likes = likes.sort_values("t")
    u = unread.reset_index(names="row").assign(
        kind=lambda d: d["kind"].fillna("") if "kind" in d else "",
        rank=lambda d: d["rank"].fillna(-1).astype(int) if "rank" in d else -1,
        ppid=lambda d: pd.to_numeric(d["ppid"], errors="coerce").fillna(-1).astype(int),
    )
    u = u.sort_values("t")

    def nearest(by: list[str], table: pd.DataFrame, value: str, direction: str = "nearest") -> pd.Series:
        got = pd.merge_asof(u, table, on="t", by=by, direction=direction, suffixes=("", "_r"))
        return got.set_index("row")[value]

    share = nearest(["kind", "rank"], likes.drop(columns="pid"), "share")
    share = share.fillna(nearest(["kind"], likes.drop(columns=["pid", "rank"]), "share"))
    parents = likes.rename(columns={"pid": "ppid"}).drop(columns=["kind", "rank"])
    share = share.fillna(nearest(["ppid"], parents, "share"))
    reads = exact[["t", "pid"]].rename(columns={"pid": "ppid"}).assign(parent_t=lambda d: d["t"])
    parent_t = nearest(["ppid"], reads.sort_values("t"), "parent_t", direction="backward")
    start = pd.to_numeric(u.set_index("row")["start_t"], errors="coerce")
    share = share.where(parent_t >= start, 0.0).fillna(0.0).clip(0.0, 1.0).reindex(unread.index)
    rss = pd.to_numeric(unread["rss_mb"], errors="coerce")
    return unread.assign(pss_mb=unread["uss_mb"] + share * (rss - unread["uss_mb"]).clip(lower=0.0))


def carried_pss(samples: pd.DataFrame) -> pd.DataFrame:
    """PSS per process (columns: pid) at every time some process was read exactly, with the
    processes not read then at their last reading (:func:`held_readings`); NaN where a process
    was not alive or not read yet."""
    rows = held_readings(samples)
    if rows.empty:
        return pd.DataFrame()
    return rows.pivot_table(index="t", columns="pid", values="pss_mb", aggfunc="last")


def pss_by_role(samples: pd.DataFrame, held: pd.DataFrame | None = None) -> pd.DataFrame:
    """PSS summed per role at every PSS round (index t); NaN where a process could not be read.
    ``held``: the samples' :func:`held_readings`, where the caller has them."""
    if samples.empty or "tier" not in samples or not (samples["tier"] == "pss").any():
        return pd.DataFrame()
    rounds = total_times(samples)
    samples = readable(samples)
    at = samples[samples["t"].isin(rounds)]
    # A recorded job's sampler reads only the processes whose memory moved: the others count
    # with their last reading.
    ok = held_readings(samples) if held is None else held
    table = ok.pivot_table(index="t", columns="role", values="pss_mb", aggfunc="sum").reindex(rounds)
    table = table.fillna(0.0)
    for _, row in at[failed_reads(at)].iterrows():
        table.loc[row["t"], row["role"]] = np.nan
    return table[role_order(list(table.columns))]


def by_pid(held: pd.DataFrame, column: str, rounds: pd.Index) -> pd.DataFrame:
    """One column of :func:`held_readings`' rows (``pss_mb``, ``uss_mb``) per process (columns:
    pid) at ``rounds`` (a :func:`pss_by_role` table's index); NaN where a process was not alive
    or not read yet."""
    if held.empty:
        return pd.DataFrame(index=rounds)
    return held.pivot_table(index="t", columns="pid", values=column, aggfunc="last").reindex(rounds)


def total_pss(samples: pd.DataFrame) -> pd.Series:
    """Total PSS of the tree per PSS round; NaN for a round with a process that could not be read."""
    return total_of(pss_by_role(samples))


def total_of(by_role: pd.DataFrame) -> pd.Series:
    """The total of a :func:`pss_by_role` table per round (NaN where a role's sum is): for a
    caller that has the table already, which costs most of an analysis to build."""
    return by_role.sum(axis=1, skipna=False) if not by_role.empty else pd.Series(dtype=float)


def tick_sum(samples: pd.DataFrame, column: str) -> pd.Series:
    """``column`` summed over the tree at every tick (both tiers); NaN for a tick with a process
    that could not be read. A tick whose processes had all ended has nothing to sum: left out."""
    if samples.empty or column not in samples:
        return pd.Series(dtype=float)
    missing = samples["missing"].fillna(False).astype(bool)
    gone = missing & ended(samples)
    ticks = np.sort(samples.loc[~gone, "t"].unique())
    totals = samples[~missing].groupby("t")[column].sum().reindex(ticks)
    totals.loc[totals.index.isin(samples[missing & ~gone]["t"].unique())] = np.nan
    return totals


def sum_rss(samples: pd.DataFrame) -> pd.Series:
    """Sum of RSS over the tree at every tick: what summing RSS would report (shared pages counted
    once per process that maps them)."""
    return tick_sum(samples, "rss_mb")


def shm_mapped(samples: pd.DataFrame) -> pd.Series:
    """Shared memory (RssShmem: /dev/shm files, shared anonymous memory) mapped by the run's
    processes, summed over them at every tick."""
    return tick_sum(samples, "rss_shmem_mb")


def shm_used(samples: pd.DataFrame, min_mb: float = 1.0) -> bool:
    """Whether the run's own processes mapped at least ``min_mb`` of shared memory at some tick (e.g.
    batches handed from worker processes to the main process as tensors in /dev/shm). Judged on the
    run's processes, not on /dev/shm as a whole: that is the whole machine's, and other programs
    create and delete files there while a run goes."""
    mapped = shm_mapped(samples)
    return bool(mapped.notna().any() and mapped.max() >= min_mb)


# -- CPU --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuCounter:
    """One process's (or thread's) cumulative CPU seconds at its readable samples, the band of the
    chart it adds to, and until when it was alive but unreadable after its last reading."""

    band: str
    t: np.ndarray
    cpu_s: np.ndarray
    unknown_until: float | None = None


def _counters(band: str, t: np.ndarray, cpu: np.ndarray, unknown_until: float | None) -> list[CpuCounter]:
    """Split where the counter goes down (a pid reused by a new process): each part counts on its own."""
    parts = np.split(np.arange(len(t)), np.flatnonzero(np.diff(cpu) < 0) + 1)
    return [
        CpuCounter(band, t[i], cpu[i], unknown_until if k == len(parts) - 1 else None)
        for k, i in enumerate(parts)
        if len(i)
    ]


def process_counters(samples: pd.DataFrame, skip: frozenset[int] = frozenset()) -> list[CpuCounter]:
    """A CPU counter per process of the run (but the pids in ``skip``), banded by its last role:
    main, each worker and rank process apart, every helper process together."""
    if samples.empty or "cpu_s" not in samples:
        return []
    rows = samples[~(samples["missing"].fillna(False).astype(bool) & ended(samples))].sort_values("t")
    out = []
    for pid, g in rows.groupby("pid", sort=False):
        if pid in skip:
            continue
        ok = ~g["missing"].fillna(False).astype(bool) & g["cpu_s"].notna()
        if not ok.any():
            continue
        t, cpu = g.loc[ok, "t"].to_numpy(float), g.loc[ok, "cpu_s"].to_numpy(float)
        later_failed = g.loc[~ok & (g["t"] > t[-1]), "t"]
        role = g["role"].iloc[-1]
        out += _counters(
            role if is_loader_role(role) else "other processes",
            t,
            cpu,
            float(later_failed.max()) if len(later_failed) else None,
        )
    return out


def thread_counters(threads: pd.DataFrame, main_pid: int) -> list[CpuCounter]:
    """A CPU counter per thread of the main process, banded as the main thread, each loader worker
    thread (by its OS name; a restarted worker joins its band), and the other threads together."""
    if threads.empty or "cpu_s" not in threads:
        return []
    out = []
    for tid, g in threads.dropna(subset=["cpu_s"]).sort_values("t").groupby("tid", sort=False):
        name = str(g["name"].iloc[-1])
        band = (
            "main thread"
            if tid == main_pid
            else f"worker thread {name.removeprefix(THREAD_NAME_PREFIX)}"
            if name.startswith(THREAD_NAME_PREFIX)
            else "other threads"
        )
        out += _counters(band, g["t"].to_numpy(float), g["cpu_s"].to_numpy(float), None)
    return out


def cpu_bands(
    counters: list[CpuCounter], min_dt: float = CPU_MIN_WINDOW_S
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """CPU cores used per band in windows at least ``min_dt`` long: (window midpoints, band -> cores).

    Each counter is interpolated at the window edges and held outside its own life, so a process or
    thread adds what it used while it was sampled and nothing else: one that ends stops adding
    (no drop of its cumulative count), one that could not be read for a few ticks is bridged by its
    counter, and one that stayed unreadable until it ended makes its band unknown (NaN) there."""
    counters = [c for c in counters if len(c.t)]
    if not counters:
        return np.zeros(0), {}
    t0 = min(c.t[0] for c in counters)
    t1 = max(max(c.t[-1], c.unknown_until or c.t[-1]) for c in counters)
    if t1 - t0 < min_dt:
        return np.zeros(0), {}
    edges = np.linspace(t0, t1, max(1, int((t1 - t0) // max(min_dt, (t1 - t0) / 200))) + 1)
    used: dict[str, np.ndarray] = {}
    for c in counters:
        add = np.diff(np.interp(edges, c.t, c.cpu_s))
        if c.unknown_until is not None:
            add[(edges[1:] > c.t[-1]) & (edges[:-1] < c.unknown_until)] = np.nan
        used[c.band] = used.get(c.band, np.zeros(len(add))) + add
    return (edges[:-1] + edges[1:]) / 2, {band: u / np.diff(edges) for band, u in used.items()}


def cores_used(counters: list[CpuCounter], start: float, end: float) -> float | None:
    """CPU cores the counters used on average between ``start`` and ``end``: the same counters,
    interpolated the same way, as the bands of :func:`cpu_bands`. None when some counter was
    unknown (alive but unreadable) during that time, or there is none."""
    counters = [c for c in counters if len(c.t)]
    if not counters or end <= start:
        return None
    for c in counters:
        if c.unknown_until is not None and c.t[-1] < end and c.unknown_until > start:
            return None
    used = sum(float(np.interp(end, c.t, c.cpu_s) - np.interp(start, c.t, c.cpu_s)) for c in counters)
    return used / (end - start)
