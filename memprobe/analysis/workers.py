"""How many workers: a session's runs grouped by (dataset, mode, worker count), each group's
figures as medians with their spread over the repeats, the worker-count curve of each mode and
dataset, and the frontier a user decides on, in words (summary.json ``repeats`` and ``workers``,
the report's "How many workers", the terminal's table after the runs).

Definitions:

* a group: the ok runs of one backend (dataset, decoder), mode and worker count; its figures
  (items/s, time per 100 batches, CPU per item, peak total PSS) are each a
  :class:`memprobe.core.rounds.Spread` over the group's runs (its repeats).
* a curve: one mode on one backend across its worker counts, ``workers: 0`` (the main process
  alone, mode ``single``) its first point in every mode's curve of that backend; a curve needs
  two worker counts.
* fits: a count fits where its largest peak total PSS over the repeats is within the memory the
  runs had to fit in (:func:`memprobe.core.system.run_limit`: memprobe's cgroup's limit, else the
  machine's memory); None where neither the limit nor the PSS is known.
* the frontier of a curve: among the counts that fit, the best median items/s; the fewest
  workers whose median items/s is within :data:`NEAR` of it are the answer, with their total PSS,
  and what the best (or else the largest) count buys beyond it and costs.
* the ceiling (on a machine of C cores): C x the items/s of one worker. Workers cannot beat the
  cores the loader shares: past C, more workers add memory, not throughput.
* moves: where another mode on the same dataset, or another dataset in the same mode, puts its
  answer, against the first mode (fork where there is one) or the first dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memprobe.core.rounds import Spread, spread
from memprobe.core.summary import RunSummary
from memprobe.core.system import run_limit
from memprobe.core.units import mb
from memprobe.core.vocabulary import item_noun

NEAR = 0.05  # "within 5 % of the best items/s": closer than repeated timings on a shared machine tell apart
FIGURES = ("items_per_s", "time_per_100_batches_s", "cpu_ms_per_item", "total_pss_peak_mb")
REFERENCE_MODE = "fork"  # the default start method on Linux: what other modes are said against


@dataclass(frozen=True)
class Group:
    """The ok runs of one backend, mode and worker count, and each figure over them."""

    backend: str
    mode: str
    workers: int
    run_ids: tuple[str, ...]
    figures: dict[str, Spread | None]
    fits: bool | None = None

    def median(self, figure: str) -> float | None:
        s = self.figures.get(figure)
        return None if s is None else s.median

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "mode": self.mode,
            "workers": self.workers,
            "runs": len(self.run_ids),
            "run_ids": list(self.run_ids),
            "fits": self.fits,
            **{k: None if v is None else v.to_dict() for k, v in self.figures.items()},
        }


@dataclass(frozen=True)
class Frontier:
    """The answer on one curve: the fewest workers within :data:`NEAR` of the best items/s."""

    chosen: Group
    best: Group
    beyond: Group | None  # what is compared with the answer: the best count, else the largest that fits
    ceiling: float | None  # cores x one worker's items/s
    sentence: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.chosen.workers,
            "items_per_s": self.chosen.median("items_per_s"),
            "total_pss_mb": self.chosen.median("total_pss_peak_mb"),
            "best_workers": self.best.workers,
            "best_items_per_s": self.best.median("items_per_s"),
            "ceiling_items_per_s": None if self.ceiling is None else round(self.ceiling, 3),
            "sentence": self.sentence,
        }


@dataclass(frozen=True)
class Curve:
    """One mode on one backend across its worker counts, fewest first."""

    backend: str
    mode: str
    points: tuple[Group, ...]
    frontier: Frontier | None
    noun: str = "items"

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "mode": self.mode,
            "workers": [p.workers for p in self.points],
            "points": [p.to_dict() for p in self.points],
            "frontier": None if self.frontier is None else self.frontier.to_dict(),
        }


@dataclass(frozen=True)
class Sweep:
    """A session's groups, its curves and their frontiers, the limit they were judged against."""

    groups: tuple[Group, ...]
    curves: tuple[Curve, ...]
    moves: tuple[str, ...]
    limit_mb: float | None
    limit_of: str
    cores: int | None

    @property
    def repeated(self) -> bool:
        return any(len(g.run_ids) > 1 for g in self.groups)

    def sentences(self) -> list[str]:
        """Every frontier's sentence, then where other modes and datasets move it."""
        return [c.frontier.sentence for c in self.curves if c.frontier] + list(self.moves)

    def to_dict(self) -> dict[str, Any]:
        """summary.json's ``repeats`` (every group) and ``workers`` (the curves and frontiers)."""
        return {
            "repeats": [g.to_dict() for g in self.groups],
            "workers": {
                "limit_mb": self.limit_mb,
                "limit_of": self.limit_of,
                "cores": self.cores,
                "curves": [c.to_dict() for c in self.curves],
                "moves": list(self.moves),
            },
        }


def sweep_of(manifest: dict, summaries: Sequence[RunSummary]) -> Sweep:
    """The sweep of a session's runs: its manifest gives the memory limit and the cores."""
    limit_mb, limit_of = run_limit(manifest)
    cores = (manifest.get("environment") or {}).get("cpu_count")
    return sweep(summaries, limit_mb, limit_of, cores if isinstance(cores, int) and cores > 0 else None)


def sweep(
    summaries: Sequence[RunSummary],
    limit_mb: float | None = None,
    limit_of: str = "",
    cores: int | None = None,
) -> Sweep:
    """Groups (each dataset's in the runs' order, by worker count), curves, frontiers and moves
    of ``summaries`` (ok runs only)."""
    groups = _groups(summaries, limit_mb)
    nouns = {s.backend: item_noun(s.workload) for s in summaries}
    curves = []
    for backend in dict.fromkeys(g.backend for g in groups):
        mine = [g for g in groups if g.backend == backend]
        main = [g for g in mine if g.workers == 0]
        for mode in dict.fromkeys(g.mode for g in mine if g.workers > 0):
            points = tuple(main + sorted((g for g in mine if g.mode == mode and g.workers > 0), key=_count))
            if len(points) < 2:
                continue
            noun = nouns.get(backend, "items")
            curves.append(
                Curve(
                    backend,
                    mode,
                    points,
                    frontier(backend, mode, points, limit_mb, limit_of, cores, noun),
                    noun,
                )
            )
    return Sweep(tuple(groups), tuple(curves), tuple(moves(curves)), limit_mb, limit_of, cores)


def _count(g: Group) -> int:
    return g.workers


def _groups(summaries: Sequence[RunSummary], limit_mb: float | None) -> list[Group]:
    runs: dict[tuple[str, str, int], list[RunSummary]] = {}
    for s in summaries:
        if s.status == "ok":
            runs.setdefault((s.backend, s.mode, s.workers), []).append(s)
    out = []
    backends = list(dict.fromkeys(b for b, _, _ in runs))
    modes = list(dict.fromkeys(m for _, m, _ in runs))
    # Each backend's groups together, by worker count: a run that failed in round 1 does not put
    # its configuration after the others.
    order = sorted(runs, key=lambda k: (backends.index(k[0]), k[2], modes.index(k[1])))
    for backend, mode, workers in order:
        mine = runs[(backend, mode, workers)]
        figures = {f: spread(getattr(s, f) for s in mine) for f in FIGURES}
        pss = figures["total_pss_peak_mb"]
        fits = None if limit_mb is None or pss is None else pss.max <= limit_mb
        out.append(Group(backend, mode, workers, tuple(s.run_id for s in mine), figures, fits))
    return out


def frontier(
    backend: str,
    mode: str,
    points: Sequence[Group],
    limit_mb: float | None,
    limit_of: str,
    cores: int | None = None,
    noun: str = "items",
) -> Frontier | None:
    """The fewest workers within :data:`NEAR` of the best items/s among the counts that fit, in
    words; None where no count has an items/s."""
    rated = [p for p in points if p.median("items_per_s")]
    if not rated:
        return None
    out = [p for p in rated if p.fits is False]
    fitting = [p for p in rated if p.fits is not False]
    where = f"{backend}, {mode}"
    if not fitting:
        return Frontier(
            rated[0],
            rated[0],
            None,
            None,
            f"{where}: no worker count fits in {limit_of} ({mb(limit_mb)}): {_not_fitting(out)}",
        )
    best = max(fitting, key=lambda p: p.median("items_per_s") or 0.0)
    top = best.median("items_per_s") or 0.0
    chosen = min((p for p in fitting if (p.median("items_per_s") or 0.0) >= (1 - NEAR) * top), key=_count)
    rate, pss = chosen.median("items_per_s") or 0.0, chosen.median("total_pss_peak_mb")
    said = (
        f"{where}: the fewest workers within {NEAR:.0%} of the best {noun}/s: "
        f"{_workers(chosen.workers, mode)}, {mb(pss)} total PSS, {rate:,.0f} {noun}/s"
    )
    largest = max(fitting, key=_count)
    beyond = best if best is not chosen else (largest if largest is not chosen else None)
    if beyond is not None:
        gain = (beyond.median("items_per_s") or 0.0) / rate - 1
        more = f"buy {gain:.0%} more" if gain >= 0 else f"give {-gain:.0%} less"
        said += f"; {_count_of(beyond.workers)} {more} for {_pss_delta(beyond, chosen)}"
    ceiling = _ceiling(points, cores)
    if ceiling is not None and cores:
        one = next(p for p in points if p.workers == 1)
        said += (
            f"; the ceiling on {cores} cores is {cores} x one worker's "
            f"{one.median('items_per_s') or 0.0:,.0f} = {ceiling:,.0f} {noun}/s"
        )
    if out:
        said += f"; {_not_fitting(out)} would not fit in {limit_of} ({mb(limit_mb)})"
    return Frontier(chosen, best, beyond, ceiling, _percent(said))


def _ceiling(points: Sequence[Group], cores: int | None) -> float | None:
    one = next((p for p in points if p.workers == 1), None)
    rate = one.median("items_per_s") if one is not None else None
    return cores * rate if cores and rate else None


def _workers(n: int, mode: str) -> str:
    return "0 (the main process alone)" if n == 0 else f"{n} ({mode})"


def _count_of(n: int) -> str:
    return "1 worker" if n == 1 else f"{n} workers"


def _pss_delta(a: Group, b: Group) -> str:
    pa, pb = a.median("total_pss_peak_mb"), b.median("total_pss_peak_mb")
    if pa is None or pb is None:
        return "an unknown total PSS"
    return mb(pa - pb, sign=True, true_minus=False) + " total PSS"


def _not_fitting(groups: Sequence[Group]) -> str:
    return ", ".join(f"{_count_of(g.workers)} ({mb(g.median('total_pss_peak_mb'))})" for g in groups)


def _percent(text: str) -> str:
    """'5 %' and '+2 %' as the sentence says them: a space before the percent sign."""
    return text.replace("%", " %").replace("  %", " %")


def moves(curves: Sequence[Curve]) -> list[str]:
    """Where another mode on a dataset (against fork, else the first mode) and another dataset in
    a mode (against the first dataset) put the answer: its workers, total PSS and items/s."""
    out = []
    answered = [c for c in curves if c.frontier is not None and c.frontier.chosen.median("items_per_s")]
    for backend in dict.fromkeys(c.backend for c in answered):
        mine = [c for c in answered if c.backend == backend]
        ref = next((c for c in mine if c.mode == REFERENCE_MODE), mine[0])
        out += [_move(c, ref, f"{c.mode} against {ref.mode} ({backend})") for c in mine if c is not ref]
    for mode in dict.fromkeys(c.mode for c in answered):
        mine = [c for c in answered if c.mode == mode]
        out += [_move(c, mine[0], f"{c.backend} against {mine[0].backend} ({mode})") for c in mine[1:]]
    return out


def _move(c: Curve, ref: Curve, who: str) -> str:
    assert c.frontier is not None and ref.frontier is not None
    a, b = c.frontier.chosen, ref.frontier.chosen
    ratio = (a.median("items_per_s") or 0.0) / (b.median("items_per_s") or 1.0)
    where = (
        f"stays at {_count_of(a.workers)}"
        if a.workers == b.workers
        else f"moves from {b.workers} to {_count_of(a.workers)}"
    )
    return f"{who}: the answer {where}, {_pss_delta(a, b)}, {ratio:.2f}x the {c.noun}/s"
