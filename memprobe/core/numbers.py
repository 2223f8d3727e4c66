"""Numbers given from outside (a flag, an argument) checked before anything runs: finite and in
range, or one line naming the flag, the value and the range. Standard library only: the CLI
checks its flags before its heavy imports.
"""

from __future__ import annotations

import math

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
