"""The planner's page census: who keeps one, when it is read, what it makes the estimate.

A census (:mod:`memprobe.probe.census` reads it) counts a process's exclusive pages on a fixed
sample of its mappings; the sampler asks :class:`CensusKeeping` (a part of
:class:`~memprobe.probe.estimator.planner.ExactPlanner`) which processes keep one
(:meth:`~CensusKeeping.wants_census`), whose is due, new or stale, and hands it each count
(:meth:`~CensusKeeping.census`); the planner's estimate of such a process is its count
(:meth:`~memprobe.probe.estimator.planner.ExactPlanner.estimate_of`). Numbers only.
"""

from __future__ import annotations

from memprobe.probe.estimator.state import Track
from memprobe.probe.estimator.tuning import (
    CENSUS_IDLE_S,
    CENSUS_MIN_BYTES,
    CENSUS_MOVED_BYTES,
    CENSUS_STALE_BYTES,
    CENSUS_STALE_SHARE,
)


class CensusKeeping:
    """The census part of the planner (its fields are the planner's: see ExactPlanner)."""

    tracks: dict[int, Track]
    hosts: set[int]
    files_moved: bool

    def estimate_of(self, tr: Track) -> float | None:
        raise NotImplementedError  # the planner's

    def wants_census(self, pid: int) -> bool:
        """A page census is kept by a parent of forked children from their fork on, and by a
        process that is no worker (main, a rank, a launcher: the sampler's ``hosts``) of 32 MB
        or more from its first exact reading: what comes back to a parent as its children copy
        its pages (the model of their copies left ranks 40-55 % low for 10 s while it did not
        know their pool yet), and a launcher's libraries, shared once its ranks map them (its
        estimate stayed 40 % high all run), are counted, not modelled. Workers' own faults
        count their pages (within 2 % of independent readings at 99 %)."""
        tr = self.tracks.get(pid)
        if tr is None or tr.reading.uss is None or tr.census.off:
            return False
        return tr.fork.parent or (
            pid in self.hosts and not tr.forked_child and tr.counters.rss >= CENSUS_MIN_BYTES
        )

    def census_new(self) -> list[int]:
        """Parents that just forked (their census was dropped there): a new panel, now."""
        return [
            pid
            for pid, tr in self.tracks.items()
            if tr.census.first is None and tr.fork.parent and self.wants_census(pid)
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
            if tr.census.first is not None
            and (
                (tr.fork.parent and tr.census.moved >= CENSUS_MOVED_BYTES)
                or (self.files_moved and tr.census.t < tr.counters.seen_t)
                or tr.counters.seen_t - tr.census.t >= CENSUS_IDLE_S
            )
        ]

    def census_stale(self) -> list[int]:
        """Processes whose census no longer covers what they map: their RSS gained (or lost)
        outside its population more than CENSUS_STALE_BYTES or a tenth of their USS (a main
        process building its dataset after its first reading). A new panel carries the
        estimate on."""
        out = []
        for pid, tr in self.tracks.items():
            if tr.census.first is not None and tr.census.last is not None:
                est = self.estimate_of(tr) or 0.0
                if abs(tr.outside()) >= max(CENSUS_STALE_BYTES, CENSUS_STALE_SHARE * est):
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
        if tr is None or (start is None and tr.census.first is None):
            return
        if start is not None:
            # Right after a reading, USS less the sample's count: its pages outside the sample
            # and the sample's own error of level, which may be negative (clamped at 0, the
            # estimate stood that error above the reading until the next one: torchrun's
            # launcher 5.5 MB, 3.8 %, for the rest of a run). A new panel of another sample
            # keeps only the pages outside (its own error is its own).
            rest = (tr.reading.uss or 0.0) - exclusive if start == "reading" else max(tr.census.rest, 0.0)
            tr.census.first, tr.census.rest, tr.census.rss0 = (exclusive, present), rest, tr.counters.rss
            tr.census.from_reading = start == "reading"
        tr.census.last, tr.census.t, tr.census.moved = (exclusive, present), tr.counters.seen_t, 0.0
        tr.census.error = error if tr.census.from_reading else level_error

    def drop_census(self, pid: int, *, unreadable: bool = False) -> None:
        """The census could not be read: the model's estimate again, from the last reading.
        ``unreadable``: its pagemap is not ours to read, never try again (else the process
        went, or exec'd: its panel was of an address space that is gone)."""
        tr = self.tracks.get(pid)
        if tr is not None:
            tr.census.first = tr.census.last = None
            tr.census.off |= unreadable
