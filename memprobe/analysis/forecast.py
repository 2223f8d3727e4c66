"""When a recorded job would reach its memory limit: a forecast from the job's own memory and from
the trend in it that persists, with the spread it is known to, or none where nothing persists.
The summary's ``memory_limit.forecast`` (:func:`memprobe.analysis.limit.against_limit`) and the live
view's time to the limit (:mod:`memprobe.live.model`) are both this module's, by the same rule;
the record page, the terminal and the live view word it with
:func:`memprobe.core.forecast_words.words`.

The rule:

* **The job's own memory.** The memory the trend is taken of is the job's: its total PSS (every
  process of its tree, :mod:`memprobe.core.series`), or its memory cgroup's charge less its
  file cache only where the cgroup held the job alone (:func:`alone`: the other
  processes in its process list, read by the sampler now and then, held less than
  :data:`ALONE_MB` together; :func:`job_memory`). Never the charge of a cgroup shared with other
  processes (a desktop session, a shared container, a CI runner: their memory moves it), nor its
  file cache (files read, written or mapped: the kernel reclaims them before it kills). The room
  is the limit less the whole charge but its file cache (another process's memory counts against
  the limit as much as the job's), or MemAvailable where the machine's memory can run out first, whichever
  is less; without either, the limit less the job's total PSS (:class:`Room`).
* **The trend that persists.** With at least :data:`MIN_GENERATIONS` generations of worker
  processes that ended (a DataLoader recreates its workers every epoch, unless they persist):
  the peak of that memory while each generation lived, and a least-squares line through the peaks
  of the latest half of them (at least :data:`FIT_GENERATIONS`; a peak far below the line through
  the others was missed between exact readings, and is left out): MB per generation, and the
  generations' start times give its seconds. Within one generation, workers copying their
  parent's pages (copy-on-access) raise it in a ramp that falls back when they end: that
  ramp is no trend (a job told "14 min 48 s" at +141 MB/min by it peaked at 3.2 GB of its 4 GB
  over 40 epochs). Otherwise (one or two generations, or none): the parents' own memory (main,
  rank and launcher processes: their anonymous RSS summed over their windows, the memory they
  allocate; their workers' copies leave it alone), a line over the latest half of the window.
* **The spread it is known to.** Generations: the line's slope within its 95 % interval
  (Student's t over the peaks fitted), and the epochs' pace within its own (a line through their
  start times). The parents: from the least to the most of the slopes over the latest half and
  over each of its two halves (a rise seen in both). The time to the limit runs from the fastest of those
  rates to the slowest; where the slowest is not rising, there is no upper end.
* **None where nothing persists**: no forecast where the slowest rate is not rising (below
  :data:`RISING_MB_PER_MIN`, or a generation's peaks no higher than the one before), where the
  record is too short to say, or no limit is known; the reason is kept (``why_none``).

Everything here is numbers in, numbers out (``pd.Series`` indexed by seconds since the start);
no /proc, no file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from memprobe.analysis.lines import line, not_missed
from memprobe.analysis.windows import STILL_MB, TEARDOWN_MB, TEARDOWN_S
from memprobe.core.tree_rules import ALONE_MB
from memprobe.core.units import is_num

MIN_GENERATIONS = 3  # generations that ended, for a trend across them
FIT_GENERATIONS = 6  # the line runs through the latest half of them, and at least this many
RISING_MB_PER_MIN = 1.0  # the slowest rate at least this: rising
PARENT_MIN_SPAN_S = 20.0  # the parents' latest half at least this long, for a rate over it
PARENT_MIN_POINTS = 6  # ... with this many readings at least (three in each of its halves)
ENDED_BEFORE_S = 1.0  # a generation whose workers all ended this long before the record's end ended
PSS_ABOVE_CHARGE_MB = 16.0  # total PSS above the charge by more than this is said, with why


@dataclass(frozen=True)
class Generation:
    """One generation of worker processes (an epoch's DataLoader workers): when the first
    started and the last ended, whether all had ended (``ended``: a generation cut short by the
    record's end, or by an OOM kill's aftermath, still running has no peak of its own yet), its
    workers' mean and largest own growth (the analysis's; None live), and the job's total PSS at
    its highest while it lived (``peak_mb``, at ``peak_t``) and at its lowest before (``start_mb``)."""

    generation: int  # 0 for the first, as the meta numbers them
    start_t: float
    end_t: float
    ended: bool
    workers: int
    growth_mb: float | None = None
    growth_max_mb: float | None = None
    peak_mb: float | None = None
    peak_t: float | None = None
    start_mb: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def generations(
    workers: Iterable[tuple[int | None, float, float | None, float | None]],
    record_end_t: float,
    total: pd.Series | None = None,
) -> list[Generation]:
    """The generations of ``workers`` (generation, start, end or None while alive, own growth or
    None) in order, each with its peak of ``total`` (the job's memory: :func:`job_memory`) while
    it lived."""
    by_gen: dict[int, list[tuple[float, float | None, float | None]]] = {}
    for gen, start, end, growth in workers:
        if gen is not None and is_num(start):
            by_gen.setdefault(int(gen), []).append((float(start), end, growth))
    out = []
    for gen in sorted(by_gen):
        members = by_gen[gen]
        ends = [e for _, e, _ in members if is_num(e)]
        end = max(ends) if ends else record_end_t
        ended = len(ends) == len(members) and end <= record_end_t - ENDED_BEFORE_S
        grown = [g for _, _, g in members if is_num(g)]
        out.append(
            Generation(
                gen,
                min(s for s, _, _ in members),
                float(end),
                ended,
                len(members),
                float(np.mean(grown)) if grown else None,
                max(grown) if grown else None,
            )
        )
    if total is None:
        return out
    memory = total.dropna().sort_index()
    t, v = memory.index.to_numpy(float), memory.to_numpy(float)
    return [with_peak(g, t, v) for g in out]


def with_peak(g: Generation, t: np.ndarray, v: np.ndarray) -> Generation:
    """``g`` with the job's memory (``v`` at times ``t``, in order) at its highest while the
    generation lived, and at its lowest then before that peak (``start_mb``: once the generation
    before had ended; a DataLoader starts an epoch's workers before the last epoch's have
    exited)."""
    lo, hi = np.searchsorted(t, g.start_t, "left"), np.searchsorted(t, g.end_t, "right")
    if hi <= lo:
        return g
    during = v[lo:hi]
    top = int(np.argmax(during))  # its first reading at the peak
    return replace(
        g, peak_mb=float(during[top]), peak_t=float(t[lo + top]), start_mb=float(during[: top + 1].min())
    )


@dataclass(frozen=True)
class Room:
    """What the job may still grow by before its limit, at a moment of the record: the limit less
    the cgroup's charge where the cgroup's limit applies (``charge``: MB over t; the whole charge,
    whoever's), MemAvailable (``available``) where the machine's memory can run out first, the
    lesser of the two; without either, the limit less the job's total PSS."""

    limit_mb: float | None
    cgroup_limit: bool  # the cgroup's limit is the one that applies (else the machine's memory)
    charge: pd.Series | None = None
    available: pd.Series | None = None

    def at(self, t0: float, t1: float, total_mb: float) -> tuple[float, float, str] | None:
        """(room MB, the level it is measured from MB, what that level is: ``charge``,
        ``available`` or ``total_pss``) over ``t0``..``t1`` (the highest charge, the least
        MemAvailable read then, a second either side); None without a limit."""
        if not self.limit_mb:
            return None
        found: list[tuple[float, float, str]] = []
        if self.cgroup_limit and (c := _within(self.charge, t0, t1)) is not None:
            level = float(c.max())
            found.append((self.limit_mb - level, level, "charge"))
        if (a := _within(self.available, t0, t1)) is not None:
            free = float(a.min())
            found.append((free, self.limit_mb - free, "available"))
        if not found:
            found.append((self.limit_mb - total_mb, total_mb, "total_pss"))
        room, level, of = min(found)
        return max(room, 0.0), level, of


def _within(series: pd.Series | None, t0: float, t1: float) -> pd.Series | None:
    """``series``' readings from a second before ``t0`` to a second after ``t1`` (read once a
    second: a peak between two readings has one on either side), else its last before ``t1``."""
    if series is None or series.empty:
        return None
    s = series.dropna()
    inside = s[(s.index >= t0 - 1.0) & (s.index <= t1 + 1.0)]
    if len(inside):
        return inside
    before = s[s.index <= t1]
    return before.iloc[-1:] if len(before) else None


@dataclass(frozen=True)
class Forecast:
    """A forecast of when the job reaches its limit (summary.json ``memory_limit.forecast``; see
    docs/results-format.md). ``basis``: what it was made from (``generations``: the peaks of
    worker generations; ``parents``: the parents' own memory), None where there is none
    (``why_none``: ``no_limit``, ``too_short``, ``not_rising``). Rates in MB/min from the
    fastest (``rate_high``) to the slowest (``rate_low``); times in seconds since the job's start
    (``limit_at_t`` at the central rate, ``limit_at_soonest_t``, ``limit_at_latest_t``: None
    where the slowest rate is not rising), minutes from ``from_t`` (its reference: the last
    generation's peak, or the parents' last reading)."""

    basis: str | None
    why_none: str | None = None
    peaks_of: str = "total_pss"  # what each generation's peak is of: total_pss, or charge (the job alone)
    generations: list[Generation] = field(default_factory=list)
    fitted_from: int | None = None  # the first generation of the line (the latest half)
    missed: list[int] = field(default_factory=list)  # generations of it whose peak was missed: left out
    per_generation_mb: float | None = None
    per_generation_low_mb: float | None = None
    per_generation_high_mb: float | None = None
    seconds_per_generation: float | None = None
    line_at_zero_mb: float | None = None  # the line's value at generation 0: peak = this + per_generation x g
    limit_in_peaks_mb: float | None = None  # the limit in the peaks' terms: the last peak plus the room
    worker_growth_per_generation_mb: float | None = None  # each generation's workers grew this much more
    ramp_mb: float | None = (
        None  # what the last generation's workers added within it, which their end takes back
    )
    ramp_mb_per_min: float | None = None
    rate_mb_per_min: float | None = None
    rate_low_mb_per_min: float | None = None
    rate_high_mb_per_min: float | None = None
    from_t: float | None = None
    level_mb: float | None = None
    level_of: str | None = None  # charge | available | total_pss
    room_mb: float | None = None
    minutes_to_limit: float | None = None
    minutes_soonest: float | None = None
    minutes_latest: float | None = None
    limit_at_t: float | None = None
    limit_at_soonest_t: float | None = None
    limit_at_latest_t: float | None = None
    generation_at_limit: float | None = None  # counted from 1, as the words say "epoch"
    generation_at_limit_soonest: float | None = None
    generation_at_limit_latest: float | None = None

    def to_dict(self, generations: bool = True) -> dict:
        """Its fields, each generation's as a dict (``generations``: False, none: the live view's
        brief words need none, and forty generations' took most of its time)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "generations"}
        out["generations"] = [g.to_dict() for g in self.generations] if generations else []
        return out


def forecast(
    gens: list[Generation],
    parents: pd.Series | None,
    room: Room,
    total: pd.Series | None = None,
    peaks_of: str = "total_pss",
) -> Forecast:
    """The forecast by the rule (module doc): across ``gens`` where at least
    :data:`MIN_GENERATIONS` ended (their peaks of ``peaks_of``: :func:`job_memory`), else from
    ``parents`` (their own memory summed, MB over t); ``total``, the job's total PSS, is the level
    where neither the charge nor MemAvailable was read."""
    ended = [g for g in gens if g.ended and g.peak_mb is not None]
    base = Forecast(None, peaks_of=peaks_of, generations=gens)
    if len(ended) >= MIN_GENERATIONS:
        return _across_generations(base, ended, room)
    return _from_parents(base, parents, room, total)


def _across_generations(base: Forecast, ended: list[Generation], room: Room) -> Forecast:
    fitted = ended[-max(FIT_GENERATIONS, math.ceil(len(ended) / 2)) :]
    x = np.array([g.generation for g in fitted], float)
    y = np.array([g.peak_mb for g in fitted], float)
    kept = not_missed(x, y)
    slope, half = line(x[kept], y[kept])
    pace, pace_half = line(x, np.array([g.start_t for g in fitted], float))
    grown = [g for g in fitted if g.growth_mb is not None]
    last = ended[-1]
    # The rise within the last generation, which its end takes back: its workers' own growth where
    # the analysis measured it (total PSS between exact readings holds the workers that ended at
    # their last reading: it dipped 1,300 MB as a new generation started, a ramp of none), else
    # its memory's peak above its low before it.
    ramp = (
        last.growth_mb * last.workers
        if last.growth_mb is not None
        else (last.peak_mb or 0.0) - (last.start_mb if last.start_mb is not None else last.peak_mb or 0.0)
    )
    ramp_s = (last.peak_t or last.start_t) - last.start_t
    f = replace(
        base,
        basis="generations",
        fitted_from=fitted[0].generation,
        per_generation_mb=slope,
        per_generation_low_mb=slope - half,
        per_generation_high_mb=slope + half,
        seconds_per_generation=pace if pace > 0 else None,
        line_at_zero_mb=float(y[kept].mean() - slope * x[kept].mean()),
        missed=[int(g) for g in x[~kept]],
        worker_growth_per_generation_mb=(
            line(
                np.array([g.generation for g in grown], float), np.array([g.growth_mb for g in grown], float)
            )[0]
            if len(grown) >= MIN_GENERATIONS
            else None
        ),
        ramp_mb=ramp,
        ramp_mb_per_min=ramp / ramp_s * 60 if ramp_s > 0 else None,
    )
    if pace <= 0:
        return replace(f, basis=None, why_none="too_short")
    # The epochs' pace within its own 95 % interval too: the time's spread holds both.
    fast, slow = max(pace - pace_half, pace / 2), pace + pace_half
    f = replace(
        f,
        rate_mb_per_min=slope * 60 / pace,
        rate_low_mb_per_min=(slope - half) * 60 / slow,
        rate_high_mb_per_min=(slope + half) * 60 / fast,
    )
    assert last.peak_t is not None and last.peak_mb is not None
    f = _with_room(f, room, last.start_t, last.end_t, last.peak_t, last.peak_mb, in_peaks=True)
    if f.basis is None or f.room_mb is None:
        return f
    epochs = (f.room_mb / slope, f.room_mb / (slope + half), f.room_mb / (slope - half))
    f = _at(f, (epochs[0] * pace / 60, epochs[1] * fast / 60, epochs[2] * slow / 60))
    return replace(
        f,
        generation_at_limit=last.generation + 1 + epochs[0],  # counted from 1
        generation_at_limit_soonest=last.generation + 1 + epochs[1],
        generation_at_limit_latest=last.generation + 1 + epochs[2],
    )


def _from_parents(base: Forecast, parents: pd.Series | None, room: Room, total: pd.Series | None) -> Forecast:
    if parents is None or len(parents.dropna()) < PARENT_MIN_POINTS:
        return replace(base, why_none="too_short")
    p = parents.dropna().sort_index()
    t = p.index.to_numpy(float)
    mid = (t[0] + t[-1]) / 2
    late = p[p.index >= mid]
    lt = late.index.to_numpy(float)
    if len(late) < PARENT_MIN_POINTS or lt[-1] - lt[0] < PARENT_MIN_SPAN_S:
        return replace(base, why_none="too_short")
    quarter = (lt[0] + lt[-1]) / 2
    halves = [late[late.index <= quarter], late[late.index >= quarter]]
    if min(len(h) for h in halves) < 3:
        return replace(base, why_none="too_short")
    rate = line(lt, late.to_numpy(float))[0] * 60
    # The line over the whole latest half too: a step between its halves puts it outside theirs.
    rates = [rate] + [line(h.index.to_numpy(float), h.to_numpy(float))[0] * 60 for h in halves]
    f = replace(
        base,
        basis="parents",
        rate_mb_per_min=rate,
        rate_low_mb_per_min=min(rates),
        rate_high_mb_per_min=max(rates),
    )
    end = float(lt[-1])
    known = total.dropna()[total.dropna().index <= end] if total is not None else None
    level = float(known.iloc[-1]) if known is not None and len(known) else None
    f = _with_room(f, room, end, end, end, level, in_peaks=False)
    if f.basis is None or f.room_mb is None:
        return f
    return _at(f, (f.room_mb / rate, f.room_mb / max(rates), f.room_mb / min(rates)))


def _with_room(
    f: Forecast, room: Room, t0: float, t1: float, from_t: float, total_mb: float | None, *, in_peaks: bool
) -> Forecast:
    """``f`` with the room at ``from_t`` (measured over ``t0``..``t1``: the last generation's life,
    or the parents' last reading; ``total_mb``: the job's memory then), or none where there is no
    limit (or no level to measure from) or its slowest rate is not rising."""
    got = room.at(t0, t1, total_mb if total_mb is not None else 0.0)
    if got is None or (total_mb is None and got[2] == "total_pss"):
        return replace(f, basis=None, why_none="no_limit")
    space, level, of = got
    f = replace(
        f,
        from_t=from_t,
        level_mb=level,
        level_of=of,
        room_mb=space,
        limit_in_peaks_mb=total_mb + space if total_mb is not None and in_peaks else None,
    )
    low = f.rate_low_mb_per_min
    if (
        low is None
        or low < RISING_MB_PER_MIN
        or (f.per_generation_low_mb is not None and f.per_generation_low_mb <= 0)
    ):
        return replace(f, basis=None, why_none="not_rising")
    return f


def _at(f: Forecast, minutes: tuple[float, float, float]) -> Forecast:
    """``f`` with the minutes to the limit (central, soonest, latest) from its reference, and the
    moments they come (seconds since the start)."""
    assert f.from_t is not None
    return replace(
        f,
        minutes_to_limit=minutes[0],
        minutes_soonest=minutes[1],
        minutes_latest=minutes[2],
        limit_at_t=f.from_t + 60 * minutes[0],
        limit_at_soonest_t=f.from_t + 60 * minutes[1],
        limit_at_latest_t=f.from_t + 60 * minutes[2],
    )


def parents_memory(samples: pd.DataFrame, windows: Iterable[tuple[int, float, float]]) -> pd.Series | None:
    """The parents' own memory over their windows (pid, from, to: main, rank and launcher
    processes, :func:`memprobe.analysis.recorded.parent_windows`): their anonymous RSS summed at each
    tick of the span all of them cover (the memory they allocate: their workers' copies leave it
    alone), without a teardown (a fall of :data:`memprobe.analysis.windows.TEARDOWN_MB` in the last
    :data:`memprobe.analysis.windows.TEARDOWN_S`). None without anonymous RSS (an older folder) or a
    common span."""
    windows = list(windows)
    if not windows or samples.empty or "rss_anon_mb" not in samples:
        return None
    t0, t1 = max(w[1] for w in windows), min(w[2] for w in windows)
    if t1 <= t0:
        return None
    rows = samples[samples["pid"].isin([w[0] for w in windows]) & (samples["t"] >= t0) & (samples["t"] <= t1)]
    rows = rows.assign(anon=pd.to_numeric(rows["rss_anon_mb"], errors="coerce")).dropna(subset=["anon"])
    if rows.empty:
        return None
    wide = rows.pivot_table(index="t", columns="pid", values="anon", aggfunc="last").sort_index().ffill()
    summed = wide.dropna().sum(axis=1)
    if summed.empty:
        return None
    # A program that frees its data as it ends (its last seconds) has not stopped rising.
    peak = float(summed.max())
    at_peak = float(summed[summed >= peak - STILL_MB].index[-1])
    ends = float(summed.index[-1])
    if peak - float(summed.iloc[-1]) >= TEARDOWN_MB and ends - at_peak <= TEARDOWN_S:
        summed = summed[summed.index <= at_peak]
    return summed


# -- whose memory the charge is -------------------------------------------------------------------


def job_memory(
    total: pd.Series | None, kept_charge: pd.Series | None, alone: bool | None
) -> tuple[pd.Series | None, str]:
    """What each generation's peak is taken of: the cgroup's charge less its file cache
    where the cgroup held the job alone (read each second, exactly: total PSS between exact
    readings holds a worker at its last one, and under a loaded machine a generation's peak of
    total PSS was missed by up to 260 MB where the charge's was not), else the job's total PSS
    (the charge of a shared cgroup is others' too)."""
    if alone and kept_charge is not None and len(kept_charge.dropna()):
        return kept_charge, "charge"
    return total, "total_pss"


def alone(others: dict | None) -> bool | None:
    """Whether the job's memory cgroup held the job alone: its other processes (memprobe's own
    and the job's excepted) held less than :data:`ALONE_MB` of RSS together at every reading of
    its process list (the meta's ``cgroup.others``, their largest reading); None where it was
    not read (an older folder). A container's init and the shell that started memprobe are a few
    MB; a desktop session, a CI runner's agent or a second job are more."""
    if not isinstance(others, dict) or not is_num(others.get("rss_mb")):
        return None
    return float(others["rss_mb"]) < ALONE_MB
