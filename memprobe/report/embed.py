"""What a page carries inside its <script> elements: plotly's JavaScript (the page works offline)
and data as JSON that cannot end the element early. Used by every page (report, record, compare)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from markupsafe import Markup


@lru_cache(maxsize=1)
def plotly_js() -> Markup:
    # plotly (about 4 MB of JavaScript) is imported when a page is written, not by every
    # command that imports the report package.
    from plotly.offline import get_plotlyjs

    return Markup(re.sub(r"</(script)", r"<\\/\1", get_plotlyjs(), flags=re.IGNORECASE))


def script_json(data: Any) -> Markup:
    """JSON safe inside a <script> element: no '<', '>' or '&' can end it or open a comment."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    for raw, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, esc)
    return Markup(text)
