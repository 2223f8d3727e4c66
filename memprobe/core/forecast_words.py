"""The time to the limit in words (:mod:`memprobe.analysis.forecast`'s forecast, summary.json's
``memory_limit.forecast``): one sentence for the record page's fact and section and the
terminal's ``memory limit:`` line, and a brief one for the live view (:func:`words`). What the
forecast was made from first (each epoch's workers, the peaks' trend with its interval, the ramp
within an epoch that is no trend; or the main process's own rise), then when the limit comes
(the epoch and the time, with their spread), then the room it was measured from. Standard
library and memprobe's core only: the live view words it every second.
"""

from __future__ import annotations

from memprobe.core.units import is_num, mb


def duration(minutes: float) -> str:
    """A forecast's time, as round as its spread: ``40 s``, ``14 min``, ``3.5 h``, ``6 days``."""
    if minutes < 1:
        return f"{max(minutes * 60, 1):.0f} s"
    if minutes < 120:
        return f"{minutes:.0f} min"
    if minutes < 48 * 60:
        return f"{minutes / 60:.1f} h"
    return f"{minutes / 1440:.0f} days"


def _gb(v: float) -> str:
    """A limit in words: ``4 GB`` (as a user sets it), ``1,500 MB`` below 10 GB when not whole GB."""
    return f"{v / 1024:g} GB" if v >= 1024 and (v / 1024).is_integer() else mb(v, true_minus=False)


WHY_NONE = {
    "no_limit": "no limit known",
    "too_short": "too short a record to tell a trend that persists",
    "not_rising": "nothing of the job's own memory rises in a way that persists",
}


def _spread(low: str, high: str | None) -> str:
    """' (70-81)', ' (44 min to 51 min)', '' where both ends read the same."""
    if high is None:
        return f" (at the soonest {low})"
    return "" if low == high else f" ({low} to {high})"


def words(f: dict | None, limit_mb: float | None, *, brief: bool = False) -> str:
    """The forecast in a sentence (the record page's fact, the terminal's line); ``brief``: the
    live view's line, without what it was made from at length."""
    if not f:
        return "not known"
    limit = _gb(limit_mb) if is_num(limit_mb) else "the limit"
    if f.get("basis") is None:
        why = WHY_NONE.get(str(f.get("why_none")), "not known")
        trend = brief_trend(f) if brief else trend_words(f)
        return f"none: {why}" + (f" ({trend})" if trend else "")
    soon, late = f.get("minutes_soonest"), f.get("minutes_latest")
    when = f"about {duration(f['minutes_to_limit'])}" + (
        _spread(duration(soon), duration(late) if is_num(late) else None) if is_num(soon) else ""
    )
    epoch = f.get("generation_at_limit")
    if is_num(epoch):
        low, high = f.get("generation_at_limit_soonest"), f.get("generation_at_limit_latest")
        at = (
            f"{limit} at about epoch {epoch:.0f}"
            + (_spread(f"{low:.0f}", f"{high:.0f}" if is_num(high) else None) if is_num(low) else "")
            + f", {when} after its last peak"
        )
    else:
        at = f"{limit} in {when}"
    if brief:
        return f"{at}: {brief_trend(f)}"
    return f"{trend_words(f)}; {at} ({room_words(f)})"


def brief_trend(f: dict) -> str:
    """What the forecast was made from, in a few words (the live view)."""
    if is_num(f.get("per_generation_mb")):
        return f"epochs' peaks {mb(f['per_generation_mb'], sign=True, true_minus=False)} each"
    if is_num(f.get("rate_mb_per_min")):
        return f"main process {mb(f['rate_mb_per_min'], sign=True, true_minus=False)}/min"
    return ""


def trend_words(f: dict) -> str:
    """What the forecast was made from, in words: the generations' peaks and their workers, or
    the parents' own rise; with the within-epoch ramp that is no trend."""
    if f.get("per_generation_mb") is not None:
        last = max(
            (int(g["generation"]) + 1 for g in f.get("generations") or [] if g.get("ended")), default=0
        )
        parts = []
        more = f.get("worker_growth_per_generation_mb")
        if is_num(more):
            parts.append(
                f"each epoch's workers grow {_signed(more)} more"
                if abs(more) >= 0.5
                else "each epoch's workers grow as much as the last"
            )
        low, high = (_signed(f[k]) for k in ("per_generation_low_mb", "per_generation_high_mb"))
        parts.append(
            f"{PEAKS_OF.get(str(f.get('peaks_of')), PEAKS_OF['total_pss'])} {_signed(f['per_generation_mb'])} per epoch ("
            + (f"{low} to {high}, " if low != high else "")
            + f"fitted over epochs {int(f['fitted_from']) + 1}-{last}"
            + (
                f", {len(f['missed'])} of whose peaks were missed between exact readings and left out"
                if f.get("missed")
                else ""
            )
            + (f", {_signed(f['rate_mb_per_min'])}/min" if is_num(f.get("rate_mb_per_min")) else "")
            + ")"
        )
        if is_num(f.get("ramp_mb")) and f["ramp_mb"] >= 1 and is_num(f.get("ramp_mb_per_min")):
            parts.append(
                f"within an epoch its workers add {mb(f['ramp_mb'], sign=True, true_minus=False)} "
                f"({mb(f['ramp_mb_per_min'], sign=True, true_minus=False)}/min) and free it as they end: no trend"
            )
        return "; ".join(parts)
    if is_num(f.get("rate_mb_per_min")):
        low, high = (_signed(f[k]) for k in ("rate_low_mb_per_min", "rate_high_mb_per_min"))
        return f"the main process's own memory {_signed(f['rate_mb_per_min'])}/min" + (
            f" ({low} to {high}/min over the two halves of the record's latest half)" if low != high else ""
        )
    return ""


PEAKS_OF = {
    "total_pss": "the job's peak total PSS",
    "charge": "the job's peak (its cgroup's charge less its file cache: the cgroup holds the job alone)",
}


def _signed(v: float) -> str:
    return mb(v, sign=True, true_minus=False)


def room_words(f: dict) -> str:
    """Where the room is measured from: the charge, MemAvailable or the job's total PSS."""
    room, level = mb(f.get("room_mb"), true_minus=False), mb(f.get("level_mb"), true_minus=False)
    return {
        "charge": f"{room} left: the cgroup's charge then, less its file cache (reclaimed before a kill), "
        f"was {level}, all of it counting against the limit",
        "available": f"{room} left: the machine's MemAvailable then",
        "total_pss": f"{room} left above the job's total PSS of {level} then",
    }.get(str(f.get("level_of")), f"{room} left")
