"""Every process of a recorded job (:func:`processes`), as its meta lists them: today's memprobe
lists every process it sampled with all of its facts, and a loaded folder of an older version
has its list completed once on load (:mod:`memprobe.results.upgrade`); nothing is derived here.
"""

from __future__ import annotations

from typing import Any, TypeVar

from memprobe.analysis.process import Proc, finite_or
from memprobe.core.vocabulary import OTHER

_T = TypeVar("_T", int, None)


def processes(meta: dict) -> list[Proc]:
    """Every process of the run, from the meta's list (in today's shape: a loaded folder's)."""
    return [_proc(p) for p in meta.get("processes") or []]


def _proc(p: dict) -> Proc:
    """One process's facts as listed (a value of the wrong type, from a folder edited by hand, as
    none: the schema let it through as null)."""
    first_t = finite_or(p.get("first_t"), 0.0)
    return Proc(
        int(p["pid"]),
        _int_or(p.get("ppid"), None),
        str(p.get("role") or OTHER),
        str(p.get("kind") or OTHER),
        bool(p.get("forked")),
        p.get("start_method"),
        _int_or(p.get("rank"), -1),
        _int_or(p.get("worker"), -1),
        _int_or(p.get("generation"), None),
        finite_or(p.get("start_t"), first_t),
        first_t,
        finite_or(p.get("last_t"), first_t),
        finite_or(p.get("end_t"), None),
        finite_or(p.get("threads_first_t"), None),
        finite_or(p.get("threads_last_t"), None),
    )


def _int_or(v: Any, default: _T) -> int | _T:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default
