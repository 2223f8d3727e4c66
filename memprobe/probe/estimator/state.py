"""What the estimator knows of one process, in the parts a reader looks at apart.

A :class:`Track` is one process: its latest :class:`Counters` (the cheap tier), its
:class:`Interval` (what moved since its last exact reading), its last :class:`Reading` (and
whether one is wanted), its :class:`Calibration` (what the readings taught its estimate), its
:class:`ForkPool` (a parent's pages shared with its forked children) and its
:class:`CensusState` (a page census's counts). Numbers only: no /proc code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memprobe.probe.estimator.tuning import (
    CENSUS_ERROR_SPANS,
    CHECK_FLOOR_BYTES,
    QUIET_AFTER_BYTES,
    QUIET_RATE_SHARE,
    SHARED_WEIGHT,
)


@dataclass
class Counters:
    """Its cheap-tier counters at the latest tick."""

    minflt: int
    rss: int
    seen_t: float = 0.0  # its latest tick
    rate: float = 0.0  # bytes moved per tick (own + sharers' faults), smoothed
    last_move: float = 0.0  # bytes moved at the latest tick
    file_rss: float = 0.0  # its file-backed RSS at the latest tick (bytes), where the sampler gave it


@dataclass
class Interval:
    """Its movement since its last exact reading (bytes)."""

    own: float = 0.0  # its own minor faults x page size
    drops: float = 0.0  # sum of its RSS falls (<= 0): freed pages
    shared: float = 0.0  # its sharers' faults x page size
    # Bytes the counters cannot see: the RSS of a sharer that exited (pages it shared may now be
    # ours alone), the USS a fork made shared. The interval holds a change of structure: its
    # estimate is not used to calibrate, and its check is marked.
    unseen: float = 0.0
    event: bool = False
    left: bool = False  # a sharer exited since its last reading (an event the counters cannot see)


@dataclass
class Reading:
    """Its last exact reading, and whether the next one is wanted."""

    uss: float | None = None  # at the last exact reading
    rss_exact: int = 0
    exact_t: float | None = None
    clean: float = 0.0  # Private_Clean at the last exact reading: file pages a fork leaves private
    attempted: bool = False  # an exact reading was tried (smaps_rollup may be unreadable)
    readings: int = 0
    # A reading that cannot wait: a parent at a change of its tree (its children appeared or
    # exited: what its estimate learned no longer holds), a spawned worker at the end of its
    # start-up (where its window begins).
    forced: bool = False
    # (t, USS before) of a reading that found most of its USS gone, its RSS held, and no child:
    # it forked between the tick's children lists and its reading (see ExactPlanner.forked).
    fell: tuple[float, float] | None = None


@dataclass
class Calibration:
    """What its exact readings taught the estimate from its counters."""

    beta: float = 1.0  # USS bytes per own fault byte: copy-on-write and new pages are all private
    gamma: float = 0.0  # USS bytes per sharer fault byte: learned, none until seen
    rho: float = 1.0  # USS bytes per byte its RSS gained while alone: learned as beta is
    # How wrong the estimate was at past readings, per byte moved (1: no idea yet).
    uncertainty: float = 1.0


@dataclass
class ForkPool:
    """A parent's pages shared with its forked children at their fork (see the package doc)."""

    # A page comes back to the parent alone once every child has copied it (or exited).
    pages: float = 0.0
    kids: list[int] = field(default_factory=list)
    kids_gone: set[int] = field(default_factory=set)
    # The pages its children copy from (bytes; see the package doc), learned at its readings and
    # kept for its next generation of children: each epoch's DataLoader workers read the same
    # dataset the same way. On a shuffled DataLoader over a list of dicts (rank of 434 MB anon,
    # 4 workers copying ~153 MB each) it held at 157-166 MB from when they had copied 60 % to the
    # end of the epoch, and at 158 MB in the next, where (product of copied shares of S) ** alpha
    # needed alpha from 0.75 to 0.38 within the epoch.
    pool: float | None = None
    copies_at_exact: dict[int, float] = field(default_factory=dict)  # each child's, at the last reading
    own_after: float = 0.0  # its own faults since its children forked (bytes): see pool.learn_pool
    back_at_exact: float = 0.0  # the bytes back at the last exact reading (or the fork)
    parent: bool = False  # it has forked children, or had: see wants_census

    @property
    def live_kids(self) -> list[int]:
        """Its children from its last fork that have not exited, in fork order."""
        return [k for k in self.kids if k not in self.kids_gone]


@dataclass
class CensusState:
    """Its page census (see ExactPlanner.census): (exclusive, present) bytes of the sampled
    mappings at the panel's start, with its RSS then, and at the latest census."""

    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    # USS - exclusive at its panel's start: its private pages outside the population (file
    # pages, its stack), and, for a panel started at a reading, the sample's error of level
    rest: float = 0.0
    rss0: int = 0
    error: float = 0.0  # one standard error of the census's estimate (bytes)
    from_reading: bool = False  # its panel started right after an exact reading
    moved: float = 0.0  # what its family moved since its census was read (bytes)
    off: bool = False  # its pagemap could not be read: no census
    t: float = 0.0  # when its census was last read


@dataclass
class Track:
    """One process: its counters, and its movement since its last exact reading (bytes)."""

    counters: Counters
    since: Interval = field(default_factory=Interval)
    reading: Reading = field(default_factory=Reading)
    calib: Calibration = field(default_factory=Calibration)
    fork: ForkPool = field(default_factory=ForkPool)
    census: CensusState = field(default_factory=CensusState)
    forked_child: bool = False
    # The only live process of the tree: the file pages it maps are its own as long as no other
    # process maps them (see ExactPlanner.modelled).
    alone: bool = False

    def went_quiet(self) -> bool:
        """It moved a lot since its last reading and has just stopped: its USS has reached the
        value it will hold (a worker that finished its share, waiting for its end), so a
        reading now is the one that lasts. Moved by its counters, or by its census: a torchrun
        launcher whose file pages its ranks' torch import shared (39 MB by its census) moves no
        counter of its own; never boosted, it lost every reading to the ranks and stood 9.5 %
        under its USS for the rest of the run (three runs of three)."""
        moved = max(self.moved(), self.census_span() or 0.0)
        return moved >= QUIET_AFTER_BYTES and self.counters.last_move <= QUIET_RATE_SHARE * self.counters.rate

    def moved(self) -> float:
        """Bytes that may have changed its USS since its last exact reading."""
        return self.since.own - self.since.drops + SHARED_WEIGHT * self.since.shared

    def expected_error(self) -> float:
        """What the estimate may be off by now: the movement it calibrates times how wrong it
        was so far, plus what it cannot see (sharers that exited) in full. A census sees those."""
        span = self.census_span()
        if span is not None:  # how wrong it was at past readings, and its sample's own error
            return self.calib.uncertainty * span + CENSUS_ERROR_SPANS * self.census.error
        return self.calib.uncertainty * self.moved() + self.since.unseen

    def census_span(self) -> float | None:
        """How much the census-based estimate moved from the last exact reading (bytes), or
        ``None`` without a census."""
        if self.census.first is None or self.census.last is None:
            return None
        return abs(self.census.last[0] - self.census.first[0]) + abs(self.outside())

    def outside(self) -> float:
        """Bytes its RSS gained outside the census's population since its last exact reading
        (new mappings, file pages): what its RSS gained less what the population's present
        pages did."""
        assert self.census.first is not None and self.census.last is not None
        return (self.counters.rss - self.census.rss0) - (self.census.last[1] - self.census.first[1])

    @property
    def live_kids(self) -> list[int]:
        """Its children from its last fork that have not exited, in fork order."""
        return self.fork.live_kids


@dataclass
class Check:
    """An estimate set against the exact reading taken at the same tick."""

    t: float
    pid: int
    estimate: float
    exact: float

    event: bool = False  # the interval held a fork or a sharer's exit (see Interval.event)

    @property
    def error_pct(self) -> float:
        return 100.0 * abs(self.estimate - self.exact) / max(self.exact, CHECK_FLOOR_BYTES)
