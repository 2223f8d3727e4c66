"""Every tuning constant and weight of the estimator, each with the rule it encodes.

One place: :mod:`~memprobe.probe.estimator.planner` (which readings, the estimate, its
calibration) and :mod:`~memprobe.probe.estimator.pool` (a parent's pages back from its forked
children) use these names and no bare number. A weight ``W`` of a smoothed value is the share the
newest measurement gets: ``new = (1 - W) * old + W * measured``. The measurements behind a value
follow its rule; docs/perf/record.md and docs/performance.md hold the runs.
"""

from __future__ import annotations

from memprobe.core.system import PAGE_SIZE

MiB = 1024 * 1024

# -- when a reading is needed -----------------------------------------------------------------
# Less movement than this since the last exact reading: no reading needed.
MOVED_BYTES = 1 * MiB
# A reading is needed when the estimate may be off by more than this share of the USS (or by
# MOVED_BYTES): the readings go where the estimate is least sure, within the budget.
REL_TOLERANCE = 0.05
# An estimate that moved this share of the last exact reading (and at least DRIFT_BYTES) from it
# needs a reading however sure it is: the analysis judges exact readings, and a process that ends
# unread leaves only its estimate (a loop that kept its outputs grew 39 -> 112 MB in 2 s, its
# census sure within 5 % all the way, and exited unread at a 5 % budget half spent: "flat", +37 MB).
DRIFT_SHARE = 0.25
DRIFT_BYTES = 8 * MiB
# A sharer's fault unshares a page for us only when we were its last sharer: it counts this much
# in our movement.
SHARED_WEIGHT = 0.5
# A census's expected error counts its sample's standard error this many times (see
# Track.expected_error): its sampling noise alone seldom asks for a reading.
CENSUS_ERROR_SPANS = 2.0
# A process read this tick still counts its expected error once: priority = error x (this + age).
PRIORITY_AGE_S = 1.0

# -- a process that went quiet --------------------------------------------------------------------
# A process that moved this much since its last reading and has just gone quiet is read first
# (its priority times QUIET_BOOST): on a short job the last reading of a worker should come when
# it has finished copying, not while it is half-way.
QUIET_AFTER_BYTES = 16 * MiB
QUIET_BOOST = 4.0  # the priority of a process that went quiet, times this
# Gone quiet: its latest tick moved at most this share of its smoothed rate.
QUIET_RATE_SHARE = 0.1
# A process that went quiet with an expected error of this share of its USS or more is read
# before the forked children never read (see ExactPlanner.choose).
QUIET_OFF_SHARE = 0.1
RATE_WEIGHT = 0.3  # the smoothed rate (bytes moved per tick): the latest tick's weight

# -- the estimate and its calibration -------------------------------------------------------------
# A forked child's estimate is sure from its fork (USS 0, minflt 0: beta 1), but not blindly:
# its uncertainty (expected error per byte moved) starts here, below a process never read (1),
# so its parent, whose USS the fork upset, is read first.
FORKED_UNCERTAINTY = 0.25
UNCERTAINTY_FLOOR = 0.05  # however well the estimate did so far, it is never trusted blindly
# The uncertainty is the mean of its old value and the last reading's miss per byte moved.
UNCERTAINTY_WEIGHT = 0.5
# beta (USS per own fault byte) and rho (USS per byte the RSS gained, alone in its tree): the
# mean of the old value and the interval's. A short interval is noisy (a worker just forked once
# showed 7 MB of faults and no USS rise; replacing beta by 0 put its estimate 86 % low ten
# seconds later).
CALIBRATION_WEIGHT = 0.5
# The least movement an interval must hold to teach the estimate anything (beta, rho, gamma, a
# pool), and the least the model's possible miss on a parent must reach before it asks for a
# reading (see pool.until_pool_known); a reading that found this much (or FELL_SHARE)
# of its USS gone, its RSS held and no child, is a fork not yet seen.
CALIBRATION_BYTES = 8 * MiB
FELL_SHARE = 0.5  # ... the share of its modelled USS gone that makes such a fall
# gamma (USS per sharer fault byte) is learned only from what its own faults leave unexplained,
# and only a real part of the rise: at least this share of it (or MOVED_BYTES). A worker's few MB
# beyond its faults, spread over its siblings' hundreds of MB of faults, would otherwise add tens
# of MB to its estimate later.
GAMMA_REST_SHARE = 0.25
# A fork is seen within a second (children lists of every thread, once a second): a reading that
# fell this long before its children were seen was of the fork.
FELL_WINDOW_S = 1.5
# A read fault on a file page maps up to this many bytes around it (the kernel's
# fault_around_bytes, 64 KiB by default): a forked child's page tables start without its shared
# file pages, and each fault that maps them back counts in minflt but adds no page of its own.
# Counted as its own, a forked Python child that wrote 256 KiB was estimated at 0.62 MB of USS
# (159 faults) where smaps_rollup said 0.49 (its RssFile: 2.1 MB, ~33 of those faults).
FAULT_AROUND_BYTES = 64 * 1024
CHECK_FLOOR_BYTES = MiB  # an estimate's error is a share of the reading, or of this if less

# -- a parent's pool (see pool.py) ----------------------------------------------------------------
# An interval teaches the pool only where the parent's own faults were at most this share of what
# its children's copies could tell (a rank's 34 MB of them in the interval after its fork's
# reading once set its pool to all the fork shared).
POOL_OWN_SHARE = 0.25
# The pool is fitted to the level of what came back (not only its change) where the parent's own
# faults since the fork are at most this share of that level (main's 0.2 MB in the benchmark's
# os.fork tree; a rank's 30-50 MB as its DataLoader starts are not).
POOL_LEVEL_OWN_SHARE = 0.25
# The pool is fitted on a log grid of this many steps, refined this many times around the best
# point (a pool 3 % off puts a parent's return 10 % off at four workers).
POOL_GRID_STEPS = 32
POOL_GRID_ROUNDS = 3

# -- the cost of an exact reading ---------------------------------------------------------------
READ_OVERHEAD_S = 60e-6  # open/read/parse of smaps_rollup on top of the page walk
INITIAL_S_PER_BYTE = 40e-9 / 4096  # the page walk (~40 ns a 4 KiB page), until a reading measures it
COST_WEIGHT = 0.3  # the cost per resident byte: the latest big reading's weight
# The cost per resident byte is learned only from readings of processes this big: a torchrun
# child read at its exec (a few KB resident, 0.3 ms of Python overhead) once taught 250 ms per MB
# and no reading fitted the budget again. And it is kept within 4 ns-4 µs per 4 KiB page.
LEARN_COST_BYTES = 32 * MiB
S_PER_BYTE_RANGE = (4e-9 / 4096, 4e-6 / 4096)

# -- the page census ------------------------------------------------------------------------------
CENSUS_MIN_BYTES = 32 * MiB  # smaller processes that are no parent keep no census (see wants_census)
CENSUS_IDLE_S = 1.0  # a census is read at least this often, moved or not (see census_due)
# A parent's census is due once its family moved a page since it was read.
CENSUS_MOVED_BYTES = PAGE_SIZE
# A census is drawn again once the RSS gained (or lost) outside its population this much, or this
# share of the USS (a main process building its dataset after its first reading): see census_stale.
CENSUS_STALE_BYTES = 16 * MiB
CENSUS_STALE_SHARE = 0.1
