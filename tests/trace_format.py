"""The Trace Event Format's documented fields, checked on a trace memprobe wrote (the unit and
the integration tests of ``memprobe export``): chrome://tracing is not served by headless
Chromium, so the trace is held to the format's description instead of opened in a viewer."""

from __future__ import annotations

import math

PHASES = {"C", "M", "i"}  # the phases memprobe writes: counter, metadata, instant


def check_trace_fields(doc: dict) -> None:
    """The Trace Event Format's documented fields, as its JSON object form gives them: a
    traceEvents list; every event a phase (ph), pid and tid integers; every event but metadata a
    ts in microseconds; a counter's args its series' numbers; an instant event's scope (s) one
    of g, p, t; a metadata event's name one the format defines, with its args."""
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    for e in doc["traceEvents"]:
        assert e["ph"] in PHASES and isinstance(e["name"], str)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], float | int) and math.isfinite(e["ts"]) and e["ts"] >= 0
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, float | int) for v in e["args"].values())
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_labels", "process_sort_index", "thread_name")
            assert isinstance(e["args"], dict) and e["args"]
