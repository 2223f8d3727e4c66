"""Two runs' figures side by side, for both compare pages (scenario runs: :mod:`memprobe.report.compare`,
two recordings: :mod:`memprobe.report.compare_recorded`): a figure's change judged better, worse
or the same beyond an absolute and a relative tolerance (:func:`delta`), its words
(:func:`delta_text`), the verdicts' change, and the two sessions' environments row by row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memprobe.core.summary import RunSummary
from memprobe.report import format as fmt
from memprobe.report import session

VERDICT_RANK = {"flat": 0, "growing": 1}  # no verdict (failed, cut short) ranks worst


@dataclass(frozen=True)
class Metric:
    name: str
    value: Callable[[RunSummary], float | None]
    show: Callable[[float | None], str]
    lower_is_better: bool
    abs_tol: float
    rel_tol: float
    floor: float | None = None  # values below it are judged as equal to it


@dataclass(frozen=True)
class Delta:
    a: float | None
    b: float | None
    tone: str  # better | worse | same | na

    @property
    def diff(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def rel(self) -> float | None:
        return None if self.diff is None or not self.a else self.diff / abs(self.a)


def delta(metric: Metric, a: RunSummary, b: RunSummary) -> Delta:
    va, vb = metric.value(a), metric.value(b)
    if va is None or vb is None:
        return Delta(va, vb, "na")
    ja, jb = (va, vb) if metric.floor is None else (max(va, metric.floor), max(vb, metric.floor))
    diff = jb - ja
    if abs(diff) <= metric.abs_tol or abs(diff) <= metric.rel_tol * max(abs(ja), 1e-9):
        return Delta(va, vb, "same")
    return Delta(va, vb, "better" if (diff < 0) == metric.lower_is_better else "worse")


def delta_text(metric: Metric, d: Delta) -> str:
    """The change in the metric's own unit (MB, seconds) and, where meaningful, relative."""
    if d.diff is None:
        return fmt.DASH
    rel = f" ({fmt.percent(d.rel)})" if d.rel is not None and metric.name != "growth" else ""
    if metric.show is fmt.rate_short:
        return fmt.percent(d.rel)
    if metric.show is fmt.seconds:
        return f"{d.diff:+.2f} s".replace("-", "−") + rel
    return fmt.signed_mb(d.diff) + rel


def verdict_change(a: RunSummary, b: RunSummary) -> str:
    ra, rb = VERDICT_RANK.get(a.verdict or "", 2), VERDICT_RANK.get(b.verdict or "", 2)
    return "same" if ra == rb else ("better" if rb < ra else "worse")


def env_rows(a: dict, b: dict) -> list[tuple[str, str, str, bool]]:
    """(name, A, B, differs) for every environment fact either side recorded."""
    ra, rb = dict(session.environment_rows(a)), dict(session.environment_rows(b))
    names = list(dict.fromkeys([*ra, *rb]))
    stable = {"started", "finished", "duration"}
    return [
        (n, ra.get(n, fmt.DASH), rb.get(n, fmt.DASH), n not in stable and ra.get(n) != rb.get(n))
        for n in names
    ]
