"""Where to spend exact readings (smaps_rollup), and what USS to show between them.

An exact reading walks the process's page tables: ~40 ns per resident page, ~7 ms for a 700 MB
process, so a reading of every big process every second does not fit a 1 % CPU share. The cheap
tier (stat + status, ~60 µs a process) already says who moved: a process's USS can only change
when it faults pages in (``minflt``), frees them (RSS falls), or when a process it shares pages
with through fork faults (a copy-on-write fault in a sharer leaves the page to the others) or
exits, or when it forks. So:

* a process whose own counters and whose sharers' counters did not move since its last exact
  reading needs none; nor does one whose estimate cannot be off by more than 5 % of its USS,
  judged from how much it moved and how wrong its estimate was at past readings;
* some readings cannot wait and may also spend the budget's reserve: a parent at the tick its
  children appear or exit (its USS jumps there, in ways its counters cannot see: read, its
  estimate is recalibrated at once), a parent whose pool (below) is unknown once its children
  could have given it 8 MB more than its estimate says, a spawned worker at the end of its
  start-up (its window starts there), and each forked child once, as soon as the budget allows
  (its fork is its exact start, USS 0, so one reading measures its growth);
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
:meth:`ExactPlanner.wants_census`.

This module holds no /proc code: :class:`ExactPlanner` is fed numbers, so it is tested alone.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1024 * 1024
MOVED_BYTES = 1 * MiB  # less movement than this since the last exact reading: none needed
SHARED_WEIGHT = 0.5  # a sharer's fault unshares a page for us only when we were its last sharer
# A reading is needed when the estimate may be off by more than this share of the USS (or by
# MOVED_BYTES): the readings go where the estimate is least sure, within the budget.
REL_TOLERANCE = 0.05
# A process that went quiet with an expected error of this share of its USS or more is read
# before the forked children never read (see ExactPlanner.choose).
QUIET_OFF_SHARE = 0.1
FORKED_UNCERTAINTY = 0.25
CALIBRATION_BYTES = 8 * MiB
# A process that moved this much since its last reading and has just gone quiet is read first
# (its priority times QUIET_BOOST): on a short job the last reading of a worker should come when
# it has finished copying, not while it is half-way.
QUIET_AFTER_BYTES = 16 * MiB
FELL_WINDOW_S = 1.5  # a fork is seen within a second (children lists of every thread, once a second)
QUIET_BOOST = 4.0  # an interval that moved less than this teaches the estimate nothing
UNCERTAINTY_FLOOR = 0.05  # however well the estimate did so far, it is never trusted blindly
READ_OVERHEAD_S = 60e-6  # open/read/parse of smaps_rollup on top of the page walk
INITIAL_S_PER_BYTE = 40e-9 / 4096  # the page walk, until the first reading measures it here
# The cost per resident byte is learned only from readings of processes this big: a torchrun
# child read at its exec (a few KB resident, 0.3 ms of Python overhead) once taught 250 ms per MB
# and no reading fitted the budget again. And it is kept within 4 ns-4 µs per 4 KiB page.
LEARN_COST_BYTES = 32 * MiB
CENSUS_MIN_BYTES = 32 * MiB  # smaller processes that are no parent keep no census (see wants_census)
CENSUS_IDLE_S = 1.0  # a census is read at least this often, moved or not (see census_due)
CENSUS_STALE_BYTES = 16 * MiB  # see census_stale
S_PER_BYTE_RANGE = (4e-9 / 4096, 4e-6 / 4096)
# A read fault on a file page maps up to this many bytes around it (the kernel's
# fault_around_bytes, 64 KiB by default): a forked child's page tables start without its shared
# file pages, and each fault that maps them back counts in minflt but adds no page of its own.
# Counted as its own, a forked Python child that wrote 256 KiB was estimated at 0.62 MB of USS
# (159 faults) where smaps_rollup said 0.49 (its RssFile: 2.1 MB, ~33 of those faults).
FAULT_AROUND_BYTES = 64 * 1024


@dataclass
class Track:
    """One process's counters, and its movement since its last exact reading (bytes)."""

    minflt: int
    rss: int
    own: float = 0.0  # its own minor faults x page size
    drops: float = 0.0  # sum of its RSS falls (<= 0): freed pages
    shared: float = 0.0  # its sharers' faults x page size
    # Bytes the counters cannot see: the RSS of a sharer that exited (pages it shared may now be
    # ours alone), the USS a fork made shared. The interval holds a change of structure: its
    # estimate is not used to calibrate, and its check is marked.
    unseen: float = 0.0
    event: bool = False
    clean: float = 0.0  # Private_Clean at the last exact reading: file pages a fork leaves private
    # A parent's pages shared with its forked children at their fork (bytes): a page comes back
    # to the parent alone once every child has copied it (or exited).
    fork_pages: float = 0.0
    kids: list[int] = field(default_factory=list)
    kids_gone: set[int] = field(default_factory=set)
    # The pages its children copy from (bytes; see the module doc), learned at its readings and
    # kept for its next generation of children: each epoch's DataLoader workers read the same
    # dataset the same way. On a shuffled DataLoader over a list of dicts (rank of 434 MB anon,
    # 4 workers copying ~153 MB each) it held at 157-166 MB from when they had copied 60 % to the
    # end of the epoch, and at 158 MB in the next, where (product of copied shares of S) ** alpha
    # needed alpha from 0.75 to 0.38 within the epoch.
    pool: float | None = None
    copies_at_exact: dict[int, float] = field(default_factory=dict)  # each child's, at the last reading
    own_after_fork: float = 0.0  # its own faults since its children forked (bytes): see _learn_pool
    left: bool = False  # a sharer exited since its last reading (an event the counters cannot see)
    # (t, USS before) of a reading that found most of its USS gone, its RSS held, and no child:
    # it forked between the tick's children lists and its reading (see ExactPlanner._forked).
    fell: tuple[float, float] | None = None
    back_at_exact: float = 0.0  # the bytes back at the last exact reading (or the fork)
    uss: float | None = None  # at the last exact reading
    rss_exact: int = 0
    seen_t: float = 0.0  # its latest tick
    exact_t: float | None = None
    beta: float = 1.0  # USS bytes per own fault byte: copy-on-write and new pages are all private
    gamma: float = 0.0  # USS bytes per sharer fault byte: learned, none until seen
    # How wrong the estimate was at past readings, per byte moved (1: no idea yet).
    uncertainty: float = 1.0
    attempted: bool = False  # an exact reading was tried (smaps_rollup may be unreadable)
    readings: int = 0
    # A reading that cannot wait: a parent at a change of its tree (its children appeared or
    # exited: what its estimate learned no longer holds), a spawned worker at the end of its
    # start-up (where its window begins).
    forced: bool = False
    rate: float = 0.0  # bytes moved per tick (own + sharers' faults), smoothed
    last_move: float = 0.0  # bytes moved at the latest tick
    # The only live process of the tree: the file pages it maps are its own as long as no other
    # process maps them (see ExactPlanner._estimate).
    alone: bool = False
    rho: float = 1.0  # USS bytes per byte its RSS gained while alone: learned as beta is
    # A page census (see ExactPlanner.census): (exclusive, present) bytes of the sampled
    # mappings at the panel's start, with its RSS then, and at the latest census.
    census0: tuple[float, float] | None = None
    census: tuple[float, float] | None = None
    # USS - exclusive at its panel's start: its private pages outside the population (file
    # pages, its stack), and, for a panel started at a reading, the sample's error of level
    census_rest: float = 0.0
    census_rss0: int = 0
    census_error: float = 0.0  # one standard error of the census's estimate (bytes)
    census_from_reading: bool = False  # its panel started right after an exact reading
    census_moved: float = 0.0  # what its family moved since its census was read (bytes)
    parent: bool = False  # it has forked children, or had: see wants_census
    census_off: bool = False  # its pagemap could not be read: no census
    census_t: float = 0.0  # when its census was last read
    forked_child: bool = False
    file_rss: float = 0.0  # its file-backed RSS at the latest tick (bytes), where the sampler gave it

    def went_quiet(self) -> bool:
        """It moved a lot since its last reading and has just stopped: its USS has reached the
        value it will hold (a worker that finished its share, waiting for its end), so a
        reading now is the one that lasts. Moved by its counters, or by its census: a torchrun
        launcher whose file pages its ranks' torch import shared (39 MB by its census) moves no
        counter of its own; never boosted, it lost every reading to the ranks and stood 9.5 %
        under its USS for the rest of the run (three runs of three)."""
        moved = max(self.moved(), self.census_span() or 0.0)
        return moved >= QUIET_AFTER_BYTES and self.last_move <= 0.1 * self.rate

    def moved(self) -> float:
        """Bytes that may have changed its USS since its last exact reading."""
        return self.own - self.drops + SHARED_WEIGHT * self.shared

    def expected_error(self) -> float:
        """What the estimate may be off by now: the movement it calibrates times how wrong it
        was so far, plus what it cannot see (sharers that exited) in full. A census sees those."""
        span = self.census_span()
        if span is not None:  # how wrong it was at past readings, and its sample's own error
            return self.uncertainty * span + 2.0 * self.census_error
        return self.uncertainty * self.moved() + self.unseen

    def census_span(self) -> float | None:
        """How much the census-based estimate moved from the last exact reading (bytes), or
        ``None`` without a census."""
        if self.census0 is None or self.census is None:
            return None
        return abs(self.census[0] - self.census0[0]) + abs(self.outside())

    def outside(self) -> float:
        """Bytes its RSS gained outside the census's population since its last exact reading
        (new mappings, file pages): what its RSS gained less what the population's present
        pages did."""
        assert self.census0 is not None and self.census is not None
        return (self.rss - self.census_rss0) - (self.census[1] - self.census0[1])

    @property
    def live_kids(self) -> list[int]:
        """Its children from its last fork that have not exited, in fork order."""
        return [k for k in self.kids if k not in self.kids_gone]


@dataclass
class Check:
    """An estimate set against the exact reading taken at the same tick."""

    t: float
    pid: int
    estimate: float
    exact: float

    event: bool = False  # the interval held a fork or a sharer's exit (see Track.event)

    @property
    def error_pct(self) -> float:
        return 100.0 * abs(self.estimate - self.exact) / max(self.exact, MiB)


@dataclass
class ExactPlanner:
    """Tracks every process's movement, picks the exact readings of a tick, estimates USS."""

    tracks: dict[int, Track] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    s_per_byte: float = INITIAL_S_PER_BYTE
    # The latest pool learned, as a share of its parent's fork pages: the start of a parent that
    # has none (torchrun's ranks run the same script, each with its own DataLoader).
    pool_share: float | None = None
    # Forked children that deal out distinct items (DataLoader workers: each index goes to one
    # worker), as the sampler last classified them: see _pool.
    dealt: set[int] = field(default_factory=set)
    # Processes that are no worker of any kind (main, ranks, a launcher), as the sampler last
    # classified them: they keep a census (see wants_census).
    hosts: set[int] = field(default_factory=set)
    # The tree's file-backed pages grew this tick (another process may have mapped libraries a
    # process holds alone): every census is due (see census_due).
    files_moved: bool = False

    # -- every tick ----------------------------------------------------------------------
    def observe(
        self,
        t: float,
        counters: dict[int, tuple[int, int]],
        groups: dict[int, int],
        forked_from: dict[int, int] | None = None,
        born: dict[int, float] | None = None,
        dealt: set[int] | None = None,
        files: dict[int, float] | None = None,
    ) -> None:
        """This tick's ``pid -> (minflt, rss bytes)`` of every live process (a tracked process
        missing from it is gone); ``groups`` maps a pid to its fork-connected family (processes
        that share pages); ``forked_from`` maps every forked (not exec'd) process to its parent
        (``None``: not known this tick);
        ``born``: a forked process's start, on ``t``'s clock, where known; ``dealt``: the
        forked children that deal out distinct items (DataLoader workers); ``files``: each
        process's file-backed RSS (bytes), where known."""
        if dealt is not None:
            self.dealt = set(dealt)
        for pid in [p for p in self.tracks if p not in counters]:
            self._gone(pid, groups)
        if forked_from is not None:  # a forked child no longer in it has exec'd
            for pid in [p for p, tr in self.tracks.items() if tr.forked_child and p not in forked_from]:
                self._exec(pid, groups)
        forked_from = forked_from or {}
        new_kids = [
            (pid, parent)
            for pid, parent in forked_from.items()
            if pid not in self.tracks and parent in self.tracks and pid in counters
        ]
        spans = {parent: t - self.tracks[parent].seen_t for _, parent in new_kids}  # since its last tick
        moved_by_group: dict[int, float] = {}
        own_now: dict[int, float] = {}
        for pid, (minflt, rss) in counters.items():
            tr = self.tracks.get(pid)
            if tr is None:
                self.tracks[pid] = self._new_track(minflt, rss, pid in forked_from)
                self.tracks[pid].exact_t = self.tracks[pid].seen_t = t  # unread since it was first seen
                continue
            faults = float(max(0, minflt - tr.minflt) * PAGE)
            tr.census_moved += faults + abs(rss - tr.rss)
            tr.seen_t = t
            tr.own += faults
            tr.own_after_fork += faults
            if tr.forked_child and not tr.readings and files is not None and pid in files:
                # Never read: a fall of its file-backed RSS (its parent's file pages unmapped, or
                # reclaimed) frees no page of its own. 300 children that each lost 136 KB of RSS
                # at once took 40 MB off a total of 246.
                tr.drops += min(0.0, (rss - files[pid]) - (tr.rss - tr.file_rss))
            else:
                tr.drops += min(0, rss - tr.rss)
            tr.minflt, tr.rss = minflt, rss
            own_now[pid] = faults
            tr.last_move = faults
            g = groups.get(pid, pid)
            moved_by_group[g] = moved_by_group.get(g, 0.0) + faults
        for pid, parent in new_kids:
            # A parent's faults of the tick its child appears straddle the fork: those before it
            # made pages it now shares (a rank's last 50 MB of records), those after, private
            # ones (its DataLoader's set-up). Split by time: all counted after, they once made
            # 86 MB of "own" growth where the rank's USS rose by 29; all before, 37 MB where
            # another's rose by 34.
            tr = self.tracks[parent]
            start, span = (born or {}).get(pid), spans[parent]
            after = 0.0 if start is None or span <= 0 else min(max((t - start) / span, 0.0), 1.0)
            self._forked(tr, pid, t, after * own_now.get(parent, 0.0))
        for pid, faults in own_now.items():
            tr = self.tracks[pid]
            by_sharers = moved_by_group.get(groups.get(pid, pid), 0.0) - faults
            tr.shared += by_sharers
            tr.census_moved += by_sharers
            tr.last_move += SHARED_WEIGHT * by_sharers
            tr.rate = 0.7 * tr.rate + 0.3 * tr.last_move
        for pid, file_rss in (files or {}).items():
            if pid in self.tracks:
                self.tracks[pid].file_rss = file_rss
        for tr in self.tracks.values():
            tr.alone = len(counters) == 1 and not tr.kids
        for tr in self.tracks.values():
            if tr.kids and tr.pool is None:
                self._until_pool_known(tr)

    @staticmethod
    def _new_track(minflt: int, rss: int, forked: bool) -> Track:
        """A forked child is known exactly at its fork: USS 0 (it shares every page) and minflt
        0 (the kernel starts the child's count there); its estimate runs from that baseline
        until its first reading. Any other process has no estimate before its first reading."""
        if forked:
            # Exact baseline, and a forked child's faults are copies or new pages (beta 1): less
            # unsure than a process never read, so its parent, whose USS the fork upset, goes first.
            return Track(
                minflt, rss, own=minflt * PAGE, uss=0.0, uncertainty=FORKED_UNCERTAINTY, forked_child=True
            )
        return Track(minflt, rss, rss_exact=rss)

    def _forked(self, tr: Track, child: int, t: float, after: float = 0.0) -> None:
        """At fork, the parent's private anonymous pages became shared with the child: its USS
        fell to about the private file pages it held (the child maps those lazily); ``after``:
        the bytes of its faults counted since that came after the fork. Children forked while
        others of the same family live share the same pages. A parent read after its fork but
        before its children were seen (they fork between a tick's children lists and its
        readings: main of the os.fork tree, read at 1.1 MB where it held 671) shared what it
        held before that reading; taken from its reading, its fork shared 1 MB and its
        children's copies and exits gave it nothing back for the rest of the run."""
        if tr.live_kids:  # a sibling of live (or just seen) children
            tr.kids.append(child)
            tr.census_moved = math.inf  # it shares the parent's pages now: its census sees that
            return
        # What its counters say it held: a census read between the fork and this tick (children
        # are seen a tick late) already counts the pages shared, and main of the os.fork tree,
        # taken to have shared 0.4 MB, got nothing back from its workers' copies.
        before = self._modelled(tr)
        if before is None:
            return
        if tr.fell is not None and tr.exact_t == tr.fell[0] and t - tr.fell[0] <= FELL_WINDOW_S:
            before = max(before, tr.fell[1] + tr.beta * tr.own + tr.drops)
        tr.fork_pages = max(before - tr.beta * after - tr.clean, 0.0)
        tr.kids, tr.kids_gone, tr.back_at_exact, tr.copies_at_exact = [child], set(), 0.0, {}
        tr.parent = True
        tr.unseen += tr.fork_pages
        tr.uss, tr.own, tr.drops, tr.shared, tr.own_after_fork = tr.clean, after, 0.0, 0.0, after
        tr.event = tr.forced = True
        # A new panel at the fork counts what the parent kept at its level (the reading asked
        # for sets it exactly). Carried through the fork, a census's change of -400 MB was
        # ~2.5 % off: 12 MB where a rank held 37.
        tr.census0 = tr.census = None

    def _copies(self, tr: Track) -> list[float]:
        """What each live child has copied (its estimated USS; one not tracked yet: 0). An
        exited child is left out: its pages went with it."""
        out = []
        for kid in tr.live_kids:
            kt = self.tracks.get(kid)
            est = self._estimate(kt) if kt is not None and kt is not tr else None
            out.append(max(est or 0.0, 0.0))
        return out

    def _pool(self, tr: Track, copies: list[float]) -> float:
        """The pages the children copy from: learned, else as another parent's was (its share
        of the pages the fork shared), else a prior from what the children are. DataLoader
        workers are dealt distinct indices (each goes to one worker): they never copy the same
        pages by design, only pages their records share, so halfway (geometric) between the
        same pages (the largest copy) and all the fork shared. Other forked children run the
        parent's own code on its data: the same pages (the largest copy), as the first model
        (1/k) had it; halfway put main of the os.fork tree, whose 4 workers each read every
        record, 78-99 % low at its first reading after the fork (no counter tells the two apart
        before a reading)."""
        if tr.pool is not None:
            return tr.pool
        if self.pool_share is not None:
            return self.pool_share * tr.fork_pages
        top = max(copies, default=0.0)
        if self._same_pages(tr):
            return top
        return math.sqrt(tr.fork_pages * top)

    def _then(self, tr: Track) -> list[float]:
        """Each live child's copy at the parent's last reading (0: forked since)."""
        return [tr.copies_at_exact.get(k, 0.0) for k in tr.live_kids]

    def _spread(self, tr: Track) -> float:
        """How far what came back to the parent since its last reading may be from what its
        model says, while its pool is unknown: as far as either end, the same pages (a pool no
        bigger than the largest copy) or all the fork shared."""
        copies = self._copies(tr)
        if len(copies) < 2:
            return 0.0
        then = self._then(tr)
        model = self._back(tr) - self._back_then(tr)
        ends = (0.0, max(tr.fork_pages, *copies))  # the same pages, all the fork shared
        return max(abs(_came_back(p, copies) - _came_back(p, then) - model) for p in ends)

    def _until_pool_known(self, tr: Track) -> None:
        """A parent whose pool was never learned is read as soon as that spread could teach it
        (CALIBRATION_BYTES) and is a real part of its USS: the reading says which way its
        children copy (the same pages: all of it came back; a shuffled DataLoader: almost none,
        until late). Readings of a parent after a fork were otherwise few: a rank read 3 s
        after its workers forked was not read again until they exited, 24 s later."""
        if tr.uss is None or tr.forced or tr.census0 is not None:
            return  # a census counts what comes back: no pool is needed
        est = self._estimate(tr) or 0.0
        if self._spread(tr) >= max(CALIBRATION_BYTES, REL_TOLERANCE * est):
            tr.forced = True

    def _back(self, tr: Track) -> float:
        """The bytes of the parent's fork pages that are its alone again: ``P * prod_i (C_i /
        P)`` over the live children (each copied its share of the pool, independently)."""
        if not tr.kids or tr.fork_pages <= 0:
            return 0.0
        copies = self._copies(tr)
        if not copies:
            return tr.fork_pages  # every child exited: all of them
        if self._same_pages(tr):
            # The same pages in the same order (each of main's workers reads every record): a
            # page is back once the slowest copied it. As independent shares of the largest
            # copy, one worker a tick ahead of the others (40 MB against 36) took 6 MB off.
            return min(*copies, tr.fork_pages)
        return _came_back(self._pool(tr, copies), copies)

    def _same_pages(self, tr: Track) -> bool:
        """Its children are taken to copy the same pages (see _pool): no pool learned or lent,
        and none of them a DataLoader worker."""
        return tr.pool is None and self.pool_share is None and not any(k in self.dealt for k in tr.kids)

    def _back_then(self, tr: Track) -> float:
        """What the model, as it is now, says was back at the parent's last reading (its
        children's copies then): the estimate adds what came back since. Kept as it was at the
        reading, it mixed two models when the pool changed between (a pool lent by the other
        rank: 20 MB back then under halfway, 100 now under the lent pool, where the lent pool
        put 50 back then; the rank's estimate went 16 % high)."""
        then = list(tr.copies_at_exact.values())  # the children of then: one forked since
        if not then or tr.fork_pages <= 0:  # shares again what came back before its fork
            return tr.back_at_exact
        if self._same_pages(tr):
            return min(*then, tr.fork_pages)
        return _came_back(self._pool(tr, self._copies(tr)), then)

    def _gone(self, pid: int, groups: dict[int, int]) -> None:
        """Pages it shared may now be its sharers' alone: they have moved."""
        tr = self.tracks.pop(pid)
        family = groups.get(pid, pid)
        for other, ot in self.tracks.items():
            if groups.get(other, other) == family:
                ot.unseen += tr.rss
                ot.event = ot.left = True
                ot.census_moved = math.inf
            if pid in ot.kids:
                ot.kids_gone.add(pid)
                ot.forced |= ot.census0 is None  # a census sees what came back

    def _exec(self, pid: int, groups: dict[int, int]) -> None:
        """A forked child that exec'd (torchrun's ranks are seen between their fork and their
        exec): a new program, its pages its own, no longer its parent's. It is a new process
        for the planner (read at once, whatever the budget: with a census, a rank's first
        reading otherwise came after its workers had started, and what it built before them
        was not known), and to its parent, gone."""
        tr = self.tracks[pid]
        self._gone(pid, groups)
        self.tracks[pid] = self._new_track(tr.minflt, tr.rss, False)
        self.tracks[pid].exact_t = self.tracks[pid].seen_t = tr.seen_t

    def want(self, pid: int) -> None:
        """Ask for a reading of ``pid`` as soon as the budget allows (see ``Track.forced``)."""
        if pid in self.tracks:
            self.tracks[pid].forced = True

    def estimate(self, pid: int) -> float | None:
        """USS (bytes) now, from the last exact reading and the counters since; ``None`` before
        the first exact reading."""
        tr = self.tracks.get(pid)
        return None if tr is None else self._estimate(tr)

    # -- the page census of a parent ----------------------------------------------------
    def wants_census(self, pid: int) -> bool:
        """A page census is kept by a parent of forked children from their fork on, and by a
        process that is no worker (main, a rank, a launcher: the sampler's ``hosts``) of 32 MB
        or more from its first exact reading: what comes back to a parent as its children copy
        its pages (the model of their copies left ranks 40-55 % low for 10 s while it did not
        know their pool yet), and a launcher's libraries, shared once its ranks map them (its
        estimate stayed 40 % high all run), are counted, not modelled. Workers' own faults
        count their pages (within 2 % of independent readings at 99 %)."""
        tr = self.tracks.get(pid)
        if tr is None or tr.uss is None or tr.census_off:
            return False
        return tr.parent or (pid in self.hosts and not tr.forked_child and tr.rss >= CENSUS_MIN_BYTES)

    def census_new(self) -> list[int]:
        """Parents that just forked (their census was dropped there): a new panel, now."""
        return [
            pid
            for pid, tr in self.tracks.items()
            if tr.census0 is None and tr.parent and self.wants_census(pid)
        ]

    def census_due(self) -> list[int]:
        """Parents whose family moved since their census was read; others, once a second. A
        parent's pages become its own or shared as its children copy and exit (main of the
        os.fork tree got back ~8 MB a second); another process's, as it frees or maps them (its
        RSS, read every tick, counts those outside the census) or as a process outside its
        family maps the same libraries (a launcher's, by its ranks): then, at every tick the
        tree's file pages grew (``files_moved``; the sampler reads their file mappings then)."""
        return [
            pid
            for pid, tr in self.tracks.items()
            if tr.census0 is not None
            and (
                (tr.parent and tr.census_moved >= PAGE)
                or (self.files_moved and tr.census_t < tr.seen_t)
                or tr.seen_t - tr.census_t >= CENSUS_IDLE_S
            )
        ]

    def census_stale(self) -> list[int]:
        """Processes whose census no longer covers what they map: their RSS gained (or lost)
        outside its population more than CENSUS_STALE_BYTES or a tenth of their USS (a main
        process building its dataset after its first reading). A new panel carries the
        estimate on."""
        out = []
        for pid, tr in self.tracks.items():
            if tr.census0 is not None and tr.census is not None:
                est = self._estimate(tr) or 0.0
                if abs(tr.outside()) >= max(CENSUS_STALE_BYTES, 0.1 * est):
                    out.append(pid)
        return out

    def census(
        self,
        pid: int,
        exclusive: float,
        present: float,
        *,
        error: float = 0.0,
        level_error: float = 0.0,
        start: str | None = None,
    ) -> None:
        """A census of ``pid``'s pages (bytes exclusive and present, from a fixed sample:
        :mod:`memprobe.probe.census`); ``start``: the census starts a new panel, ``"reading"``
        right after its exact reading, ``"fork"`` at its children's fork, ``"carry"`` where the
        old panel no longer covers what it maps. Its USS is then the exclusive pages, plus its private pages outside the sampled
        mappings (its stack: the reading's USS less the census, kept as it was by a new panel),
        plus what its RSS gained outside them since the panel's start. A new panel counts the
        pages mapped since anew: carried over as private, the torch libraries a launcher mapped
        after its first reading kept its estimate 22 % high once its ranks shared them.
        ``error``, ``level_error``: the sample's standard error of the change since the panel's
        start and of the level; a panel started at a reading is judged on the first, any other
        on the second."""
        tr = self.tracks.get(pid)
        if tr is None or (start is None and tr.census0 is None):
            return
        if start is not None:
            # Right after a reading, USS less the sample's count: its pages outside the sample
            # and the sample's own error of level, which may be negative (clamped at 0, the
            # estimate stood that error above the reading until the next one: torchrun's
            # launcher 5.5 MB, 3.8 %, for the rest of a run). A new panel of another sample
            # keeps only the pages outside (its own error is its own).
            rest = (tr.uss or 0.0) - exclusive if start == "reading" else max(tr.census_rest, 0.0)
            tr.census0, tr.census_rest, tr.census_rss0 = (exclusive, present), rest, tr.rss
            tr.census_from_reading = start == "reading"
        tr.census, tr.census_t, tr.census_moved = (exclusive, present), tr.seen_t, 0.0
        tr.census_error = error if tr.census_from_reading else level_error

    def drop_census(self, pid: int, *, unreadable: bool = False) -> None:
        """The census could not be read: the model's estimate again, from the last reading.
        ``unreadable``: its pagemap is not ours to read, never try again (else the process
        went, or exec'd: its panel was of an address space that is gone)."""
        tr = self.tracks.get(pid)
        if tr is not None:
            tr.census0 = tr.census = None
            tr.census_off |= unreadable

    def _estimate(self, tr: Track) -> float | None:
        if tr.uss is not None and tr.census0 is not None and tr.census is not None:
            est = tr.census[0] + tr.census_rest + tr.outside()
            return min(max(est, 0.0), float(tr.rss))
        return self._modelled(tr)

    def _modelled(self, tr: Track) -> float | None:
        """The estimate from its counters (the model), census or not."""
        if tr.uss is None:
            return None
        if tr.kids and tr.fork_pages > 0:  # a parent: its children's copies give it pages back
            by_sharers = self._back(tr) - self._back_then(tr)
        else:
            by_sharers = tr.gamma * tr.shared
        own = tr.beta * tr.own
        if tr.forked_child and not tr.readings:
            # Never read: its faults since its fork, less those that mapped its parent's file
            # pages back (each maps up to FAULT_AROUND_BYTES of them; see FAULT_AROUND_BYTES).
            own = tr.beta * max(tr.own - tr.file_rss * PAGE / FAULT_AROUND_BYTES, 0.0)
        if tr.alone:
            # Alone in its tree, the pages its RSS gained are its own, whatever its faults count:
            # the launcher importing torch maps file pages 16 a fault (fault-around), so its
            # faults counted half of its USS rise (32-51 % low), its RSS rise 92-110 % of it.
            # Not so for a process that maps libraries another of the tree mapped before (the
            # ranks importing torch after the launcher: their RSS rise put them 14-63 % high).
            own = max(own, tr.rho * (tr.rss - tr.rss_exact - tr.drops))
        est = tr.uss + own + by_sharers + tr.drops
        return min(max(est, 0.0), float(tr.rss))

    # -- choosing ------------------------------------------------------------------------
    def predicted_cost(self, pid: int) -> float:
        return READ_OVERHEAD_S + self.s_per_byte * self.tracks[pid].rss

    def needs_reading(self, pid: int) -> bool:
        tr = self.tracks[pid]
        if tr.uss is None and not tr.attempted:
            return True
        if tr.uss is None:
            return False  # unreadable (another user's process): tried once
        if not tr.attempted:
            return True  # a forked child never read: the estimate from its baseline is unchecked
        return tr.expected_error() >= max(MOVED_BYTES, REL_TOLERANCE * (self.estimate(pid) or 0.0))

    def priority(self, pid: int, t: float) -> float:
        """The estimate's expected error (MB), times how long it has gone unread: most-moved
        first, and a process that always moves most (a parent whose workers all copy its
        pages) does not take every reading from those that move less. Relative to the USS, a
        parent whose USS a fork brought near 0 would win every time."""
        tr = self.tracks[pid]
        age = t - tr.exact_t if tr.exact_t is not None else 0.0
        boost = QUIET_BOOST if tr.went_quiet() else 1.0
        return tr.expected_error() / MiB * (1.0 + age) * boost

    def choose(
        self, tick: float, allowance_s: float, *, everyone: bool = False, reserve_s: float = 0.0
    ) -> list[int]:
        """The processes to read exactly this tick, while the predicted cost fits ``allowance_s``
        (CPU seconds the budget has left); ``everyone``: all of them, whatever the cost.

        1. each process never tried and not forked (first seen), whatever the cost;
        2. the readings that cannot wait, which may also spend ``reserve_s``: those asked for
           (:meth:`want`, a parent at a change of its tree), then those that went quiet 10 % off
           or more (:meth:`_quiet_and_off`), then each forked child never read, oldest first. A
           forked child's start is exact (USS 0 at its fork), so one reading
           measures its growth; it is not forced at first sight, whatever the cost (a 1 % budget
           once gave each DataLoader worker a single reading, at its birth), but it comes first
           once the budget allows;
        3. the moved ones by priority; the first that does not fit ends the list, so a big
           process is not passed over for ever by smaller ones."""
        if everyone:
            return list(self.tracks)
        chosen = [pid for pid, tr in self.tracks.items() if not tr.attempted and tr.uss is None]
        left = allowance_s - sum(self.predicted_cost(p) for p in chosen)
        off = {pid for pid in self.tracks if pid not in chosen and self._quiet_and_off(pid)}
        urgent = [
            pid
            for pid, tr in self.tracks.items()
            if pid not in chosen and tr.uss is not None and (tr.forced or not tr.attempted or pid in off)
        ]
        urgent.sort(key=lambda p: (not self.tracks[p].forced, p not in off, self.tracks[p].exact_t or 0.0))
        for pid in urgent:
            cost = self.predicted_cost(pid)
            if cost > left + reserve_s:
                break
            chosen.append(pid)
            left -= cost
        moved = [pid for pid, tr in self.tracks.items() if pid not in chosen and self.needs_reading(pid)]
        for pid in sorted(moved, key=lambda p: self.priority(p, tick), reverse=True):
            cost = self.predicted_cost(pid)
            if cost > left:
                break
            chosen.append(pid)
            left -= cost
        return chosen

    def _quiet_and_off(self, pid: int) -> bool:
        """It went quiet after moving, and its estimate may be 10 % off or more: the reading that
        lasts, and one the target needs. A torchrun launcher whose file pages its ranks' torch
        import shared went quiet 14 MB (9.5 %) under its USS; among the moved, it lost every
        reading to the forked workers never read (urgent) and to a rank first by priority that
        did not fit, and stayed there for the rest of the run, in six runs of six."""
        tr = self.tracks[pid]
        if tr.uss is None or not tr.attempted or tr.forced or not tr.went_quiet():
            return False
        if -tr.drops > tr.own + SHARED_WEIGHT * tr.shared:
            # It fell more than it rose: a process freeing its data as it ends. A reading then
            # is of its teardown, not of what it grew to (spawned workers read while they freed
            # their copy at exit had "start-up 97 MB" of 139, and growth -80 MB).
            return False
        return tr.expected_error() >= max(MOVED_BYTES, QUIET_OFF_SHARE * (self.estimate(pid) or 0.0))

    # -- an exact reading ----------------------------------------------------------------
    def tried(self, pid: int) -> None:
        """An exact reading was tried and failed (unreadable): do not force it again."""
        if pid in self.tracks:
            self.tracks[pid].attempted = True
            self.tracks[pid].forced = False

    def exact(
        self, pid: int, t: float, uss: float, rss: int, cost_s: float, clean: float = 0.0
    ) -> float | None:
        """Record an exact reading; returns the estimate it replaces (``None`` for the first),
        and recalibrates on the interval it closes."""
        tr = self.tracks.get(pid)
        if tr is None:
            return None
        est = self.estimate(pid)
        parent = bool(tr.live_kids)
        modelled = self._modelled(tr)  # a census would already have seen the fork
        fell = (
            modelled is not None and not parent and modelled - uss >= max(CALIBRATION_BYTES, 0.5 * modelled)
        )
        tr.fell = (t, modelled) if fell and modelled is not None else None
        tr.event |= fell  # not a change its counters could see: nothing to learn from
        if est is not None:
            self.checks.append(Check(t, pid, est, uss, tr.event))
        span = tr.census_span()
        # How wrong the estimate was, per byte of the movement it followed. A census sees forks
        # and exits, so its miss counts in an interval with an event too.
        if est is not None and (span is not None or not tr.event):
            miss = abs(est - uss) / max(tr.moved() if span is None else span, MiB)
            tr.uncertainty = min(max(0.5 * tr.uncertainty + 0.5 * miss, UNCERTAINTY_FLOOR), 1.0)
        if est is not None and not tr.event:
            self._calibrate(tr, uss)
        elif tr.event:
            # A new structure (it forked, a sharer left): what the estimate learned before
            # does not hold any more; it earns trust again at the next readings. After a fork
            # (no sharer left), what came back since it still tells the pool its children copy from.
            tr.uncertainty = 1.0 if span is None else tr.uncertainty
            if est is not None and tr.uss is not None and not tr.left and tr.fork_pages > 0:
                self._learn_pool(tr, uss - tr.uss - tr.drops - tr.beta * tr.own)
        if rss >= LEARN_COST_BYTES:  # the page walk dominates: a small process's cost is overhead
            measured = max(cost_s - READ_OVERHEAD_S, 0.0) / rss
            self.s_per_byte = min(
                max(0.7 * self.s_per_byte + 0.3 * measured, S_PER_BYTE_RANGE[0]), S_PER_BYTE_RANGE[1]
            )
        tr.uss, tr.rss_exact, tr.exact_t, tr.clean = uss, rss, t, clean
        tr.census0 = tr.census = None  # a census counts from this reading on: a new panel
        tr.back_at_exact = self._back(tr)
        tr.copies_at_exact = dict(zip(tr.live_kids, self._copies(tr), strict=True))
        if tr.kids and not tr.live_kids:
            tr.kids, tr.kids_gone, tr.fork_pages, tr.back_at_exact = [], set(), 0.0, 0.0  # all back
        tr.own = tr.drops = tr.shared = tr.unseen = 0.0
        tr.attempted, tr.event, tr.forced, tr.left = True, False, False, False
        tr.readings += 1
        return est

    def _calibrate(self, tr: Track, uss: float) -> None:
        """beta from the interval's own faults; what they do not explain gives a parent's pool
        (its forked children's copies) or else gamma (its sharers' faults); each kept as it was
        when the interval gave it too little to go on."""
        assert tr.uss is not None
        rise = uss - tr.uss - tr.drops  # what faults added, freed pages put back
        gained = tr.rss - tr.rss_exact - tr.drops
        if tr.alone and gained >= CALIBRATION_BYTES:  # pages others map too are not its own
            tr.rho = 0.5 * tr.rho + 0.5 * min(max(rise / gained, 0.0), 1.0)
        if tr.own >= CALIBRATION_BYTES:
            # Half the old value, half the interval's: a short interval is noisy (a worker just
            # forked once showed 7 MB of faults and no USS rise; replacing beta by 0 put its
            # estimate 86 % low ten seconds later).
            tr.beta = 0.5 * tr.beta + 0.5 * min(max(rise / tr.own, 0.0), 1.0)
        rest = rise - tr.beta * tr.own
        if tr.live_kids and tr.fork_pages > 0:
            self._learn_pool(tr, rest)
            return
        # Sharers explain only what its own faults leave unexplained, and only a real part of
        # it: a worker's few MB beyond its faults, spread over its siblings' hundreds of MB of
        # faults, would otherwise add tens of MB to its estimate later.
        if tr.shared >= CALIBRATION_BYTES and abs(rest) >= max(MOVED_BYTES, 0.25 * abs(rise)):
            tr.gamma = min(max(rest / tr.shared, 0.0), 1.0)

    def _learn_pool(self, tr: Track, rest: float) -> None:
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
        copies = self._copies(tr)
        then = self._then(tr)
        if len(copies) < 2 or tr.fork_pages <= 0:
            return
        top = max(copies)
        cap = max(tr.fork_pages, top)

        def gained(pool: float) -> float:
            return _came_back(pool, copies) - _came_back(pool, then)

        tells = gained(MiB) - gained(cap)  # the same pages against all of the fork's
        if tells < CALIBRATION_BYTES or tr.own > 0.25 * tells:
            return  # too little to tell, or the parent's own faults could (a rank's DataLoader start)
        level = tr.back_at_exact + rest
        first = not any(then)
        if tr.own_after_fork <= 0.25 * level or (tr.pool is not None and not first):
            tr.pool = _least(lambda pool: abs(_came_back(pool, copies) - level), MiB, cap)
        elif not first:
            tr.pool = _least(lambda pool: abs(gained(pool) - rest), top, cap)
        if tr.pool is not None:
            self.pool_share = tr.pool / tr.fork_pages


def _least(f: Callable[[float], float], low: float, high: float, steps: int = 32) -> float:
    """Where ``f`` is least on [low, high], on a log scale: a grid, then a finer one around its
    best point (a pool 3 % off puts a parent's return 10 % off at four workers)."""
    for _ in range(3):
        grid = [low * (high / low) ** (k / steps) for k in range(steps + 1)]
        best = min(range(steps + 1), key=lambda k: f(grid[k]))
        low, high = grid[max(best - 1, 0)], grid[min(best + 1, steps)]
    return min((low, high, math.sqrt(low * high)), key=f)


def _came_back(pool: float, copies: list[float]) -> float:
    """A parent's pages back when its children copied ``copies`` of a pool of ``pool`` bytes,
    each its own share, independently: a page is back once every child copied it. A pool is
    never less than what a child copied (the least pool: they copy the same pages)."""
    pool = max(pool, *copies, 1.0)
    return pool * math.prod(c / pool for c in copies)
