"""Megabytes in words, one rule for the report, the culprit's sentences and the terminal:
``1,234 MB``, one decimal below 10 MB so small growth stays visible. Standard library only (the
record path words its culprit without importing the report)."""

from __future__ import annotations

import math
from typing import TypeGuard

DASH = "–"


def is_num(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def mb(
    v: float | None,
    *,
    sign: bool = False,
    small: float = 10.0,
    true_minus: bool | None = None,
    missing: str = DASH,
) -> str:
    """``1,234 MB``; one decimal below ``small`` MB (0: never); ``sign``: ``+12 MB`` /
    ``−3.5 MB``, with a true minus sign unless ``true_minus`` is False (plain text, a terminal
    table); ``missing`` for a value that is not a number."""
    if not is_num(v):
        return missing
    text = f"{v:{'+' if sign else ''},.{1 if abs(v) < small else 0}f}"
    if true_minus if true_minus is not None else sign:
        text = text.replace("-", "−")
    return text + " MB"


def signed(v: float) -> str:
    """'+65 MB', '-3.5 MB': a growth in plain text (the verdict in words, the page)."""
    return mb(v, sign=True, true_minus=False)


def built_or_freed(mb: float) -> str:
    """'built +65 MB', 'freed 13 MB' (a negative build said "built -13 MB")."""
    return f"built {signed(mb)}" if mb > 0 else f"freed {-mb:,.0f} MB"
