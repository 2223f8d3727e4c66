"""What to do about a run: the fixes that flat runs in the same results folder demonstrate for a
growing run (another backend with the same mode, or another mode with the same backend), each
with what it costs, and the advice for the causes its verdict names (:mod:`memprobe.core.cures`:
every fix with its change and its cost, and the pytest guard), which a flat run paying a
start-up copy in each worker gets too."""

from __future__ import annotations

from dataclasses import dataclass, field

from memprobe.core import cures
from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import FORKSERVER, SPAWN, THREAD
from memprobe.report import format as fmt
from memprobe.report.content import noun

# What each storage backend does about the copy; unknown backends get a generic sentence.
BACKEND_FIXES = {
    "numpy": "Hold the records in numpy arrays (a few large buffers, no Python object per record): "
    "workers read them without writing reference counts into the pages, so the pages stay shared.",
    "arrow": "Hold the records in Arrow buffers (a pyarrow Table): columnar buffers with no Python object "
    "per record, so forked workers read them without copying.",
}
MODE_FIXES = {
    THREAD: "Use threads instead of worker processes: one address space, nothing to copy. Check items/s: "
    "threads only keep up when the per-item work releases the GIL (or on a free-threaded Python).",
}
SPAWN_FIX = (
    "Start workers with spawn or forkserver: the dataset is pickled into each worker at start-up, so "
    "nothing grows while iterating, but every worker pays for its own copy up front. To avoid that, put "
    "the data in shared memory (multiprocessing.shared_memory, a memory-mapped file, or torch tensors "
    "moved with share_memory_()) so that all workers map the same pages."
)


@dataclass(frozen=True)
class Demo:
    """A flat run that shows a fix working, and what it costs compared with the growing run."""

    run: RunSummary
    anchor: str
    caveat: str | None = None


@dataclass(frozen=True)
class Fix:
    text: str
    demos: list[Demo]


@dataclass(frozen=True)
class Advice:
    run: RunSummary
    anchor: str
    fixes: list[Fix] = field(default_factory=list)


def _fix_text(g: RunSummary, s: RunSummary) -> str:
    if s.backend != g.backend:
        return BACKEND_FIXES.get(s.backend, f"Switch the backend from '{g.backend}' to '{s.backend}'.")
    if s.mode in MODE_FIXES:
        return MODE_FIXES[s.mode]
    if s.mode in (SPAWN, FORKSERVER):
        return SPAWN_FIX
    return f"Use mode '{s.mode}' instead of '{g.mode}'."


def _caveat(g: RunSummary, s: RunSummary) -> str | None:
    if (s.total_pss_peak_mb or 0) > (g.total_pss_peak_mb or float("inf")):
        return (
            f"its peak total PSS ({fmt.mb(s.total_pss_peak_mb)}) is higher than this run's "
            f"({fmt.mb(g.total_pss_peak_mb)}): the copy is made up front instead"
        )
    if s.items_per_s and g.items_per_s and s.items_per_s < 0.7 * g.items_per_s:
        return f"slower here: {fmt.rate(s.items_per_s, noun(s))} against {fmt.rate(g.items_per_s, noun(g))}"
    return None


def cause_groups(
    summaries: list[RunSummary], anchors: dict[str, str], factories: dict[str, dict] | None = None
) -> list[tuple[cures.RunGroup, list[str]]]:
    """The runs grouped by the causes their verdicts name (:func:`memprobe.core.cures.by_causes`),
    each with its runs' anchors."""
    return [(g, [anchors[s.run_id] for s in g.runs]) for g in cures.by_causes(summaries, factories)]


def advice(summaries: list[RunSummary], anchors: dict[str, str]) -> list[Advice]:
    """For each growing run, the fixes a flat run in the same folder demonstrates (one change away:
    another backend with the same mode, or another mode with the same backend), cheapest first."""
    out = []
    for g in (s for s in summaries if s.verdict == "growing"):
        flat = [
            s
            for s in summaries
            if s.verdict == "flat"
            and s.status == "ok"
            and s.workers == g.workers
            and (s.backend == g.backend) != (s.mode == g.mode)
        ]
        flat.sort(
            key=lambda s: (_caveat(g, s) is not None, s.total_pss_peak_mb is None, s.total_pss_peak_mb or 0)
        )
        fixes: dict[str, list[Demo]] = {}
        for s in flat:
            fixes.setdefault(_fix_text(g, s), []).append(Demo(s, anchors[s.run_id], _caveat(g, s)))
        out.append(Advice(g, anchors[g.run_id], [Fix(t, d) for t, d in fixes.items()]))
    return out
