"""How a loader scales with its worker count, from a session's run summaries: per (mode, backend),
items/s and CPU per item at each worker count, and the scaling efficiency (summary.json
``scaling``, the scenario report's scaling chart), with the rule for the report's sentence on
reference-count contention.

Definitions:

* scaling efficiency at N workers: items/s at N ÷ (N × items/s at 1), the share of N times the
  one-worker rate that N workers reached (1.0: perfect; 0.5 at 2 workers: no gain). Where the
  smallest worker count of a group is not 1 (``b``), relative to it: (items/s at N ÷ N) ÷
  (items/s at b ÷ b). A group needs ok runs at two worker counts at least; ``workers: 0`` (the
  main process alone) is not a worker count to scale from.
* contention (:func:`contention_note`): on a build without the GIL (every run's ``gil_enabled``
  False), thread workers scale poorly (efficiency under :data:`POOR`) on a dataset of Python
  objects (:data:`OBJECT_BACKENDS`) while, in the same mode, a buffer-backed dataset
  (:data:`BUFFER_BACKENDS`) does not, by a clear margin (:data:`CONTENTION_GAP`), and the
  objects' CPU per item rose more (:data:`CONTENTION_CPU`). Every read of a shared Python object writes its reference
  count; threads writing the same counts from two cores fight over their cache lines. Those are
  the writes that make forked workers copy the pages they read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import THREAD_MODES

# Below this efficiency at the largest worker count, a group "scales poorly": at 2 workers, 0.75
# is 1.5x the one-worker rate; a GIL-bound loader sits near 0.5.
POOR = 0.75
# Datasets whose items are Python objects shared by every worker (memprobe's list backend) and
# datasets whose items are made fresh from buffers at each read (numpy, Arrow, SharedList).
OBJECT_BACKENDS = ("list",)
BUFFER_BACKENDS = ("numpy", "arrow", "shared_list", "sharedlist")
# The contention sentence needs the difference itself, not two sides of POOR: the buffer dataset
# scaling this much better, and the objects' CPU per item rising this much more than the
# buffer's. Three 10-epoch runs on the free-threaded build (docs/perf/threads.md, "On a quiet
# machine") put list and Arrow at 0.71-0.76 and 0.71-0.77 with CPU per item 1.07-1.17x and
# 1.10-1.20x: the sentence fired in 2 of 3 on 0.74 against 0.77.
CONTENTION_GAP = 0.15  # good efficiency - poor efficiency, at least
CONTENTION_CPU = 1.15  # poor CPU-per-item ratio / good's, at least (where both are known)


@dataclass(frozen=True)
class Point:
    """One worker count of a group."""

    workers: int
    items_per_s: float
    cpu_ms_per_item: float | None
    efficiency: float  # relative to the group's smallest worker count
    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class Scaling:
    """One (mode, backend) across its worker counts, smallest first."""

    mode: str
    backend: str
    gil_enabled: bool | None
    points: tuple[Point, ...]

    @property
    def base(self) -> Point:
        return self.points[0]

    @property
    def last(self) -> Point:
        return self.points[-1]

    @property
    def efficiency(self) -> float:
        """At the largest worker count."""
        return self.last.efficiency

    def cpu_ratio(self) -> float | None:
        """CPU per item at the largest worker count ÷ at the smallest."""
        a, b = self.base.cpu_ms_per_item, self.last.cpu_ms_per_item
        return b / a if a and b is not None else None

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "backend": self.backend,
            "gil_enabled": self.gil_enabled,
            "base_workers": self.base.workers,
            "max_workers": self.last.workers,
            "efficiency": round(self.efficiency, 4),
            "points": [
                {
                    "workers": p.workers,
                    "items_per_s": round(p.items_per_s, 3),
                    "cpu_ms_per_item": None if p.cpu_ms_per_item is None else round(p.cpu_ms_per_item, 6),
                    "efficiency": round(p.efficiency, 4),
                    "run_ids": list(p.run_ids),
                }
                for p in self.points
            ],
        }


def scaling(summaries: Sequence[RunSummary]) -> list[Scaling]:
    """Every (mode, backend) of ``summaries`` with ok runs at two worker counts or more, in the
    order the runs came. Runs repeated at one count (a scenario listing it twice) are taken by
    their median."""
    groups: dict[tuple[str, str], dict[int, list[RunSummary]]] = {}
    for s in summaries:
        if s.status != "ok" or not s.items_per_s or s.workers < 1:
            continue
        groups.setdefault((s.mode, s.backend), {}).setdefault(s.workers, []).append(s)
    out = []
    for (mode, backend), counts in groups.items():
        if len(counts) < 2:
            continue
        ordered = sorted(counts.items())
        rates = {n: median(r.items_per_s or 0.0 for r in runs) for n, runs in ordered}
        base_n = ordered[0][0]
        base_rate = rates[base_n] / base_n
        points = []
        for n, runs in ordered:
            cpus = [r.cpu_ms_per_item for r in runs if r.cpu_ms_per_item is not None]
            points.append(
                Point(
                    workers=n,
                    items_per_s=rates[n],
                    cpu_ms_per_item=median(cpus) if cpus else None,
                    efficiency=(rates[n] / n) / base_rate,
                    run_ids=tuple(r.run_id for r in runs),
                )
            )
        gils = {r.gil_enabled for runs in counts.values() for r in runs}
        out.append(Scaling(mode, backend, gils.pop() if len(gils) == 1 else None, tuple(points)))
    return out


def scaling_dicts(summaries: Sequence[RunSummary]) -> list[dict]:
    """summary.json's ``scaling``."""
    return [g.to_dict() for g in scaling(summaries)]


def contention_note(groups: Sequence[Scaling]) -> str | None:
    """The report's sentence when thread workers on a build without the GIL scale poorly on a
    dataset of Python objects and not on a buffer-backed one in the same mode; None otherwise."""
    free = [g for g in groups if g.mode in THREAD_MODES and g.gil_enabled is False]
    for poor in free:
        if poor.backend not in OBJECT_BACKENDS or poor.efficiency >= POOR:
            continue
        good = [
            g
            for g in free
            if g.mode == poor.mode
            and g.backend in BUFFER_BACKENDS
            and g.efficiency >= POOR
            and g.efficiency - poor.efficiency >= CONTENTION_GAP
            and _cpu_rose_more(poor, g)
        ]
        if not good:
            continue
        best = max(good, key=lambda g: g.efficiency)
        return _sentence(poor, best)
    return None


def _cpu_rose_more(poor: Scaling, good: Scaling) -> bool:
    """The objects' CPU per item rose clearly more than the buffer's with the workers (true
    where either is not known: the efficiencies alone then)."""
    a, b = poor.cpu_ratio(), good.cpu_ratio()
    return a is None or b is None or a >= b * CONTENTION_CPU


def _sentence(poor: Scaling, good: Scaling) -> str:
    n = poor.last.workers
    base = "1 worker" if poor.base.workers == 1 else f"{poor.base.workers} workers"
    cpu = poor.cpu_ratio()
    cpu_good = good.cpu_ratio()
    rose = (
        f"; its CPU per item went from {poor.base.cpu_ms_per_item:.3g} to {poor.last.cpu_ms_per_item:.3g} ms"
        f" ({cpu:.2f}x)"
        if cpu is not None
        else ""
    )
    held = f", CPU per item {cpu_good:.2f}x" if cpu_good is not None else ""
    return (
        f"{poor.mode} workers scale poorly on the {poor.backend} dataset on this free-threaded build "
        f"(GIL disabled): {n} workers gave {poor.last.items_per_s / poor.base.items_per_s:.2f}x the "
        f"items/s of {base} (scaling efficiency {poor.efficiency:.2f}){rose}, while on "
        f"{good.backend} they gave {good.last.items_per_s / good.base.items_per_s:.2f}x "
        f"(efficiency {good.efficiency:.2f}{held}). Without the GIL, the threads really run at once "
        f"and every read of a shared Python object (the list, each record, its values) writes that "
        f"object's reference count; two cores writing the same counts take turns on their cache "
        f"lines. These are the same reference-count writes that make forked workers copy the pages "
        f"they read. The fix is the same too: keep the data in buffers (numpy arrays, an Arrow "
        f"table) or in memprobe.SharedList, whose reads make a new object for each item instead of "
        f"touching shared ones."
    )
