"""The planner: where to spend exact readings, and the USS estimate between them.

:class:`ExactPlanner` is fed the cheap tier's numbers every tick (:meth:`~ExactPlanner.observe`),
chooses the processes to read exactly within a CPU allowance (:meth:`~ExactPlanner.choose`),
recalibrates each estimate on the reading that closes its interval (:meth:`~ExactPlanner.exact`)
and keeps the page census's counts (:meth:`~ExactPlanner.census`). The model it follows is the
package's doc (:mod:`memprobe.probe.estimator`); its constants are in
:mod:`~memprobe.probe.estimator.tuning`, a parent's pool in :mod:`~memprobe.probe.estimator.pool`,
a process's state in :mod:`~memprobe.probe.estimator.state`. Numbers only: no /proc code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from memprobe.core.system import PAGE_SIZE
from memprobe.probe.estimator import pool
from memprobe.probe.estimator.census_plan import CensusKeeping
from memprobe.probe.estimator.state import Calibration, Check, Counters, Interval, Reading, Track
from memprobe.probe.estimator.tuning import (
    CALIBRATION_BYTES,
    CALIBRATION_WEIGHT,
    COST_WEIGHT,
    DRIFT_BYTES,
    DRIFT_SHARE,
    FAULT_AROUND_BYTES,
    FELL_SHARE,
    FELL_WINDOW_S,
    FORKED_UNCERTAINTY,
    GAMMA_REST_SHARE,
    INITIAL_S_PER_BYTE,
    LEARN_COST_BYTES,
    MOVED_BYTES,
    PRIORITY_AGE_S,
    QUIET_BOOST,
    QUIET_OFF_SHARE,
    RATE_WEIGHT,
    READ_OVERHEAD_S,
    REL_TOLERANCE,
    S_PER_BYTE_RANGE,
    SHARED_WEIGHT,
    UNCERTAINTY_FLOOR,
    UNCERTAINTY_WEIGHT,
    MiB,
)


@dataclass
class ExactPlanner(CensusKeeping):
    """Tracks every process's movement, picks the exact readings of a tick, estimates USS."""

    tracks: dict[int, Track] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    s_per_byte: float = INITIAL_S_PER_BYTE
    # The latest pool learned, as a share of its parent's fork pages: the start of a parent that
    # has none (torchrun's ranks run the same script, each with its own DataLoader).
    pool_share: float | None = None
    # Forked children that deal out distinct items (DataLoader workers: each index goes to one
    # worker), as the sampler last classified them: see pool.pool_of.
    dealt: set[int] = field(default_factory=set)
    # Processes that are no worker of any kind (main, ranks, a launcher), as the sampler last
    # classified them: they keep a census (see wants_census).
    hosts: set[int] = field(default_factory=set)
    # The tree's file-backed pages grew this tick (another process may have mapped libraries a
    # process holds alone): every census is due (see census_due).
    files_moved: bool = False
    # What the latest choose() chose of the readings that cannot wait cost (predicted CPU seconds).
    urgent_s: float = 0.0

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
            process's file-backed RSS (bytes), where known.

        Long because it is one tick's update of every track, in the order the estimate needs it
        (the gone, the new, the forked, the families, the counters): split, each part would take
        the tick's maps again."""
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
        # Each new child's parent: the time since its last tick.
        spans = {parent: t - self.tracks[parent].counters.seen_t for _, parent in new_kids}
        moved_by_group: dict[int, float] = {}
        own_now: dict[int, float] = {}
        for pid, (minflt, rss) in counters.items():
            tr = self.tracks.get(pid)
            if tr is None:
                new = self.tracks[pid] = self._new_track(minflt, rss, pid in forked_from)
                new.reading.exact_t = new.counters.seen_t = t  # unread since it was first seen
                continue
            faults = float(max(0, minflt - tr.counters.minflt) * PAGE_SIZE)
            tr.census.moved += faults + abs(rss - tr.counters.rss)
            tr.counters.seen_t = t
            tr.since.own += faults
            tr.fork.own_after += faults
            if tr.forked_child and not tr.reading.readings and files is not None and pid in files:
                # Never read: a fall of its file-backed RSS (its parent's file pages unmapped, or
                # reclaimed) frees no page of its own. 300 children that each lost 136 KB of RSS
                # at once took 40 MB off a total of 246.
                tr.since.drops += min(0.0, (rss - files[pid]) - (tr.counters.rss - tr.counters.file_rss))
            else:
                tr.since.drops += min(0, rss - tr.counters.rss)
            tr.counters.minflt, tr.counters.rss = minflt, rss
            own_now[pid] = faults
            tr.counters.last_move = faults
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
            self.forked(tr, pid, t, after * own_now.get(parent, 0.0))
        for pid, faults in own_now.items():
            tr = self.tracks[pid]
            by_sharers = moved_by_group.get(groups.get(pid, pid), 0.0) - faults
            tr.since.shared += by_sharers
            tr.census.moved += by_sharers
            tr.counters.last_move += SHARED_WEIGHT * by_sharers
            tr.counters.rate = (1 - RATE_WEIGHT) * tr.counters.rate + RATE_WEIGHT * tr.counters.last_move
        for pid, file_rss in (files or {}).items():
            if pid in self.tracks:
                self.tracks[pid].counters.file_rss = file_rss
        for tr in self.tracks.values():
            tr.alone = len(counters) == 1 and not tr.fork.kids
        for tr in self.tracks.values():
            if tr.fork.kids and tr.fork.pool is None:
                pool.until_pool_known(self, tr)

    @staticmethod
    def _new_track(minflt: int, rss: int, forked: bool) -> Track:
        """A forked child is known exactly at its fork: USS 0 (it shares every page) and minflt
        0 (the kernel starts the child's count there); its estimate runs from that baseline
        until its first reading. Any other process has no estimate before its first reading."""
        if forked:
            # Exact baseline, and a forked child's faults are copies or new pages (beta 1): less
            # unsure than a process never read, so its parent, whose USS the fork upset, goes first.
            return Track(
                Counters(minflt, rss),
                since=Interval(own=minflt * PAGE_SIZE),
                reading=Reading(uss=0.0),
                calib=Calibration(uncertainty=FORKED_UNCERTAINTY),
                forked_child=True,
            )
        return Track(Counters(minflt, rss), reading=Reading(rss_exact=rss))

    def forked(self, tr: Track, child: int, t: float, after: float = 0.0) -> None:
        """At fork, the parent's private anonymous pages became shared with the child: its USS
        fell to about the private file pages it held (the child maps those lazily); ``after``:
        the bytes of its faults counted since that came after the fork. Children forked while
        others of the same family live share the same pages. A parent read after its fork but
        before its children were seen (they fork between a tick's children lists and its
        readings: main of the os.fork tree, read at 1.1 MB where it held 671) shared what it
        held before that reading; taken from its reading, its fork shared 1 MB and its
        children's copies and exits gave it nothing back for the rest of the run."""
        if tr.live_kids:  # a sibling of live (or just seen) children
            tr.fork.kids.append(child)
            tr.census.moved = math.inf  # it shares the parent's pages now: its census sees that
            return
        # What its counters say it held: a census read between the fork and this tick (children
        # are seen a tick late) already counts the pages shared, and main of the os.fork tree,
        # taken to have shared 0.4 MB, got nothing back from its workers' copies.
        before = self.modelled(tr)
        if before is None:
            return
        if (
            tr.reading.fell is not None
            and tr.reading.exact_t == tr.reading.fell[0]
            and t - tr.reading.fell[0] <= FELL_WINDOW_S
        ):
            before = max(before, tr.reading.fell[1] + tr.calib.beta * tr.since.own + tr.since.drops)
        tr.fork.pages = max(before - tr.calib.beta * after - tr.reading.clean, 0.0)
        tr.fork.kids, tr.fork.kids_gone, tr.fork.copies_at_exact = [child], set(), {}
        tr.fork.back_at_exact, tr.fork.own_after, tr.fork.parent = 0.0, after, True
        tr.since.unseen += tr.fork.pages
        tr.reading.uss = tr.reading.clean
        tr.since.own, tr.since.drops, tr.since.shared = after, 0.0, 0.0
        tr.since.event = tr.reading.forced = True
        # A new panel at the fork counts what the parent kept at its level (the reading asked
        # for sets it exactly). Carried through the fork, a census's change of -400 MB was
        # ~2.5 % off: 12 MB where a rank held 37.
        tr.census.first = tr.census.last = None

    def _gone(self, pid: int, groups: dict[int, int]) -> None:
        """Pages it shared may now be its sharers' alone: they have moved."""
        tr = self.tracks.pop(pid)
        family = groups.get(pid, pid)
        for other, ot in self.tracks.items():
            if groups.get(other, other) == family:
                ot.since.unseen += tr.counters.rss
                ot.since.event = ot.since.left = True
                ot.census.moved = math.inf
            if pid in ot.fork.kids:
                ot.fork.kids_gone.add(pid)
                ot.reading.forced |= ot.census.first is None  # a census sees what came back

    def _exec(self, pid: int, groups: dict[int, int]) -> None:
        """A forked child that exec'd (torchrun's ranks are seen between their fork and their
        exec): a new program, its pages its own, no longer its parent's. It is a new process
        for the planner (read at once, whatever the budget: with a census, a rank's first
        reading otherwise came after its workers had started, and what it built before them
        was not known), and to its parent, gone."""
        tr = self.tracks[pid]
        self._gone(pid, groups)
        self.tracks[pid] = self._new_track(tr.counters.minflt, tr.counters.rss, False)
        self.tracks[pid].reading.exact_t = self.tracks[pid].counters.seen_t = tr.counters.seen_t

    def want(self, pid: int) -> None:
        """Ask for a reading of ``pid`` as soon as the budget allows (see ``Reading.forced``)."""
        if pid in self.tracks:
            self.tracks[pid].reading.forced = True

    def estimate(self, pid: int) -> float | None:
        """USS (bytes) now, from the last exact reading and the counters since; ``None`` before
        the first exact reading."""
        tr = self.tracks.get(pid)
        return None if tr is None else self.estimate_of(tr)

    def estimate_of(self, tr: Track) -> float | None:
        if tr.reading.uss is not None and tr.census.first is not None and tr.census.last is not None:
            est = tr.census.last[0] + tr.census.rest + tr.outside()
            return min(max(est, 0.0), float(tr.counters.rss))
        return self.modelled(tr)

    def modelled(self, tr: Track) -> float | None:
        """The estimate from its counters (the model), census or not."""
        if tr.reading.uss is None:
            return None
        if tr.fork.kids and tr.fork.pages > 0:  # a parent: its children's copies give it pages back
            by_sharers = pool.back(self, tr) - pool.back_then(self, tr)
        else:
            by_sharers = tr.calib.gamma * tr.since.shared
        own = tr.calib.beta * tr.since.own
        if tr.forked_child and not tr.reading.readings:
            # Never read: its faults since its fork, less those that mapped its parent's file
            # pages back (each maps up to FAULT_AROUND_BYTES of them; see FAULT_AROUND_BYTES).
            own = tr.calib.beta * max(
                tr.since.own - tr.counters.file_rss * PAGE_SIZE / FAULT_AROUND_BYTES, 0.0
            )
        if tr.alone:
            # Alone in its tree, the pages its RSS gained are its own, whatever its faults count:
            # the launcher importing torch maps file pages 16 a fault (fault-around), so its
            # faults counted half of its USS rise (32-51 % low), its RSS rise 92-110 % of it.
            # Not so for a process that maps libraries another of the tree mapped before (the
            # ranks importing torch after the launcher: their RSS rise put them 14-63 % high).
            own = max(own, tr.calib.rho * (tr.counters.rss - tr.reading.rss_exact - tr.since.drops))
        est = tr.reading.uss + own + by_sharers + tr.since.drops
        return min(max(est, 0.0), float(tr.counters.rss))

    # -- choosing ------------------------------------------------------------------------
    def predicted_cost(self, pid: int) -> float:
        return READ_OVERHEAD_S + self.s_per_byte * self.tracks[pid].counters.rss

    def needs_reading(self, pid: int) -> bool:
        tr = self.tracks[pid]
        if tr.reading.uss is None and not tr.reading.attempted:
            return True
        if tr.reading.uss is None:
            return False  # unreadable (another user's process): tried once
        if not tr.reading.attempted:
            return True  # a forked child never read: the estimate from its baseline is unchecked
        if self.drifted(pid):
            return True  # moved far from what the analysis last saw (see DRIFT_SHARE)
        return tr.expected_error() >= max(MOVED_BYTES, REL_TOLERANCE * (self.estimate(pid) or 0.0))

    def drifted(self, pid: int) -> bool:
        """Its estimate moved a quarter (:data:`DRIFT_SHARE`, :data:`DRIFT_BYTES` at least) from
        its last exact reading: the analysis, which judges exact readings, has not seen it."""
        tr = self.tracks[pid]
        if tr.reading.uss is None or not tr.reading.attempted:
            return False
        return abs((self.estimate(pid) or 0.0) - tr.reading.uss) >= max(
            DRIFT_BYTES, DRIFT_SHARE * tr.reading.uss
        )

    def priority(self, pid: int, t: float) -> float:
        """The estimate's expected error (MB), times how long it has gone unread: most-moved
        first, and a process that always moves most (a parent whose workers all copy its
        pages) does not take every reading from those that move less. Relative to the USS, a
        parent whose USS a fork brought near 0 would win every time."""
        tr = self.tracks[pid]
        age = t - tr.reading.exact_t if tr.reading.exact_t is not None else 0.0
        boost = QUIET_BOOST if tr.went_quiet() else 1.0
        return tr.expected_error() / MiB * (PRIORITY_AGE_S + age) * boost

    def choose(
        self, tick: float, allowance_s: float, *, everyone: bool = False, reserve_s: float = 0.0
    ) -> list[int]:
        """The processes to read exactly this tick, while the predicted cost fits ``allowance_s``
        (CPU seconds the budget has left); ``everyone``: all of them, whatever the cost.

        1. each process never tried and not forked (first seen), whatever the cost;
        2. the readings that cannot wait, which may also spend ``reserve_s`` (their cost, predicted,
           in :attr:`urgent_s`: the caller keeps their account): those asked for
           (:meth:`want`, a parent at a change of its tree), then those that went quiet 10 % off
           or more (:meth:`quiet_and_off`), then each forked child never read, oldest first, then
           those whose estimate moved a quarter from their last reading (:meth:`drifted`), least
           recently read first. A forked child's start is exact (USS 0 at its fork), so one
           reading measures its growth; it is not forced at first sight, whatever the cost (a 1 %
           budget once gave each DataLoader worker a single reading, at its birth), but it comes
           first once the budget allows. A drifted one is what the analysis has not seen: where
           ticks cost the whole budget (a VM whose first steps after a sleep took 1-9 ms), a main
           process growing 10 MB/s was read once in 30 s, and had no verdict;
        3. the moved ones by priority; the first that does not fit ends the list, so a big
           process is not passed over for ever by smaller ones."""
        if everyone:
            return list(self.tracks)
        chosen = [
            pid for pid, tr in self.tracks.items() if not tr.reading.attempted and tr.reading.uss is None
        ]
        left = allowance_s - sum(self.predicted_cost(p) for p in chosen)
        off = {pid for pid in self.tracks if pid not in chosen and self.quiet_and_off(pid)}
        drifted = {pid for pid in self.tracks if pid not in chosen and pid not in off and self.drifted(pid)}
        urgent = [
            pid
            for pid, tr in self.tracks.items()
            if pid not in chosen
            and tr.reading.uss is not None
            and (tr.reading.forced or not tr.reading.attempted or pid in off or pid in drifted)
        ]
        urgent.sort(
            key=lambda p: (
                not self.tracks[p].reading.forced,
                p not in off,
                p in drifted,
                self.tracks[p].reading.exact_t or 0.0,
            )
        )
        self.urgent_s = 0.0
        for pid in urgent:
            cost = self.predicted_cost(pid)
            if cost > left + reserve_s:
                break
            chosen.append(pid)
            self.urgent_s += cost
            left -= cost
        if left < READ_OVERHEAD_S:  # no reading fits (each costs at least that): skip ranking them
            return chosen  # (ranking a wide tree out of budget: 5-8 % of a tick profiled)
        moved = [pid for pid, tr in self.tracks.items() if pid not in chosen and self.needs_reading(pid)]
        for pid in sorted(moved, key=lambda p: self.priority(p, tick), reverse=True):
            cost = self.predicted_cost(pid)
            if cost > left:
                break
            chosen.append(pid)
            left -= cost
        return chosen

    def quiet_and_off(self, pid: int) -> bool:
        """It went quiet after moving, and its estimate may be 10 % off or more: the reading that
        lasts, and one the target needs. A torchrun launcher whose file pages its ranks' torch
        import shared went quiet 14 MB (9.5 %) under its USS; among the moved, it lost every
        reading to the forked workers never read (urgent) and to a rank first by priority that
        did not fit, and stayed there for the rest of the run, in six runs of six."""
        tr = self.tracks[pid]
        if tr.reading.uss is None or not tr.reading.attempted or tr.reading.forced or not tr.went_quiet():
            return False
        if -tr.since.drops > tr.since.own + SHARED_WEIGHT * tr.since.shared:
            # It fell more than it rose: a process freeing its data as it ends. A reading then
            # is of its teardown, not of what it grew to (spawned workers read while they freed
            # their copy at exit had "start-up 97 MB" of 139, and growth -80 MB).
            return False
        return tr.expected_error() >= max(MOVED_BYTES, QUIET_OFF_SHARE * (self.estimate(pid) or 0.0))

    # -- an exact reading ----------------------------------------------------------------
    def tried(self, pid: int) -> None:
        """An exact reading was tried and failed (unreadable): do not force it again."""
        if pid in self.tracks:
            self.tracks[pid].reading.attempted = True
            self.tracks[pid].reading.forced = False

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
        modelled = self.modelled(tr)  # a census would already have seen the fork
        fell = (
            modelled is not None
            and not parent
            and modelled - uss >= max(CALIBRATION_BYTES, FELL_SHARE * modelled)
        )
        tr.reading.fell = (t, modelled) if fell and modelled is not None else None
        tr.since.event |= fell  # not a change its counters could see: nothing to learn from
        if est is not None:
            self.checks.append(Check(t, pid, est, uss, tr.since.event))
        span = tr.census_span()
        # How wrong the estimate was, per byte of the movement it followed. A census sees forks
        # and exits, so its miss counts in an interval with an event too.
        if est is not None and (span is not None or not tr.since.event):
            miss = abs(est - uss) / max(tr.moved() if span is None else span, MiB)
            tr.calib.uncertainty = min(
                max(
                    (1 - UNCERTAINTY_WEIGHT) * tr.calib.uncertainty + UNCERTAINTY_WEIGHT * miss,
                    UNCERTAINTY_FLOOR,
                ),
                1.0,
            )
        if est is not None and not tr.since.event:
            self._calibrate(tr, uss)
        elif tr.since.event:
            # A new structure (it forked, a sharer left): what the estimate learned before
            # does not hold any more; it earns trust again at the next readings. After a fork
            # (no sharer left), what came back since it still tells the pool its children copy from.
            tr.calib.uncertainty = 1.0 if span is None else tr.calib.uncertainty
            if est is not None and tr.reading.uss is not None and not tr.since.left and tr.fork.pages > 0:
                pool.learn_pool(
                    self, tr, uss - tr.reading.uss - tr.since.drops - tr.calib.beta * tr.since.own
                )
        if rss >= LEARN_COST_BYTES:  # the page walk dominates: a small process's cost is overhead
            measured = max(cost_s - READ_OVERHEAD_S, 0.0) / rss
            self.s_per_byte = min(
                max((1 - COST_WEIGHT) * self.s_per_byte + COST_WEIGHT * measured, S_PER_BYTE_RANGE[0]),
                S_PER_BYTE_RANGE[1],
            )
        tr.reading.uss, tr.reading.rss_exact, tr.reading.exact_t, tr.reading.clean = uss, rss, t, clean
        tr.census.first = tr.census.last = None  # a census counts from this reading on: a new panel
        tr.fork.back_at_exact = pool.back(self, tr)
        tr.fork.copies_at_exact = dict(zip(tr.live_kids, pool.child_copies(self, tr), strict=True))
        if tr.fork.kids and not tr.live_kids:  # every child exited: all their pages are back
            tr.fork.kids, tr.fork.kids_gone = [], set()
            tr.fork.pages = tr.fork.back_at_exact = 0.0
        tr.since = Interval()  # a new interval: nothing moved, no event
        tr.reading.attempted, tr.reading.forced = True, False
        tr.reading.readings += 1
        return est

    def _calibrate(self, tr: Track, uss: float) -> None:
        """beta from the interval's own faults; what they do not explain gives a parent's pool
        (its forked children's copies) or else gamma (its sharers' faults); each kept as it was
        when the interval gave it too little to go on."""
        assert tr.reading.uss is not None
        rise = uss - tr.reading.uss - tr.since.drops  # what faults added, freed pages put back
        gained = tr.counters.rss - tr.reading.rss_exact - tr.since.drops
        if tr.alone and gained >= CALIBRATION_BYTES:  # pages others map too are not its own
            tr.calib.rho = (1 - CALIBRATION_WEIGHT) * tr.calib.rho + CALIBRATION_WEIGHT * min(
                max(rise / gained, 0.0), 1.0
            )
        if tr.since.own >= CALIBRATION_BYTES:
            # Half the old value, half the interval's: a short interval is noisy (a worker just
            # forked once showed 7 MB of faults and no USS rise; replacing beta by 0 put its
            # estimate 86 % low ten seconds later).
            tr.calib.beta = (1 - CALIBRATION_WEIGHT) * tr.calib.beta + CALIBRATION_WEIGHT * min(
                max(rise / tr.since.own, 0.0), 1.0
            )
        rest = rise - tr.calib.beta * tr.since.own
        if tr.live_kids and tr.fork.pages > 0:
            pool.learn_pool(self, tr, rest)
            return
        # Sharers explain only what its own faults leave unexplained, and only a real part of
        # it: a worker's few MB beyond its faults, spread over its siblings' hundreds of MB of
        # faults, would otherwise add tens of MB to its estimate later.
        if tr.since.shared >= CALIBRATION_BYTES and abs(rest) >= max(
            MOVED_BYTES, GAMMA_REST_SHARE * abs(rise)
        ):
            tr.calib.gamma = min(max(rest / tr.since.shared, 0.0), 1.0)
