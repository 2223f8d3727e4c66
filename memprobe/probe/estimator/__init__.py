"""The USS estimator: where to spend exact readings (smaps_rollup), and what USS to show between them.

An exact reading walks the process's page tables: ~40 ns per resident page, ~7 ms for a 700 MB
process, so a reading of every big process every second does not fit a 1 % CPU share. The cheap
tier (stat + status, ~60 µs a process) already says who moved: a process's USS can only change
when it faults pages in (``minflt``), frees them (RSS falls), or when a process it shares pages
with through fork faults (a copy-on-write fault in a sharer leaves the page to the others) or
exits, or when it forks. So:

* a process whose own counters and whose sharers' counters did not move since its last exact
  reading needs none; nor does one whose estimate cannot be off by more than 5 % of its USS,
  judged from how much it moved and how wrong its estimate was at past readings, unless its
  estimate moved a quarter (8 MB at least) from that reading: the analysis judges exact readings;
* some readings cannot wait and may also spend the budget's reserve, which is theirs (a tick
  that costs more than the budget earns does not spend it): a parent at the tick its
  children appear or exit (its USS jumps there, in ways its counters cannot see: read, its
  estimate is recalibrated at once), a parent whose pool (below) is unknown once its children
  could have given it 8 MB more than its estimate says, a spawned worker at the end of its
  start-up (its window starts there), each forked child once, as soon as the budget allows
  (its fork is its exact start, USS 0, so one reading measures its growth), and a process whose
  estimate moved a quarter from its last reading (ticks that cost the whole budget on a VM left a
  main process growing 10 MB/s read once in 30 s, and without a verdict);
* the others are read least-sure first (expected error times time unread), as long as the
  predicted cost fits what the budget has left;
* between exact readings its USS is *estimated* from the cheap counters, calibrated at every
  exact reading on the previous intervals: ``USS_k + beta * own_faults * page + gamma *
  sharers_faults * page + RSS falls``, with ``beta`` and ``gamma`` in [0, 1] (beta: the mean of
  its old value and the last interval's). For a parent
  whose forked children live, the sharers' term is structural instead: a page its fork made
  shared is the parent's alone again once every child copied it. Children copy from a *pool*
  of ``P`` of its pages (the pages their reads touch: a DataLoader's records, not their
  strings), each a share ``C_i / P`` of it (``C_i``: child i's estimated USS), independently,
  so ``P * prod_i (C_i / P)`` are back. ``P`` is learned at the parent's readings and kept for
  its next generation of children; between ``max_i C_i`` (they copy the same pages) and the
  pages the fork shared (``S``), and ``sqrt(S * max_i C_i)`` until a reading says.

Where the model cannot be trusted, pages are counted instead: a parent of forked children and
a process that is no worker (main, a rank, a launcher) keep a *page census*
(:mod:`memprobe.probe.census`, ~0.2-0.5 ms): a fixed sample of its pagemap, the pages it maps
alone counted and scaled up; its estimate is that count, plus what its RSS gained outside the
sample's mappings, plus its private pages outside them (from its last reading). A parent's is
read when its family moved, another's once a second; its standard error counts in the expected
error that decides readings. The model above still runs beside it (its state is what a fork
shared, whatever a census read between the fork and the tick its children are seen). See
:meth:`~memprobe.probe.estimator.planner.ExactPlanner.wants_census`.

The package holds no /proc code: :class:`~memprobe.probe.estimator.planner.ExactPlanner` is fed
numbers, so it is tested alone (tests/unit/test_estimator*.py). Its modules:

* ``tuning``: every constant and weight above, named, with the rule it encodes;
* ``state``: one process's state, in parts (counters, the interval since its last reading, that
  reading, the calibration, a parent's fork pool, its census);
* ``planner``: :class:`~memprobe.probe.estimator.planner.ExactPlanner`, the readings and the
  estimate;
* ``pool``: what a parent's forked children give back to it (the pool model above).

The census's reading of /proc/PID/pagemap (:mod:`memprobe.probe.census`) stays with the other
readers of /proc in :mod:`memprobe.probe`: here only its counts arrive, as numbers. The sampler
that feeds the planner is :mod:`memprobe.probe.tree_sampler`; the analysis of a recorded tree
(:mod:`memprobe.analysis.growth`) reads the estimates it wrote (``uss_est_mb``).
"""

from __future__ import annotations

from memprobe.probe.estimator.planner import ExactPlanner
from memprobe.probe.estimator.state import Check, Track

__all__ = ["Check", "ExactPlanner", "Track"]
