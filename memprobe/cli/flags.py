"""A factory's keyword arguments given as a flag, checked before anything runs (and before the
heavy imports); numbers given as flags: :func:`memprobe.core.numbers.bounded`."""

from __future__ import annotations

import json
from typing import Any

from memprobe.core.errors import UsageError


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
