"""The shape of a parent's own growth over its window, which tells its two usual causes apart: a
**steady** rise while its loop runs (a training loop keeping something each step: losses with
their graph, outputs, batches), or **steps as its worker generations begin** (a sampler's list of
the epoch's indices, built as each epoch's iterator starts: torch's RandomSampler and
DistributedSampler make one Python int per record). :mod:`memprobe.analysis.culprit` names the
cause the timeline matches, and a steady rise below the growth threshold too: it grows with the
job's steps, however short the trial that showed it.

A parent's own growth is the rise of its anonymous RSS (:mod:`memprobe.analysis.growth`);
its shape is read from the same series, read every tick, over the window's intervals while one of
its workers lived (what it built between generations is not growth, nor part of its shape).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from memprobe.analysis.process import Proc, own_workers
from memprobe.analysis.windows import worker_gaps

STEADY, EPOCH_STEPS = "steady", "epoch steps"  # Growth.shape; None: neither, or too small to say
SHAPE_MIN_MB = 2.0  # a rise smaller than this has no shape worth a word
STEP_BEFORE_S, STEP_AFTER_S = 0.5, 3.0  # a generation's step: from just before its first worker to after
STEP_SHARE = 0.6  # steps as generations begin hold at least this share of the rise: epoch steps
# Steady: of the window's thirds (steps left out), the last and one other rose at least this share
# of the rest: a loop that keeps something every step rises to its end; allocators first reuse
# memory freed earlier, so the first third may rise little.
STEADY_PARTS, STEADY_SHARE = 3, 0.15
STEADY_OF_ALL = 0.6  # and that rest holds at least this share of the whole rise


def growth_shape(p: Proc, samples: pd.DataFrame, procs: list[Proc], t0: float, t1: float) -> str | None:
    """:data:`STEADY`, :data:`EPOCH_STEPS` or None (mixed, flat, or not known) for parent ``p``
    over its window ``t0`` to ``t1``, from its anonymous RSS at every tick."""
    if "rss_anon_mb" not in samples:
        return None
    rows = samples[(samples["pid"] == p.pid) & (samples["t"] >= t0 - STEP_BEFORE_S) & (samples["t"] <= t1)]
    rows = rows.assign(anon=pd.to_numeric(rows["rss_anon_mb"], errors="coerce")).dropna(subset=["anon"])
    if len(rows) < 3:
        return None
    rows = rows.sort_values("t")
    t, anon = rows["t"].to_numpy(float), rows["anon"].to_numpy(float)
    rise = np.diff(anon)
    mid = (t[:-1] + t[1:]) / 2  # each interval's rise, placed at its middle
    workers = own_workers(p, procs)
    alive = np.ones(len(rise), dtype=bool)
    for since, until in worker_gaps(workers):
        alive &= ~((mid > since) & (mid < until))
    inside = alive & (mid >= t0)
    total = float(rise[inside].sum())
    if total < SHAPE_MIN_MB:
        return None
    at_step = np.zeros(len(rise), dtype=bool)
    for s in generation_starts(workers):
        at_step |= (mid >= s - STEP_BEFORE_S) & (mid <= s + STEP_AFTER_S)
    steps = float(rise[inside & at_step].sum())
    if steps >= STEP_SHARE * total:
        return EPOCH_STEPS
    rest = inside & ~at_step
    spread = float(rise[rest].sum())
    if spread < STEADY_OF_ALL * total or rest.sum() < STEADY_PARTS:
        return None
    times = mid[rest]
    edges = np.linspace(times[0], times[-1], STEADY_PARTS + 1)
    parts = [float(rise[rest][(times >= a) & (times <= b)].sum()) for a, b in itertools.pairwise(edges)]
    risen = [part >= STEADY_SHARE * spread for part in parts]
    return STEADY if risen[-1] and sum(risen) >= 2 else None


def generation_starts(workers: list[Proc]) -> list[float]:
    """When each generation of these workers began: its first worker's start."""
    first: dict[int | None, float] = {}
    for q in workers:
        first[q.generation] = min(first.get(q.generation, q.start_t), q.start_t)
    return sorted(first.values())
