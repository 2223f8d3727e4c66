"""Number and time formatting shared by the report and the compare page (also jinja filters)."""

from __future__ import annotations

from datetime import datetime, timezone

from memprobe.core.units import DASH, is_num, mb

__all__ = ["DASH", "is_num", "mb"]


def known(v: float | None, pattern: str) -> str | None:
    """``v`` formatted with ``pattern``; None (its row left out) when it is not a number."""
    return pattern.format(v) if is_num(v) else None


def size(v: float | None) -> str:
    """``1,234 MB``, or ``12.3 GB`` from 10 GB on (projections reach hundreds of GB)."""
    if not is_num(v):
        return DASH
    return f"{v / 1024:,.1f} GB" if abs(v) >= 10 * 1024 else mb(v)


def signed(v: float | None, decimals: int = 0) -> str:
    """``+1,234`` / ``−0.52``: a signed number with a true minus sign."""
    return f"{v:+,.{decimals}f}".replace("-", "−") if is_num(v) else DASH


def signed_mb(v: float | None) -> str:
    """``+12 MB`` / ``−3.5 MB`` (:func:`memprobe.core.units.mb` with its sign)."""
    return mb(v, sign=True)


def rate(v: float | None, noun: str = "items") -> str:
    """Items (or images) per second, compact: ``53.8k items/s``."""
    if not is_num(v):
        return DASH
    if v >= 1e6:
        return f"{v / 1e6:.2f}M {noun}/s"
    return f"{v / 1e3:.1f}k {noun}/s" if v >= 1e3 else f"{v:.0f} {noun}/s"


def rate_short(v: float | None) -> str:
    """Items per second without the unit (table headers carry it): ``53.8k``."""
    return rate(v).removesuffix(" items/s")


MINUTE, HOUR, DAY = 60, 3600, 86400


def seconds(v: float | None) -> str:
    """A duration in the unit that fits: ``3.82 s``, ``12.3 s``, ``4 min 10 s`` from 2 minutes,
    ``5 h 12 min`` from 2 hours, ``3 days 4 h`` from 2 days."""
    if not is_num(v):
        return DASH
    if v < 2 * MINUTE:
        return f"{v:.2f} s" if v < 10 else f"{v:.1f} s"
    whole = round(v)
    if whole < 2 * HOUR:
        return f"{whole // MINUTE} min {whole % MINUTE} s"
    whole = round(v / MINUTE) * MINUTE
    if whole < 2 * DAY:
        return f"{whole // HOUR} h {whole % HOUR // MINUTE} min"
    whole = round(v / HOUR) * HOUR
    return f"{whole // DAY} days {whole % DAY // HOUR} h"


def span(start: float | None, end: float | None, dash: str = "–") -> str:
    """A time range since the job started, both ends in the unit that fits the end:
    ``0.0–3.8 s``, ``1.5–95.3 min``, ``0.0–72.2 h``, ``0.0–3.0 days``."""
    if not is_num(start) or not is_num(end):
        return DASH
    start = max(start, 0.0) + 0.0  # no "-0.0": a process started just before the job's clock
    if end < 2 * MINUTE:
        unit, size = "s", 1
    elif end < 2 * HOUR:
        unit, size = "min", MINUTE
    else:
        unit, size = ("h", HOUR) if end < 2 * DAY else ("days", DAY)
    return f"{start / size:.1f}{dash}{end / size:.1f} {unit}"


def count(v: float | None) -> str:
    return f"{int(v):,}" if is_num(v) else DASH


def percent(v: float | None) -> str:
    return f"{v:+.0%}".replace("-", "−") if is_num(v) else DASH


def timestamp(epoch: float | None) -> str:
    """A wall-clock time as UTC (the results do not record the machine's time zone)."""
    if not is_num(epoch):
        return DASH
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def clock(epoch: float) -> str:
    """The time of day of a wall-clock time, as UTC: ``HH:MM:SS UTC``."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M:%S UTC")


FILTERS = {
    "mb": mb,
    "size": size,
    "signed_mb": signed_mb,
    "rate": rate,
    "seconds": seconds,
    "count": count,
    "percent": percent,
    "timestamp": timestamp,
}
