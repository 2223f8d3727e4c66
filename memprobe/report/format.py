"""Number and time formatting shared by the report and the compare page (also jinja filters)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import TypeGuard

DASH = "–"


def is_num(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def known(v: float | None, pattern: str) -> str | None:
    """``v`` formatted with ``pattern``; None (its row left out) when it is not a number."""
    return pattern.format(v) if is_num(v) else None


def mb(v: float | None) -> str:
    """``1,234 MB``; one decimal below 10 MB so small growth stays visible."""
    if not is_num(v):
        return DASH
    return f"{v:,.1f} MB" if abs(v) < 10 else f"{v:,.0f} MB"


def size(v: float | None) -> str:
    """``1,234 MB``, or ``12.3 GB`` from 10 GB on (projections reach hundreds of GB)."""
    if not is_num(v):
        return DASH
    return f"{v / 1024:,.1f} GB" if abs(v) >= 10 * 1024 else mb(v)


def signed(v: float | None, decimals: int = 0) -> str:
    """``+1,234`` / ``−0.52``: a signed number with a true minus sign."""
    return f"{v:+,.{decimals}f}".replace("-", "−") if is_num(v) else DASH


def signed_mb(v: float | None) -> str:
    if not is_num(v):
        return DASH
    text = f"{v:+,.1f}" if abs(v) < 10 else f"{v:+,.0f}"
    return text.replace("-", "−") + " MB"


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


def seconds(v: float | None) -> str:
    if not is_num(v):
        return DASH
    if v >= 120:
        return f"{int(v // 60)} min {v % 60:.0f} s"
    return f"{v:.2f} s" if v < 10 else f"{v:.1f} s"


def count(v: float | None) -> str:
    return f"{int(v):,}" if is_num(v) else DASH


def percent(v: float | None) -> str:
    return f"{v:+.0%}".replace("-", "−") if is_num(v) else DASH


def timestamp(epoch: float | None) -> str:
    """A wall-clock time as UTC (the results do not record the machine's time zone)."""
    if not is_num(epoch):
        return DASH
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


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
