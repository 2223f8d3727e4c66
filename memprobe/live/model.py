"""The live view's model (``memprobe top``): what the tree sampler has seen so far, as one row per
live process and the job's totals, the verdict so far in words and the time to the memory limit.

It is fed the sampler's own rows as they are written (:meth:`LiveModel.feed`, from the sampler's
thread: the ``samples`` and ``system`` tables of :mod:`memprobe.probe.tree_sampler`) and asked for
a :class:`LiveView` about once a second (:meth:`LiveModel.view`, from memprobe's main thread); it
reads nothing from /proc itself: no second sampler, and its cost is a few dictionary updates a row.

The figures, each by the rule the analysis and the report use afterwards:

* USS: the exact reading where the process's latest row is one (``exact``), else the sampler's
  estimate (``uss_est_mb``), else its last exact reading.
* PSS: the process's last exact reading, carried to now as :func:`memprobe.core.series.held_readings`
  carries it: a worker plus the USS it gained since by its estimate, any other process plus the
  anonymous memory it allocated since and less what it freed (its RSS fell). Total PSS is their
  sum; a live process never read exactly yet is counted apart (``unread``), never as zero.
* Own growth rate (MB/min, a least-squares line over its last ``RATE_WINDOW_S``, 30 s): a worker's USS,
  any other process's anonymous RSS (a parent's own growth, as
  :mod:`memprobe.analysis.growth` measures it: its workers' copies leave that counter alone),
  a parent's from its first worker on (:mod:`memprobe.analysis.windows`' rule: what it built
  before, its dataset, is not growth).
* The verdict so far: the live workers' USS gained since their start (a forked worker's whole
  USS, as it starts with no page of its own; a spawned or exec'd worker's start-up, by :func:`memprobe.core.tree_rules.settled_at`, not counted), on average,
  against the verdict's threshold, as the record analysis judges a whole job.
* The time to the limit: :func:`memprobe.analysis.forecast.forecast`, the summary's rule, on what
  the view has seen so far: total PSS at each tick (where every live process has been read), the
  generations of workers (each worker's generation from the sampler, its first and last sight),
  the parents' anonymous RSS summed at each tick from the first worker on, the cgroup's charge
  less its file cache (each generation's peak of it where the cgroup's other processes,
  in the system rows, hold the job alone), and MemAvailable; worded by
  :func:`memprobe.core.forecast_words.words`.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from memprobe.analysis import forecast
from memprobe.analysis.limit import MACHINE
from memprobe.core import forecast_words
from memprobe.core.tree_rules import STARTUP_MAX_S, settled_at
from memprobe.core.units import mb
from memprobe.core.vocabulary import PARENT_KINDS, WORKER_KINDS

# A process's own growth rate is its line over this long, at most: the current rate (over a
# minute, a forked worker's first copies, +70 MB in its first second, still made it +94 MB/min
# 25 s later, when it grew 17 MB/min)
RATE_WINDOW_S = 30.0
RATE_MIN_SPAN_S = 3.0  # ... and over this long at least (a younger process has no rate yet)
POINT_SPACING_S = 1.0  # a rate point per process this often at most
SERIES_POINTS = 4096  # each series kept for the time to the limit: thinned by half past this
SLOW_MB_PER_MIN = 1.0  # a rate below this is not named as a grower
# The time to the limit is made again this often at most, or when a generation of workers ended
# (its series as pandas and the line through them: 2-3 ms, where the rest of a view takes 0.5).
FORECAST_EVERY_S = 5.0


@dataclass
class LiveRow:
    """One live process as the view shows it."""

    pid: int
    role: str
    kind: str | None
    rank: int
    worker: int
    generation: int | None
    uss_mb: float | None
    exact: bool  # the USS shown is this tick's exact reading (else an estimate, or held)
    pss_mb: float | None  # None: never read exactly yet
    rss_mb: float
    rate_mb_min: float | None  # own growth rate; None: seen too short a time
    grown_mb: float | None  # a worker's USS gained since its start (after its start-up)
    command: str = ""


@dataclass
class LiveTotals:
    processes: int
    total_pss_mb: float | None  # None: no process read exactly yet
    unread: int  # live processes never read exactly, not in total_pss_mb
    sum_rss_mb: float
    cgroup_mb: float | None
    oom_kills: int | None  # since the view started
    limit_mb: float | None
    limit_words: str  # what the limit is ("the job's memory limit (cgroup v1 /x)")


@dataclass
class LiveView:
    t: float  # seconds since the recording started
    rows: list[LiveRow]
    totals: LiveTotals
    verdict: str  # the verdict so far, in words
    limit: str  # the time to the limit (record/forecast.py's rule on what was seen so far), in words
    ended: int = 0  # processes of the tree seen and since ended


@dataclass
class _Track:
    """What the model keeps of one process."""

    role: str = ""
    kind: str | None = None
    rank: int = -1
    rss: float = 0.0
    anon: float | None = None
    uss_est: float | None = None
    exact_now: bool = False
    read: tuple[float, float, float, float, float | None] | None = None  # t, PSS, USS, RSS, anon
    points: deque = field(default_factory=lambda: deque(maxlen=int(2 * RATE_WINDOW_S / POINT_SPACING_S)))
    startup: list[tuple[float, float, float, float | None]] = field(default_factory=list)  # t, RSS, CPU, USS
    first_t: float = 0.0
    base: float | None = None  # a worker's USS at the end of its start-up, once known

    def uss(self) -> float | None:
        if self.exact_now and self.read is not None:
            return self.read[2]
        return self.uss_est if self.uss_est is not None else (self.read[2] if self.read else None)

    def is_worker(self) -> bool:
        return self.kind in WORKER_KINDS

    def held_pss(self) -> float | None:
        """The last exact PSS carried to now (see the module doc)."""
        if self.read is None:
            return None
        _, pss, uss, rss, anon = self.read
        if self.exact_now:
            return pss
        if self.is_worker():
            return pss + (self.uss_est - uss if self.uss_est is not None else 0.0)
        built = max(0.0, self.anon - anon) if self.anon is not None and anon is not None else 0.0
        return pss + built - max(0.0, rss - self.rss)


class LiveModel:
    """Rows and totals from what the sampler has seen so far (see the module doc)."""

    def __init__(self, threshold_mb: float, limit_mb: float | None, limit_words: str) -> None:
        self.threshold_mb = threshold_mb
        self.limit_mb, self.limit_words = limit_mb, limit_words
        self._lock = threading.Lock()
        self._tracks: dict[int, _Track] = {}
        self._ended: set[int] = set()
        self._t = 0.0
        self._charge: list[tuple[float, float]] = []
        self._kept: list[tuple[float, float]] = []  # the charge less its file cache
        self._available: list[tuple[float, float]] = []
        self._totals: list[tuple[float, float]] = []
        self._parents: list[tuple[float, float]] = []  # the parents' anonymous RSS summed
        self._generation: dict[int, tuple[int, float]] = {}  # a worker's generation and first sight
        self._unnamed: dict[int, float] = {}  # workers seen whose generation is not asked yet: first sight
        # The pages a worker shares, its share of them (PSS less USS) at the latest exact reading of
        # a worker, else of a parent: what a worker not read exactly yet holds besides its own.
        self._shares: dict[bool, float] = {}
        self._worker_end: dict[int, float] = {}
        self._others_mb: float | None = None  # the cgroup's other processes' RSS at their most
        self._ahead: tuple[float, int, forecast.Forecast] | None = None  # made at, workers ended then, it
        self._kills: tuple[int | None, int | None] = (None, None)  # first, latest

    def entered(self, limit_mb: float | None, words: str, since: float, kills_then: int | None) -> None:
        """The job's memory cgroup and its limit, entered ``since`` s after the start (0: from
        the start) with ``kills_then`` OOM kills: the charge read before was another cgroup's."""
        with self._lock:
            self.limit_mb, self.limit_words = limit_mb, words
            self._charge = [(t, v) for t, v in self._charge if t >= since]
            self._kept = [(t, v) for t, v in self._kept if t >= since]
            self._others_mb = None  # another cgroup: who else is in it is read again
            self._ahead = None
            self._kills = (kills_then, kills_then)  # the next reading's, from then on

    # -- fed from the sampler's thread ---------------------------------------------------------
    def feed(self, table: str, rows: list[dict]) -> None:
        with self._lock:
            if table == "samples":
                for r in rows:
                    self._row(r)
                if rows:
                    self._tick()
            elif table == "system":
                for r in rows:
                    self._system(r)

    def _row(self, r: dict) -> None:
        pid, t = int(r["pid"]), float(r["t"])
        self._t = max(self._t, t)
        if r.get("missing"):
            if self._tracks.pop(pid, None) is not None:
                self._ended.add(pid)
                self._worker_end.setdefault(pid, t)
            return
        tr = self._tracks.get(pid)
        if tr is None:
            tr = self._tracks[pid] = _Track(first_t=t)
        tr.role = str(r.get("role") or tr.role)
        tr.kind = r.get("kind", tr.kind)
        tr.rank = int(r.get("rank", tr.rank))
        tr.rss = float(r.get("rss_mb") or 0.0)
        tr.anon = r.get("rss_anon_mb", tr.anon)
        tr.exact_now = r.get("tier") == "pss" and r.get("pss_mb") is not None
        if tr.exact_now:
            tr.read = (t, float(r["pss_mb"]), float(r["uss_mb"]), tr.rss, tr.anon)
            tr.uss_est = None
            if tr.is_worker() or tr.kind in PARENT_KINDS:
                self._shares[tr.is_worker()] = tr.read[1] - tr.read[2]
        else:
            tr.uss_est = r.get("uss_est_mb")
        if tr.is_worker() and pid not in self._generation:
            self._unnamed.setdefault(pid, tr.first_t)
        elif not tr.is_worker():
            # A program its parent runs beside its workers (wandb-core) was a worker until they
            # appeared: it starts no generation.
            self._generation.pop(pid, None)
            self._unnamed.pop(pid, None)
        if tr.is_worker() and t - tr.first_t <= STARTUP_MAX_S + POINT_SPACING_S:
            tr.startup.append((t, tr.rss, float(r.get("cpu_s") or 0.0), tr.uss()))
        value = tr.uss() if tr.is_worker() else tr.anon
        if value is not None and (not tr.points or t - tr.points[-1][0] >= POINT_SPACING_S):
            tr.points.append((t, float(value)))

    def _tick(self) -> None:
        """The job's totals as the sampler's latest tick left them (what the forecast reads): total
        PSS, a worker not read exactly yet counted at its estimated USS plus the share of shared
        pages the latest worker (else parent) read exactly had, as :mod:`memprobe.core.series`
        counts one, where every other process has been read; and the parents' anonymous RSS
        summed. Without them (a loaded machine left an epoch's new workers unread for seconds, or
        for their whole life) each epoch's peak was missed: 758 MB where the summary had 1,781."""
        share = self._shares.get(True, self._shares.get(False, 0.0))
        held = [
            tr.held_pss()
            if tr.read is not None or not tr.is_worker()
            else (None if tr.uss() is None else float(tr.uss() or 0.0) + share)
            for tr in self._tracks.values()
        ]
        if held and all(v is not None for v in held):
            _add(self._totals, (self._t, sum(float(v or 0.0) for v in held)))
        parents = [tr.anon for tr in self._tracks.values() if tr.kind in PARENT_KINDS]
        if parents and all(a is not None for a in parents):
            _add(self._parents, (self._t, sum(float(a or 0.0) for a in parents)))

    def _system(self, r: dict) -> None:
        charge, kills = r.get("cgroup_mb"), r.get("cgroup_oom_kills")
        t = float(r["t"])
        if charge is not None:
            _add(self._charge, (t, float(charge)))
            _add(self._kept, (t, float(charge) - float(r.get("cgroup_file_cache_mb") or 0.0)))
        if r.get("mem_available_mb") is not None:
            _add(self._available, (t, float(r["mem_available_mb"])))
        if r.get("cgroup_others_mb") is not None:
            self._others_mb = max(self._others_mb or 0.0, float(r["cgroup_others_mb"]))
        if kills is not None:
            first = self._kills[0] if self._kills[0] is not None else int(kills)
            self._kills = (first, int(kills))

    # -- asked from the main thread ------------------------------------------------------------
    def view(self, facts: Callable[[int], object | None] = lambda pid: None) -> LiveView:
        """The view now; ``facts(pid)``: what the sampler knows of a process (its
        :class:`~memprobe.probe.ledger.ProcessInfo`: worker index, generation, forked,
        command), or None."""
        with self._lock:
            known = {pid: facts(pid) for pid in self._tracks}
            # A parent's own growth is counted from its first worker on (what it built before
            # is not growth: record/windows.py's rule): its workers' first sight, by parent.
            first_worker: dict[int, float] = {}
            for pid, tr in self._tracks.items():
                ppid = getattr(known[pid], "ppid", None)
                if tr.is_worker() and isinstance(ppid, int):
                    first_worker[ppid] = min(first_worker.get(ppid, tr.first_t), tr.first_t)
            rows = [
                self._live_row(pid, tr, known[pid], first_worker.get(pid)) for pid, tr in self._tracks.items()
            ]
            t, ended = self._t, len(self._ended)
            kills = self._kills
            read = [r.pss_mb for r in rows if r.pss_mb is not None]
            total = sum(read) if read else None
            # Each worker's generation, asked of the sampler once, ended ones too: without a
            # terminal the view comes every --every s, and an epoch's workers lived less.
            for pid, first in list(self._unnamed.items()):
                gen = getattr(known[pid] if pid in known else facts(pid), "generation", None)
                if isinstance(gen, int):
                    self._generation[pid] = (gen, first)
                    del self._unnamed[pid]
            ended = len(self._worker_end)
            if self._ahead is None or t - self._ahead[0] >= FORECAST_EVERY_S or ended != self._ahead[1]:
                self._ahead = (t, ended, self._forecast(t))
            ahead = self._ahead[2]
        rows.sort(key=_order)
        totals = LiveTotals(
            processes=len(rows),
            total_pss_mb=total,
            unread=sum(1 for r in rows if r.pss_mb is None),
            sum_rss_mb=sum(r.rss_mb for r in rows),
            cgroup_mb=self._charge[-1][1] if self._charge else None,
            oom_kills=None if kills[0] is None or kills[1] is None else kills[1] - kills[0],
            limit_mb=self.limit_mb,
            limit_words=self.limit_words,
        )
        return LiveView(t, rows, totals, self.verdict(rows), limit_words(ahead, self.limit_mb), ended)

    def _forecast(self, t: float) -> forecast.Forecast:
        """The forecast by the summary's rule on what the view has seen (under the lock)."""
        totals, kept = _series(self._totals), _series(self._kept)
        alone = None if self._others_mb is None else forecast.alone({"rss_mb": self._others_mb})
        peaks, of = forecast.job_memory(totals, kept, alone)
        gens = forecast.generations(
            ((g, start, self._worker_end.get(pid), None) for pid, (g, start) in self._generation.items()),
            t,
            peaks,
        )
        first_worker = min((start for _, start in self._generation.values()), default=None)
        parents = _series([p for p in self._parents if first_worker is None or p[0] >= first_worker])
        room = forecast.Room(self.limit_mb, self.limit_words != MACHINE, kept, _series(self._available))
        return forecast.forecast(gens, parents, room, totals, of)

    def _live_row(self, pid: int, tr: _Track, info: object | None, since: float | None) -> LiveRow:
        worker = getattr(info, "worker", -1)
        return LiveRow(
            pid=pid,
            role=tr.role,
            kind=tr.kind,
            rank=tr.rank,
            worker=worker if isinstance(worker, int) else -1,
            generation=getattr(info, "generation", None),
            uss_mb=tr.uss(),
            exact=tr.exact_now,
            pss_mb=tr.held_pss(),
            rss_mb=tr.rss,
            rate_mb_min=rate(tr.points, since),
            grown_mb=_grown(tr, bool(getattr(info, "forked", False))) if tr.is_worker() else None,
            command=str(getattr(info, "command", "") or ""),
        )

    def verdict(self, rows: list[LiveRow]) -> str:
        """The verdict so far in words: the live workers' USS gained since their start, on
        average, against the threshold; the fastest grower named."""
        workers = [r for r in rows if r.kind in WORKER_KINDS]
        growers = sorted(
            (r for r in rows if r.rate_mb_min is not None and r.rate_mb_min >= SLOW_MB_PER_MIN),
            key=lambda r: -(r.rate_mb_min or 0.0),
        )
        fastest = (
            f"; fastest: {growers[0].role} (pid {growers[0].pid}) at "
            f"{mb(growers[0].rate_mb_min, sign=True, true_minus=False)}/min"
            if growers
            else ""
        )
        grown = [r.grown_mb for r in workers if r.grown_mb is not None]
        if not workers:
            return f"no DataLoader worker process seen yet{fastest}"
        if not grown:
            return f"{len(workers)} worker(s) starting up: no growth measured yet{fastest}"
        mean = statistics.fmean(grown)
        word = "GROWING" if mean > self.threshold_mb else "flat"
        return (
            f"{word} so far: workers' USS {mb(mean, sign=True, true_minus=False)} on average since "
            f"their start ({len(grown)} worker(s); 'growing' above {mb(self.threshold_mb)}){fastest}"
        )


def rate(points: Sequence[tuple[float, float]], since: float | None = None) -> float | None:
    """MB/min: the least-squares line over the last RATE_WINDOW_S of ``points`` (t, MB, in time
    order), those from ``since`` on, or None when they span less than RATE_MIN_SPAN_S."""
    if len(points) < 3:
        return None
    end = points[-1][0]
    start = end - RATE_WINDOW_S if since is None else max(end - RATE_WINDOW_S, since)
    # The least-squares slope in closed form, in one pass from the newest point back (times
    # taken from the newest: small numbers, no cancellation): paid per process every second,
    # 65 processes' took 5.8 ms a view with four passes over a copied list.
    n = 0
    st = sv = stt = stv = 0.0
    first = end
    for t, v in reversed(points):
        if t < start:
            break
        x = t - end
        n += 1
        st += x
        sv += v
        stt += x * x
        stv += x * v
        first = t
    if n < 3 or end - first < RATE_MIN_SPAN_S:
        return None
    var = stt - st * st / n
    return (stv - st * sv / n) / var * 60.0 if var > 0 else None


def limit_words(ahead: forecast.Forecast, limit_mb: float | None) -> str:
    """The time to the limit so far, in words (:func:`memprobe.core.forecast_words.words`, brief)."""
    if not limit_mb:
        return "memory limit: not known"
    return (
        f"time to the limit: {forecast_words.words(ahead.to_dict(generations=False), limit_mb, brief=True)}"
    )


def _series(points: list[tuple[float, float]]) -> pd.Series | None:
    return pd.Series([v for _, v in points], index=[t for t, _ in points], dtype=float) if points else None


def _grown(tr: _Track, forked: bool) -> float | None:
    """A worker's USS gained since its start: a forked one's whole USS, a spawned or
    exec'd one's since the end of its start-up (its own copy of what it was given is not growth)."""
    now = tr.uss()
    if now is None or not tr.startup:
        return None
    if tr.base is not None:
        return now - tr.base
    t, rss, cpu, uss = (list(c) for c in zip(*tr.startup, strict=True))
    base: float | None = 0.0  # a forked child starts with no page of its own: all its USS is growth
    if not forked:
        i = next((i for i in range(len(t)) if settled_at(t, rss, cpu, i)), None)
        if i is None and t[-1] - t[0] < STARTUP_MAX_S:
            return None  # still starting up
        base = next((u for u in uss[i if i is not None else -1 :] if u is not None), None)
    tr.base = base
    return None if base is None else now - base


def _add(series: list[tuple[float, float]], point: tuple[float, float]) -> None:
    series.append(point)
    if len(series) > SERIES_POINTS:  # keep its whole span, at half the density
        del series[:-1:2]


def _order(r: LiveRow) -> tuple:
    """Parents first, by rank; then each one's workers by index."""
    worker = r.kind in WORKER_KINDS
    return (r.rank, worker, r.worker if worker else 0, r.generation or 0, r.pid)
