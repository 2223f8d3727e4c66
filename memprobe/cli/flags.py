"""Numbers given as flags, checked before anything runs (and before the heavy imports)."""

from __future__ import annotations

import json
import math
from typing import Any

from memprobe.core.errors import UsageError


def bounded(
    flag: str, value: float, low: float, high: float | None = None, *, above: bool = False, unit: str = ""
) -> float:
    """``value`` if it is a finite number >= ``low`` (> ``low`` with ``above``) and <= ``high``;
    else a :class:`UsageError` in one line naming the flag, the value and the range. NaN compares
    false with everything and ``inf`` never ends: argparse's ``float`` takes both."""
    if not (
        math.isfinite(value) and (value > low if above else value >= low) and (high is None or value <= high)
    ):
        noun = f"a number of {unit}" if unit else "a number"
        top = f" and <= {high:g}" if high is not None else ""
        raise UsageError(f"{flag}: got {value:g}; allowed: {noun} {'>' if above else '>='} {low:g}{top}")
    return value


def json_kwargs(flag: str, text: str) -> dict[str, Any]:
    """A factory's keyword arguments given as JSON (``--kwargs``): a JSON object, else a
    :class:`UsageError` in one line naming the flag."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag}: not valid JSON ({exc}); e.g. {flag} '{{\"n\": 1000}}'") from None
    if not isinstance(value, dict):
        raise UsageError(
            f"{flag}: a JSON object (a mapping of keyword arguments), not a {type(value).__name__}"
        )
    return value
