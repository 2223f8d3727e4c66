"""A recorded job against the memory it must fit in: the limit that applies (its memory cgroup's
where that is below the machine's memory, :mod:`memprobe.probe.cgroup` read it), the cgroup's
charge over the job (read once a second beside MemAvailable: the system table) and its own
rise, who else the cgroup holds, the job's total PSS above the charge and why, the forecast of
the time to the limit (:mod:`memprobe.analysis.forecast`: the job's own memory, the trend that
persists), and the OOM kills in the cgroup while the job ran, each with the process that
vanished first after it. :func:`against_limit` gives the summary's ``memory_limit``; the record
page and the terminal read it from there.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

import numpy as np
import pandas as pd

from memprobe.analysis import forecast

MACHINE = "this machine's memory"  # what the limit is where no cgroup's is lower


def memory_limit(meta: dict, mem_total_mb: float | None) -> tuple[float | None, str]:
    """The memory the job must fit in, and what it is: its cgroup's limit where that is lower than
    the machine's memory (a container, a SLURM or Kubernetes job), else the machine's
    (:data:`MACHINE`)."""
    machine = mem_total_mb
    group = meta.get("cgroup") or {}
    limit = group.get("limit_mb")
    if isinstance(limit, (int, float)) and (not machine or limit < machine):
        return float(limit), f"the job's memory limit (cgroup v{group.get('version')} {group.get('path')})"
    return (float(machine) if machine else None), MACHINE


RATE_MIN_SPAN_S = (
    3.0  # the charge's rise: over the last third of the readings up to the peak, at least this long
)


def entered_at(meta: dict) -> float:
    """When the job entered the memory cgroup meta.json names (s after the start): 0, unless its
    first process moved into it as it started (cgexec, systemd-run --scope: the sampler followed
    it); the charge and OOM kills read before then were another cgroup's."""
    since = (meta.get("cgroup") or {}).get("since_t")
    return float(since) if isinstance(since, (int, float)) else 0.0


def cgroup_charge(system: pd.DataFrame, samples: pd.DataFrame, since: float = 0.0) -> pd.Series | None:
    """The job's memory cgroup's charge over time (MB, index t), where the sampler read it while
    a process of the job lived (after, it falls by what the job freed: no rate of the job's), from
    ``since`` on (:func:`entered_at`)."""
    charge = _counter(system, "cgroup_mb", since)
    if charge is None:
        return None
    alive = (
        samples.loc[~samples["missing"].fillna(False).astype(bool), "t"]
        if "missing" in samples
        else samples.get("t")
    )
    if alive is not None and len(alive):
        charge = charge[charge.index <= float(alive.max())]
    return charge if len(charge) else None


def kept_charge(system: pd.DataFrame, charge: pd.Series | None) -> pd.Series | None:
    """``charge`` less the cgroup's file cache, read in the same tick
    (:func:`memprobe.probe.cgroup.file_cache`: the kernel reclaims it before it kills); the
    charge as it is where that was not read (an older folder)."""
    if charge is None or "cgroup_file_cache_mb" not in system:
        return charge
    cache = pd.Series(
        pd.to_numeric(system["cgroup_file_cache_mb"], errors="coerce").to_numpy(float), index=system["t"]
    )
    cache = cache[~cache.index.duplicated(keep="last")].reindex(charge.index)
    return charge - cache.fillna(0.0)


def charge_rate(charge: pd.Series | None) -> float | None:
    """The charge's rate as it rose to its peak (MB/min: a least-squares line over the last third
    of the readings up to the peak); None where it cannot be said (too short a record). Up to the
    peak, not the job's end: a job that ended freed its memory in its last seconds, and over its
    last third a job rising 380 MB/min "fell by 397 MB/min". A fact of the whole cgroup, whoever's
    memory it is, and never the forecast: a DataLoader's workers copying within an epoch made it
    +141 MB/min for a job that never reached its limit (:mod:`memprobe.analysis.forecast`)."""
    if charge is None or len(charge) < 3:
        return None
    values = charge.to_numpy(float)
    charge = charge.iloc[: len(values) - int(np.argmax(values[::-1]))]  # up to its peak's last reading
    t = charge.index.to_numpy(float)
    if len(charge) < 3 or t[-1] - t[0] < RATE_MIN_SPAN_S:
        return None
    tail = charge[charge.index >= t[-1] - max((t[-1] - t[0]) / 3, RATE_MIN_SPAN_S)]
    if len(tail) < 3:  # read once a second: a short job's last third holds few readings
        tail = charge.iloc[-3:]
    return float(np.polyfit(tail.index.to_numpy(float), tail.to_numpy(float), 1)[0]) * 60


def oom_kills(
    system: pd.DataFrame,
    samples: pd.DataFrame,
    final: int | None = None,
    since: float = 0.0,
    at_start: int | None = None,
) -> list[tuple[float, list[str]]]:
    """Each rise of the cgroup's OOM-kill counter: when it was seen, and the processes of the
    job that vanished first since the reading before, one tick per kill (the kernel's victims
    as far as memprobe saw: the counter does not say whom it killed; a parent that ends because
    its worker was killed vanishes in the same second, a tick or more later). ``final``: the
    counter as the record ended (meta.json), a last reading where the series stops before; from
    ``since`` on (:func:`entered_at`), ``at_start`` the counter then (meta.json), a first reading."""
    kills = _cgroup_kills(system, samples, final, since, at_start)
    if kills is None:
        return []
    gone = _gone(samples)
    out = []
    for (t0, before), (t1, after) in pairwise(kills.items()):
        if after > before:
            when, names = _vanished(gone[gone["t"] > t0], int(after - before))
            out.append((when if names else float(t1), names))
    return out


MACHINE_KILL_AFTER_S = 1.0  # a process of the job vanishing at most this long after the reading


def machine_oom_kills(
    system: pd.DataFrame,
    samples: pd.DataFrame,
    final: int | None = None,
    since: float = 0.0,
    at_start: int | None = None,
) -> list[tuple[float, int, list[str]]]:
    """Each rise of the machine's OOM-kill counter (/proc/vmstat, machine-wide: any process of
    the machine) that memprobe lays at the job's door: only where a process of the job vanished
    between the reading before and :data:`MACHINE_KILL_AFTER_S` after the one that rose, and the
    job's cgroup's own counter did not rise around it (that kill is :func:`oom_kills`' already:
    :func:`_rose_around`). When, by how many, and whom memprobe saw vanish first; a rise with no
    process of the job vanishing is another program's, and not said. The cgroup's counter from
    ``since`` on, ``final`` and ``at_start`` its counts as the record ended and then (as
    :func:`oom_kills`)."""
    kills = _counter(system, "machine_oom_kills")
    if kills is None:
        return []
    own = _cgroup_kills(system, samples, final, since, at_start)
    gone = _gone(samples)
    out = []
    for (t0, before), (t1, after) in pairwise(kills.items()):
        if after <= before:
            continue
        if own is not None and _rose_around(own, t0, t1):
            continue
        when, names = _vanished(
            gone[(gone["t"] > t0) & (gone["t"] <= t1 + MACHINE_KILL_AFTER_S)], int(after - before)
        )
        if names:
            out.append((when, int(after - before), names))
    return out


def _counter(system: pd.DataFrame, column: str, since: float = 0.0) -> pd.Series | None:
    """A column of the system table over t, its readings from ``since`` on (None: none)."""
    if system.empty or column not in system:
        return None
    series = pd.Series(
        pd.to_numeric(system[column], errors="coerce").to_numpy(float), index=system["t"]
    ).dropna()
    series = series[series.index >= since]
    return series if len(series) else None


def _cgroup_kills(
    system: pd.DataFrame, samples: pd.DataFrame, final: int | None, since: float, at_start: int | None
) -> pd.Series | None:
    """The cgroup's OOM-kill counter over t from ``since`` on (None: never read, an older folder),
    read once a second; ``at_start``, its count at ``since`` (meta.json), a first reading (a kill
    before the first of those readings); ``final``, its count as the record ended, a last reading
    where the series stops below it (a kill in the job's last second)."""
    kills = _counter(system, "cgroup_oom_kills", since)
    if kills is None:
        return None
    if at_start is not None and kills.index[0] > since and at_start <= kills.iloc[0]:
        kills = pd.concat([pd.Series([float(at_start)], index=[since]), kills])
    if final is not None and final > kills.iloc[-1]:
        end = float(kills.index[-1])
        if len(samples) and "t" in samples:  # no sample at all: a command that ended at once
            end = max(end, float(samples["t"].max()))
        kills = pd.concat([kills, pd.Series([float(final)], index=[end])])
    return kills


def _rose_around(own: pd.Series, t0: float, t1: float) -> bool:
    """Whether the cgroup's OOM-kill counter rose around a rise of the machine's between readings
    ``t0`` and ``t1``: from its reading before ``t0`` to its first after ``t1`` (or its last). The
    two counters are read one after the other in a tick, and one kill can fall between the two
    reads: seen on a loaded machine, the machine's counter risen at a tick where the cgroup's had
    not yet, and the cgroup's rise only in the count at the end, 0.6 s later (the kill was said
    twice, the second time machine-wide)."""
    t = own.index.to_numpy(float)
    start = max(int(np.searchsorted(t, t0, side="left")) - 1, 0)
    end = int(np.searchsorted(t, t1, side="right"))
    window = own.iloc[start : end + 1]
    return len(window) > 1 and float(window.max()) > float(window.iloc[0])


def _gone(samples: pd.DataFrame) -> pd.DataFrame:
    """The rows of the processes that vanished (the sampler's ``missing`` rows)."""
    return (
        samples[samples["missing"].fillna(False).astype(bool)] if "missing" in samples else samples.iloc[0:0]
    )


def _vanished(went: pd.DataFrame, ticks: int) -> tuple[float, list[str]]:
    """When and which of ``went``'s processes vanished first: those of its first ``ticks`` ticks."""
    went = went.sort_values("t")
    went = went[went["t"].isin(sorted(went["t"].unique())[:ticks])]
    names = [f"{r['role']} (pid {int(r['pid'])})" for _, r in went.drop_duplicates("pid").iterrows()]
    return (float(went["t"].min()) if len(went) else 0.0), names


def against_limit(
    meta: dict,
    samples: pd.DataFrame,
    system: pd.DataFrame,
    mem_total_mb: float | None,
    *,
    total: pd.Series | None = None,
    workers: Iterable[tuple[int | None, float, float | None, float | None]] = (),
    parents: pd.Series | None = None,
    estimated: int = 0,
) -> dict | None:
    """The summary's ``memory_limit`` of a recorded job (None: no cgroup was read, an older
    folder): the limit and what it is, the cgroup's charge as the job started, at its peak (read
    once a second) and at its end, the charge's own rise before its peak (a fact: whoever's it
    is), the other processes in the cgroup and whether it held the job alone, the job's total
    PSS above the charge (``total``) and why, the forecast of the time to the limit
    (:func:`memprobe.analysis.forecast.forecast`, from the generations of ``workers``: generation,
    start, end or None, own growth; and ``parents``: their own memory), the OOM kills while it
    ran and, for each, when and whom memprobe saw vanish first. ``estimated``: the processes
    total PSS counts with an estimate (never read exactly)."""
    group = meta.get("cgroup")
    if not isinstance(group, dict):
        return None
    limit_mb, words = memory_limit(meta, mem_total_mb)
    since = entered_at(meta)
    charge = cgroup_charge(system, samples, since)
    kills, before = group.get("oom_kills"), group.get("oom_kills_at_start")
    kept = kept_charge(system, charge)
    room = forecast.Room(
        limit_mb,
        limit_mb is not None and limit_mb == group.get("limit_mb"),
        kept,
        _counter(system, "mem_available_mb"),
    )
    others = group.get("others")
    peaks, of = forecast.job_memory(total, kept, forecast.alone(others))
    end = float(samples["t"].max()) if len(samples) and "t" in samples else 0.0
    ahead = forecast.forecast(forecast.generations(workers, end, peaks), parents, room, total, of)
    return {
        "limit_mb": limit_mb,
        "limit_of": words,
        "cgroup_version": group.get("version"),
        "cgroup_path": group.get("path"),
        "cgroup_limit_mb": group.get("limit_mb"),
        "charge_start_mb": group.get("usage_at_start_mb"),
        "charge_peak_mb": float(charge.max()) if charge is not None else None,
        "charge_end_mb": group.get("usage_mb"),
        # What the charge at the end was made of (core.vocabulary.CGROUP_PARTS), where memory.stat said.
        "charge_end_parts_mb": group.get("parts_mb"),
        # The charge's own rise before its peak: a fact, never the forecast (whoever's memory it is).
        "charge_rate_mb_per_min": charge_rate(charge),
        # Who else the cgroup held (its largest reading; None: not read) and whether the job was alone.
        "cgroup_others": others if isinstance(others, dict) else None,
        "cgroup_alone": forecast.alone(others),
        **pss_above_charge(total, charge, samples, since, estimated),
        "forecast": ahead.to_dict(),
        "minutes_to_limit": ahead.minutes_to_limit,  # the forecast's, from its reference (from_t)
        "oom_kills": kills - before if kills is not None and before is not None else None,
        "oom_killed": [
            {"t": t, "victims": who} for t, who in oom_kills(system, samples, kills, since, before)
        ],
        # The machine's OOM killer (its counter machine-wide), where a process of the job vanished
        # right after it rose: a machine out of memory, the job's cgroup without a limit of its own.
        "machine_oom_killed": [
            {"t": t, "kills": n, "victims": who}
            for t, n, who in machine_oom_kills(system, samples, kills, since, before)
        ],
    }


def pss_above_charge(
    total: pd.Series | None, charge: pd.Series | None, samples: pd.DataFrame, since: float, estimated: int = 0
) -> dict:
    """Where the job's total PSS peaked above its cgroup's charge (by more than
    :data:`memprobe.analysis.forecast.PSS_ABOVE_CHARGE_MB`): by how much, and what says why. Pages
    the job maps are charged to other cgroups then: the memory it allocated before it entered
    this cgroup (``entered_t``: the kernel does not move a charge with a process), and files it
    maps (the interpreter, libraries) that a process of another cgroup read first (``files_mb``:
    the job's file-backed and shared resident memory at that peak, summed over its processes);
    and ``estimated``, the processes total PSS holds an estimate for (never read exactly)."""
    if total is None or charge is None or total.dropna().empty:
        return {"pss_above_charge_mb": None}
    over = float(total.max()) - float(charge.max())
    if over <= forecast.PSS_ABOVE_CHARGE_MB:
        return {"pss_above_charge_mb": None}
    at = float(total.idxmax())
    files = None
    if {"rss_file_mb", "rss_shmem_mb"} <= set(samples.columns) and len(samples):
        alive = samples[~samples["missing"].fillna(False).astype(bool)] if "missing" in samples else samples
        ticks = alive["t"].to_numpy(float)
        if len(ticks):
            nearest = float(ticks[np.argmin(np.abs(ticks - at))])
            row = alive[alive["t"] == nearest]
            files = float(
                pd.to_numeric(row["rss_file_mb"], errors="coerce").fillna(0).sum()
                + pd.to_numeric(row["rss_shmem_mb"], errors="coerce").fillna(0).sum()
            )
    return {
        "pss_above_charge_mb": over,
        "pss_above_charge_why": {
            "entered_t": since if since > 0 else None,
            "files_mb": files,
            "estimated": estimated,
        },
    }


def oom_words(limit: dict | None) -> str | None:
    """The OOM kills in the job's cgroup while it ran, and the machine's that a process of the job
    vanished right after, in a sentence for the verdict (None: none, or not known)."""
    if not limit:
        return None
    machine = machine_oom_words(limit)
    if not limit.get("oom_kills"):
        return machine
    seen = [
        f"{', '.join(k['victims'])} at {k['t']:.1f} s" for k in limit.get("oom_killed") or [] if k["victims"]
    ]
    n = limit["oom_kills"]
    who = f": {'; '.join(seen)}" if seen else ""
    own = limit.get("cgroup_limit_mb")
    why = (
        f"its memory cgroup's limit is {own:,.0f} MB"
        if own is not None
        else "its cgroup has no limit: the machine ran out"
    )
    return (
        f"The kernel's OOM killer killed {n} process{'es' if n != 1 else ''} of the job's memory cgroup "
        f"while it ran{who} ({why})." + (f" {machine}" if machine else "")
    )


def machine_oom_words(limit: dict) -> str | None:
    """The machine's OOM kills a process of the job vanished right after, in a sentence."""
    kills = limit.get("machine_oom_killed") or []
    if not kills:
        return None
    n = sum(int(k.get("kills") or 1) for k in kills)
    seen = "; ".join(f"{', '.join(k['victims'])} at {k['t']:.1f} s" for k in kills)
    return (
        f"The machine's OOM killer killed {n} process{'es' if n != 1 else ''} while the job ran (a "
        f"machine-wide count, /proc/vmstat), and right after, the job lost {seen}: the machine ran out "
        "of memory. The count does not say whom it killed; memprobe names the job's processes that "
        "vanished then."
    )
