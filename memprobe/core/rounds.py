"""Repeated runs, the one way: their order and what is read from them. ``memprobe run``'s
``repeats`` (a scenario's every run N times) and ``memprobe cure``'s ``--rounds`` (each fix N
times) both run in interleaved rounds (:func:`interleaved`) and both state a figure of the
repeats as its median with its spread (:func:`spread`).

Interleaved: round 1 runs every run once, in order, then round 2, ... A machine that gets
busier or quieter while the session runs then moves every run's figures alike, instead of
making the runs that came last look slower (or faster) than the others.

The spread of a figure over its repeats: the standard deviation (the sample's, n - 1: what an
error bar of repeated timings shows) and the smallest and largest value; the median is what a
sentence or a table states.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def interleaved(items: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """``(round, item)`` for round 1..``rounds``, each round every item in order. Lazy: a caller
    that drops an item after its first round (``cure``'s nothing-to-convert) sees the rest."""
    for r in range(1, rounds + 1):
        for item in items:
            yield r, item


def round_suffix(round_: int, rounds: int) -> str:
    """A repeated run's name's tail: ``-r2`` of 5 rounds; nothing where a run is not repeated."""
    return f"-r{round_}" if rounds > 1 else ""


@dataclass(frozen=True)
class Spread:
    """A figure over its repeats: how many were known, their median, standard deviation (None
    for one value) and range."""

    n: int
    median: float
    std: float | None
    min: float
    max: float

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "median": round(self.median, 6),
            "std": None if self.std is None else round(self.std, 6),
            "min": round(self.min, 6),
            "max": round(self.max, 6),
        }


def spread(values: Iterable[float | None]) -> Spread | None:
    """The :class:`Spread` of the known values (None and NaN left out), None where none is."""
    known = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not known:
        return None
    return Spread(
        n=len(known),
        median=statistics.median(known),
        std=statistics.stdev(known) if len(known) > 1 else None,
        min=min(known),
        max=max(known),
    )


def median_of(values: Iterable[float | None]) -> float | None:
    """The median of the known values, None where none is (:func:`spread`'s median)."""
    s = spread(values)
    return None if s is None else s.median


def spread_text(s: Spread | None, digits: int, *, dash: str = "-", between: str = "-") -> str:
    """'12.3 ± 0.4 (11.9-12.8)': a figure's median ± std (min-max) as the terminal and the page
    show it; one value alone; ``dash`` where there is none."""
    if s is None:
        return dash
    text = f"{s.median:,.{digits}f}"
    if s.n > 1 and s.std is not None:
        text += f" ± {s.std:,.{digits}f} ({s.min:,.{digits}f}{between}{s.max:,.{digits}f})"
    return text
