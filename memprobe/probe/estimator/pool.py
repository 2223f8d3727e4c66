"""A parent's pages that its forked children's copies give back to it alone (the pool model).

At fork a parent's private pages become shared with its children (``ForkPool.pages``, ``S``); a
page is the parent's alone again once every live child has copied it. Children copy from a
*pool* of ``P`` of those pages, each a share ``C_i / P`` of it (``C_i``: child i's estimated
USS), independently, so ``P * prod_i (C_i / P)`` are back (:func:`came_back`). ``P`` is learned
at the parent's readings (:func:`learn_pool`), kept for its next generation of children, lent to
a parent that has none (as a share of its ``S``), and otherwise taken as the same pages (plain
forked children) or halfway between those and ``S`` (DataLoader workers): :func:`pool_of`.
Functions of the planner's numbers (:class:`~memprobe.probe.estimator.planner.ExactPlanner`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from memprobe.probe.estimator.state import Track
from memprobe.probe.estimator.tuning import (
    CALIBRATION_BYTES,
    POOL_GRID_ROUNDS,
    POOL_GRID_STEPS,
    POOL_LEVEL_OWN_SHARE,
    POOL_OWN_SHARE,
    REL_TOLERANCE,
    MiB,
)

if TYPE_CHECKING:
    from memprobe.probe.estimator.planner import ExactPlanner


def child_copies(plan: ExactPlanner, tr: Track) -> list[float]:
    """What each live child has copied (its estimated USS; one not tracked yet: 0). An
    exited child is left out: its pages went with it."""
    out = []
    for kid in tr.live_kids:
        kt = plan.tracks.get(kid)
        est = plan.estimate_of(kt) if kt is not None and kt is not tr else None
        out.append(max(est or 0.0, 0.0))
    return out


def pool_of(plan: ExactPlanner, tr: Track, copies: list[float]) -> float:
    """The pages the children copy from: learned, else as another parent's was (its share
    of the pages the fork shared), else a prior from what the children are. DataLoader
    workers are dealt distinct indices (each goes to one worker): they never copy the same
    pages by design, only pages their records share, so halfway (geometric) between the
    same pages (the largest copy) and all the fork shared. Other forked children run the
    parent's own code on its data: the same pages (the largest copy), as the first model
    (1/k) had it; halfway put main of the os.fork tree, whose 4 workers each read every
    record, 78-99 % low at its first reading after the fork (no counter tells the two apart
    before a reading)."""
    if tr.fork.pool is not None:
        return tr.fork.pool
    if plan.pool_share is not None:
        return plan.pool_share * tr.fork.pages
    top = max(copies, default=0.0)
    if same_pages(plan, tr):
        return top
    return math.sqrt(tr.fork.pages * top)


def copies_then(plan: ExactPlanner, tr: Track) -> list[float]:
    """Each live child's copy at the parent's last reading (0: forked since)."""
    return [tr.fork.copies_at_exact.get(k, 0.0) for k in tr.live_kids]


def spread(plan: ExactPlanner, tr: Track) -> float:
    """How far what came back to the parent since its last reading may be from what its
    model says, while its pool is unknown: as far as either end, the same pages (a pool no
    bigger than the largest copy) or all the fork shared."""
    copies = child_copies(plan, tr)
    if len(copies) < 2:
        return 0.0
    then = copies_then(plan, tr)
    model = back(plan, tr) - back_then(plan, tr)
    ends = (0.0, max(tr.fork.pages, *copies))  # the same pages, all the fork shared
    return max(abs(came_back(p, copies) - came_back(p, then) - model) for p in ends)


def until_pool_known(plan: ExactPlanner, tr: Track) -> None:
    """A parent whose pool was never learned is read as soon as that spread could teach it
    (CALIBRATION_BYTES) and is a real part of its USS: the reading says which way its
    children copy (the same pages: all of it came back; a shuffled DataLoader: almost none,
    until late). Readings of a parent after a fork were otherwise few: a rank read 3 s
    after its workers forked was not read again until they exited, 24 s later."""
    if tr.reading.uss is None or tr.reading.forced or tr.census.first is not None:
        return  # a census counts what comes back: no pool is needed
    est = plan.estimate_of(tr) or 0.0
    if spread(plan, tr) >= max(CALIBRATION_BYTES, REL_TOLERANCE * est):
        tr.reading.forced = True


def back(plan: ExactPlanner, tr: Track) -> float:
    """The bytes of the parent's fork pages that are its alone again: ``P * prod_i (C_i /
    P)`` over the live children (each copied its share of the pool, independently)."""
    if not tr.fork.kids or tr.fork.pages <= 0:
        return 0.0
    copies = child_copies(plan, tr)
    if not copies:
        return tr.fork.pages  # every child exited: all of them
    if same_pages(plan, tr):
        # The same pages in the same order (each of main's workers reads every record): a
        # page is back once the slowest copied it. As independent shares of the largest
        # copy, one worker a tick ahead of the others (40 MB against 36) took 6 MB off.
        return min(*copies, tr.fork.pages)
    return came_back(pool_of(plan, tr, copies), copies)


def same_pages(plan: ExactPlanner, tr: Track) -> bool:
    """Its children are taken to copy the same pages (see pool_of): no pool learned or lent,
    and none of them a DataLoader worker."""
    return tr.fork.pool is None and plan.pool_share is None and not any(k in plan.dealt for k in tr.fork.kids)


def back_then(plan: ExactPlanner, tr: Track) -> float:
    """What the model, as it is now, says was back at the parent's last reading (its
    children's copies then): the estimate adds what came back since. Kept as it was at the
    reading, it mixed two models when the pool changed between (a pool lent by the other
    rank: 20 MB back then under halfway, 100 now under the lent pool, where the lent pool
    put 50 back then; the rank's estimate went 16 % high)."""
    then = list(tr.fork.copies_at_exact.values())  # the children of then: one forked since
    if not then or tr.fork.pages <= 0:  # shares again what came back before its fork
        return tr.fork.back_at_exact
    if same_pages(plan, tr):
        return min(*then, tr.fork.pages)
    return came_back(pool_of(plan, tr, child_copies(plan, tr)), then)


def learn_pool(plan: ExactPlanner, tr: Track, rest: float) -> None:
    """The pool that explains what came back by this reading (``B(P, C) = P * prod_i (C_i /
    P)``, the copies ``C`` now and at the last reading; ``rest``: the rise since that the
    parent's own faults leave unexplained), between the same pages and all the fork shared.

    * From the level (``B(P, now) = back then + rest``) where it can be trusted: the
      parent's own faults since the fork are too few to blur it (main's 0.2 MB in the
      benchmark's os.fork tree), or its pool was learned before, from the second reading
      after a fork on (the level then holds what the model made of those faults). Main's
      rise from 82 to 114 MB there fitted both a pool of 155 MB and the same pages; its
      level, only the latter.
    * Else from the difference, ``B(P, now) - B(P, then) = rest``, with ``P`` at least the
      largest copy now: a rank's 30-50 MB of own faults as its DataLoader starts are part
      copies of its own pages, part not (53 MB of them once made 30 MB of USS), and the
      level would charge that to its workers. From the fork itself, the difference is the
      level: nothing learned.

    Only an interval whose children copied enough to tell (8 MB between the same pages and
    all of the fork's) and whose own faults were a small part of that teaches it: a rank's
    34 MB of them in the interval after its fork's reading once set its pool to all of S."""
    copies = child_copies(plan, tr)
    then = copies_then(plan, tr)
    if len(copies) < 2 or tr.fork.pages <= 0:
        return
    top = max(copies)
    cap = max(tr.fork.pages, top)

    def gained(pool: float) -> float:
        return came_back(pool, copies) - came_back(pool, then)

    tells = gained(MiB) - gained(cap)  # the same pages against all of the fork's
    if tells < CALIBRATION_BYTES or tr.since.own > POOL_OWN_SHARE * tells:
        return  # too little to tell, or the parent's own faults could (a rank's DataLoader start)
    level = tr.fork.back_at_exact + rest
    first = not any(then)
    if tr.fork.own_after <= POOL_LEVEL_OWN_SHARE * level or (tr.fork.pool is not None and not first):
        tr.fork.pool = least(lambda pool: abs(came_back(pool, copies) - level), MiB, cap)
    elif not first:
        tr.fork.pool = least(lambda pool: abs(gained(pool) - rest), top, cap)
    if tr.fork.pool is not None:
        plan.pool_share = tr.fork.pool / tr.fork.pages


def least(f: Callable[[float], float], low: float, high: float, steps: int = POOL_GRID_STEPS) -> float:
    """Where ``f`` is least on [low, high], on a log scale: a grid, then a finer one around its
    best point (a pool 3 % off puts a parent's return 10 % off at four workers)."""
    for _ in range(POOL_GRID_ROUNDS):
        grid = [low * (high / low) ** (k / steps) for k in range(steps + 1)]
        best = min(range(steps + 1), key=lambda k: f(grid[k]))
        low, high = grid[max(best - 1, 0)], grid[min(best + 1, steps)]
    return min((low, high, math.sqrt(low * high)), key=f)


def came_back(pool: float, copies: list[float]) -> float:
    """A parent's pages back when its children copied ``copies`` of a pool of ``pool`` bytes,
    each its own share, independently: a page is back once every child copied it. A pool is
    never less than what a child copied (the least pool: they copy the same pages)."""
    pool = max(pool, *copies, 1.0)
    return pool * math.prod(c / pool for c in copies)
