"""The sampler of ``record`` and ``watch``: a whole tree memprobe did not build, exact readings
where memory moves, an estimated USS in between.

Every tick (0.2 s by default, spaced up to 0.45 s when the tree makes ticks costly, up to 2 s on a
tree too wide for that) reads the cheap tier of every process; then
:class:`~memprobe.probe.estimator.ExactPlanner` picks which processes get an exact reading
(smaps_rollup) this tick: each new process at once (a forked child excepted: its baseline is
known), then the readings that cannot wait (a parent whose children appeared or exited, or whose
children's copies its estimate cannot tell yet, a spawned worker whose start-up just ended, a
forked child never read, a process whose estimate moved a quarter from its last reading), then
those whose counters or whose sharers' counters moved, least-sure estimate first (the page census
of a process that is no worker, :mod:`memprobe.probe.census`, is read before the choice), as long
as the sampler's whole CPU time (cheap tier and bookkeeping included) stays within
``pss_cpu_budget`` of one core averaged since the start (a tenth of it kept for the readings that
cannot wait). A full round (every live process) is taken on request
(``Sampler.request_pss``: before ``record`` forwards a stop signal) and at its ``final_pss``.

Rows carry, beyond the base sampler's columns: ``rank``, ``kind`` (see
:mod:`memprobe.probe.tree`) and ``uss_est_mb``, the estimated USS on a cheap row (``None`` on
exact rows, and before the first exact reading of a process that is not a forked child). Rows
after the first tick leave out their empty fields (the first tick's rows carry every column).
"""

from __future__ import annotations

import statistics
import threading
import time

from memprobe.core.system import PAGE_SIZE
from memprobe.core.tree_rules import STARTUP_MAX_S, settled_at
from memprobe.core.vocabulary import is_loader_thread
from memprobe.probe import procfs
from memprobe.probe.census import PagePanel
from memprobe.probe.estimator import ExactPlanner
from memprobe.probe.ledger import Ledger
from memprobe.probe.sampler import MB, Row, Sampler, SamplerSettings, Sink
from memprobe.probe.tree import DATALOADER, ProcReader, TreeRoles, boot_clock_offset, run_clock
from memprobe.probe.tree_walk import ChildrenLists

# The cheap tier is paid every tick for every process, so it reads as little as it can: stat
# (minflt, and RSS from the same counters as status) every tick; status (RSS split into
# anon/file/shmem) only when RSS moved by this much since it was last read.
STATUS_MOVE_BYTES = 1024 * 1024
STATUS_FALL_BYTES = 64 * 1024  # a fall this big: status again (see read_cheap)
# /proc/PID/task/TID/children must be read per thread; torch starts dozens. The main thread's
# list is read every tick (DataLoaders, Pools and subprocesses fork from it), every thread's
# this often, so a child forked by another thread is found within this time.
THREAD_SCAN_S = 1.0
# The cheap tier's share of the budget: a tick of a big tree costs ~1-2 ms (11 processes on the
# loaded 2-core machine), which at 5 ticks a second is most of 1 % of a core and leaves nothing
# for exact readings. Ticks are spaced (from interval_s up to MAX_INTERVAL_S) so that ticks
# without exact readings use at most this share of the budget.
CHEAP_SHARE = 0.4
# Of the budget, for the readings that cannot wait (see _tree_round), whatever the rest costs: a
# tick costing more than the budget earns (3 ms every 2 s at 0.1 %, or a slow machine's at 1 %)
# had spent it, and a watched job's two workers went unread for a minute, until the final round.
RESERVE_SHARE = 0.1
SLACK_SHARE = 0.05  # of the budget, never planned: a reading may cost more than predicted
POINTS_INTERVAL_S = 0.45  # >= 2 points a second on every process's curve, while the budget allows
# A tree whose ticks at POINTS_INTERVAL_S would take more than WIDE_SHARE of the budget is ticked
# less often, to keep within that share, down to a tick every MAX_INTERVAL_S (a point every 2 s on
# every curve, whatever the cost). At a tick every 0.45 s, a tree of 200 forked children (8.4-15
# ms a tick) used 2.7-3.5 % of a core at a 1 % budget, with nothing left for exact readings. The
# whole budget, not less: at 60 % of it, a torchrun tree of 11 processes (2-3 ms a tick, more
# while its workers start) went from 2.2-2.3 points a second on each curve to 1.6-1.7.
WIDE_SHARE = 1.0
MAX_INTERVAL_S = 2.0
# A census reads its file mappings at every tick the tree's file pages grew FILES_MOVED_BYTES or
# a process of the tree ended (another process mapping the same libraries makes a process's
# private file pages shared, one unmapping them makes them private again: torchrun's ranks
# importing torch took 25 MB from their launcher's USS within a second, and its census, which
# read them once a second, was 16.9 % high at the next exact reading), else this often: read
# every tick they were half a census's cost (main of a 13 s HF datasets job: 1.7 ms a tick), and
# once a second 0.9 ms of a torchrun tick's 3.2-3.6 (2.7 reads a second, a quarter of the 1 %).
CENSUS_FILES_S = 5.0
FILES_MOVED_BYTES = 4 * MB
THREAD_NAMES_S = 1.0  # see _loader_threads
TICK_COST_WEIGHT = 0.2  # the smoothed cost of a tick without exact readings: the latest tick's weight


class TreeSampler(Sampler):
    """A :class:`Sampler` for a tree memprobe did not build (see the module doc)."""

    roles: TreeRoles

    def __init__(
        self,
        root: int,
        sink: Sink,
        settings: SamplerSettings | None = None,
        *,
        t0: float,
        pgid: int | None = None,
        reader: ProcReader | None = None,
    ) -> None:
        super().__init__(root, sink, settings, t0=t0, pgid=pgid)
        self.roles = TreeRoles(root, reader)
        self.plan = ExactPlanner()
        self.ledger = Ledger()
        self.first_pss_t: float | None = None
        self.last_t: float | None = None
        self.exact_readings = 0
        self.urgent_spent = 0.0  # CPU seconds (predicted) of the readings that cannot wait, so far
        self._boot_at_t0 = boot_clock_offset() + self.t0
        self._lock = threading.Lock()
        self._threads: dict[int, int] = {}  # pid -> threads at its latest stat
        self._status: dict[int, tuple[int, procfs.CheapSample]] = {}  # pid -> stat's RSS, its latest status
        self._all_threads = True
        self._next_thread_scan = 0.0
        self._walk = ChildrenLists()
        self.tick_cost: float | None = None  # CPU seconds of a tick without exact readings, smoothed
        self._first = True  # the first tick's rows carry every column, later ones only their values
        self._startup: dict[int, tuple[list[float], list[float], list[float]]] = {}  # t, RSS, CPU
        self._settled: set[int] = set()
        self._panels: dict[int, PagePanel] = {}  # pid -> its page census's sample
        # pid -> (threads when its threads' names were last read, how many were loader threads,
        # when its number of threads last changed)
        self._named: dict[int, tuple[int, int, float]] = {}
        self._file_rss: dict[int, float] = {}  # pid -> its file-backed RSS at the latest tick (bytes)

    def stop(self, *, final_pss: bool = True) -> None:
        super().stop(final_pss=final_pss)
        for panel in self._panels.values():
            panel.close()
        self._panels.clear()

    # -- the cheap tier ------------------------------------------------------------------
    def discover(self, tick: float) -> list[int]:
        """The base's, every thread's children lists read once every THREAD_SCAN_S; the lists
        of the last walk kept when no pid was allocated since (:mod:`memprobe.probe.tree_walk`)."""
        self._all_threads = tick >= self._next_thread_scan
        if self._all_threads:
            self._next_thread_scan = tick + THREAD_SCAN_S
        self._walk.begin()
        return self._walk.end(super().discover(tick))

    def children(self, pid: int) -> list[int]:
        """The main thread's children list, every thread's when it is time (see discover). A
        single-threaded process's main-thread list is complete."""
        threads = self._threads.get(pid, 2)
        every = self._all_threads and threads > 1
        read = lambda p: procfs.read_children(p, all_threads=every)  # noqa: E731
        return self._walk.children(pid, read, complete=every or threads <= 1, whole=self._all_threads)

    def read_cheap(self, pid: int) -> procfs.CheapSample | None:
        """stat every tick; status only when RSS moved (see STATUS_MOVE_BYTES)."""
        st = procfs.read_stat(pid)
        if st is None or st.state in ("Z", "X"):
            return None
        self._threads[pid] = st.threads
        rss = st.rss_pages * PAGE_SIZE
        at, last = self._status.get(pid, (0, None))
        # Read again on a fall too: file pages (shared) or its own, a forked child's estimate needs
        # it (ExactPlanner.observe). Moved against stat's RSS at that read, and status's then plus
        # stat's move since: stat's is 68-148 KiB below status's (6.18: approximate per-CPU sums).
        if last is not None and -STATUS_FALL_BYTES < rss - at < STATUS_MOVE_BYTES:
            kept = {"rss_anon": last.rss_anon, "rss_file": last.rss_file, "rss_shmem": last.rss_shmem}
            return procfs.CheapSample(stat=st, rss=last.rss + rss - at, **kept)
        cheap = procfs.read_cheap(pid)
        if cheap is not None:
            self._status[pid] = (cheap.stat.rss_pages * PAGE_SIZE, cheap)
        return cheap

    def interval(self) -> float:
        """Ticks spaced so that the cheap tier keeps within its share of the budget (see
        CHEAP_SHARE, WIDE_SHARE)."""
        base = self.settings.interval_s
        if self.tick_cost is None:
            return base
        budget = self.settings.pss_cpu_budget
        if self.tick_cost / POINTS_INTERVAL_S > WIDE_SHARE * budget:  # a wide tree
            return max(base, min(self.tick_cost / (WIDE_SHARE * budget), MAX_INTERVAL_S))
        return max(base, min(self.tick_cost / (CHEAP_SHARE * budget), POINTS_INTERVAL_S))

    # -- a round -------------------------------------------------------------------------
    def run_round(self, tick: float) -> None:
        """A tick of the tree (see the module doc); what it cost, when it took no exact reading."""
        t0 = time.thread_time()
        exact = self._tree_round(tick)
        if not exact:  # what every tick costs, exact readings aside (censuses and sink included)
            cost = time.thread_time() - t0
            if self.tick_cost is None:
                self.tick_cost = cost
            else:
                self.tick_cost = (1 - TICK_COST_WEIGHT) * self.tick_cost + TICK_COST_WEIGHT * cost

    def _tree_round(self, tick: float) -> list[int]:
        full = self.take_pss_request()
        pids = self.discover(tick)
        c0 = time.thread_time()
        rows = [r for r in (self.sample(pid, tick, False) for pid in pids) if r is not None]
        rows.extend(self.lost_rows({int(r["pid"]) for r in rows}, tick, False))
        live = {int(r["pid"]): r for r in rows if not r["missing"]}
        counters = {pid: (int(r["minflt"]), int(float(r["rss_mb"]) * MB)) for pid, r in live.items()}
        nodes = self.roles.nodes
        forked = {pid: nodes[pid].ppid for pid in counters if pid in nodes and nodes[pid].shares_parent}
        t = round(tick - self.t0, 4)
        born = {pid: self.roles.start_t(pid, self._boot_at_t0) for pid in forked}
        dealt = {pid for pid in forked if nodes[pid].kind == DATALOADER}
        files = {pid: float(r["rss_file_mb"]) * MB for pid, r in live.items()}
        self.plan.observe(
            t,
            counters,
            self.roles.share_groups(),
            forked,
            {p: s for p, s in born.items() if s is not None},
            dealt,
            files,
        )
        self._watch_startups(t, live)
        self.plan.hosts = {pid for pid in live if pid in nodes and not nodes[pid].is_worker}
        gained = sum(max(0.0, v - self._file_rss.get(pid, v)) for pid, v in files.items())
        self._file_rss = files
        ended = any(r["missing"] for r in rows)
        self.plan.files_moved = gained >= FILES_MOVED_BYTES or ended
        self._censuses()
        # 10 % of the budget is kept for the readings that cannot wait (a parent whose children
        # appeared or exited or whose pool is unknown, a spawned worker at the end of its start-up,
        # a forked child never read, an estimate that drifted), and 5 % for a reading that costs
        # more than predicted: with all of it spent, a quiet torchrun tree's sampler used 1.02 % of
        # a core at 1 %. They may spend what the whole budget has left, and, where the rest of the
        # sampler overspent it, their own share of it still (see RESERVE_SHARE).
        earned = self.settings.pss_cpu_budget * (tick - self.t0)
        allowance = (1.0 - RESERVE_SHARE - SLACK_SHARE) * earned - self.cpu_spent()
        own = RESERVE_SHARE * earned - self.urgent_spent  # what their own share has left
        reserve = max(RESERVE_SHARE * earned, own - allowance)  # allowance + reserve >= own
        chosen = self.plan.choose(t, allowance, everyone=full, reserve_s=reserve)
        self.urgent_spent += 0.0 if full else self.plan.urgent_s
        exact = [pid for pid in chosen if pid in live]
        for pid in exact:
            self._read_exact(live[pid], pid, tick)
        self._annotate(rows, tick)
        cost = time.thread_time() - c0
        (self.pss_round_costs if exact else self.cheap_round_costs).append(cost)
        if full:
            self.pss_round_done(tick)
        self.sink("samples", rows if self._first else [compact(r) for r in rows])
        self._first = False
        self.sink("system", [self.system_row(tick)])
        return exact

    def _watch_startups(self, t: float, live: dict[int, Row]) -> None:
        """A spawned or exec'd worker gets a reading as soon as its start-up is over (by the
        rule the analysis uses: :func:`~memprobe.core.tree_rules.settled_at`): its window starts there."""
        for pid in [p for p in self._startup if p not in live]:  # it ended during its start-up
            del self._startup[pid]
        for pid, row in live.items():
            node = self.roles.nodes.get(pid)
            if node is None or not node.is_worker or node.shares_parent or pid in self._settled:
                continue
            seen = self._startup.setdefault(pid, ([], [], []))
            for column, value in zip(seen, (t, float(row["rss_mb"]), float(row["cpu_s"])), strict=True):
                column.append(value)
            if settled_at(*seen, len(seen[0]) - 1) or t - seen[0][0] >= STARTUP_MAX_S:
                self._settled.add(pid)
                del self._startup[pid]
                self.plan.want(pid)

    def _censuses(self) -> None:
        """Read the page census of every process that keeps one and is due (before the exact
        readings are chosen: their priority and checks use it), draw a new panel where the old
        no longer covers what a process maps; drop the panels of processes that keep none."""
        for pid in [p for p in self._panels if not self.plan.wants_census(p)]:
            self._panels.pop(pid).close()
        for pid in self.plan.census_new():
            self._start_census(pid, "fork")
        for pid in self.plan.census_due():
            panel = self._panels.get(pid)
            files = panel is not None and (
                self.plan.files_moved or time.monotonic() - panel.files_read_at >= CENSUS_FILES_S
            )
            census = panel.read(files=files) if panel is not None else None
            if census is None:
                self.plan.drop_census(pid)
            else:
                self.plan.census(
                    pid, census.exclusive, census.present, error=census.error, level_error=census.level_error
                )
        for pid in self.plan.census_stale():
            self._start_census(pid, "carry")

    def _read_exact(self, row: Row, pid: int, tick: float) -> None:
        c0 = time.thread_time()
        self.add_pss(row, pid)
        cost = time.thread_time() - c0
        if row["tier"] != "pss":
            self.plan.tried(pid)
            return
        self.exact_readings += 1
        self.plan.exact(
            pid,
            round(tick - self.t0, 4),
            float(row["uss_mb"]) * MB,
            int(float(row["rss_mb"]) * MB),
            cost,
            float(row["private_clean_mb"]) * MB,
        )
        if self.plan.wants_census(pid):  # a new panel, its start right after the reading
            self._start_census(pid, "reading")

    def _start_census(self, pid: int, start: str) -> None:
        old = self._panels.pop(pid, None)
        if old is not None:
            old.close()
        panel = PagePanel.draw(pid)
        census = panel.read() if panel is not None else None
        if panel is None or census is None:
            if panel is not None:
                panel.close()
            self.plan.drop_census(pid, unreadable=True)
            return
        self._panels[pid] = panel
        self.plan.census(
            pid,
            census.exclusive,
            census.present,
            error=census.error,
            level_error=census.level_error,
            start=start,
        )

    def _annotate(self, rows: list[Row], tick: float) -> None:
        """rank, kind and uss_est_mb on every row; the facts of every process for the meta."""
        t = round(tick - self.t0, 4)
        any_exact = False
        # Thread names are read outside the lock (/proc reads; process_list waits on the lock).
        named = {}
        for r in rows:
            pid = int(r["pid"])
            if r["missing"]:
                self._named.pop(pid, None)
                continue
            node = self.roles.nodes.get(pid)
            named[pid] = self._loader_threads(pid, t, node is None or not node.is_worker)
        with self._lock:
            self.last_t = t
            for r in rows:
                pid = int(r["pid"])
                node = self.roles.nodes.get(pid)
                r["rank"] = node.rank if node is not None else -1
                r["kind"] = node.kind if node is not None else None
                exact = r["tier"] == "pss"
                est = None if exact or r["missing"] else self.plan.estimate(pid)
                r["uss_est_mb"] = None if est is None else est / MB
                info = self.ledger.note(pid, t, r, self.roles, self._boot_at_t0)
                if r["missing"]:
                    info.end_t = t if info.end_t is None else info.end_t
                    continue
                info.saw_threads(t, named[pid])
                any_exact |= exact
                if exact:
                    info.first_pss_t = t if info.first_pss_t is None else info.first_pss_t
                    info.last_pss_t = t
                    info.exact_readings += 1
        if any_exact and self.first_pss_t is None:
            self.first_pss_t = t

    def _loader_threads(self, pid: int, t: float, host: bool) -> tuple[int, float | None] | None:
        """A process's DataLoader thread workers, counted by their names: how many, and when the
        first of them started (``None`` when not read this tick); ``None`` for a process whose
        threads are not looked at (a worker process's, a single thread's). Read again for a
        second after its number of threads changed (a thread worker starts or ends, and names
        itself once running: read at the change alone, one of two was seen), else as last
        counted."""
        threads = self._threads.get(pid, 0)
        if not host or threads <= 1:
            return None
        last = self._named.get(pid)
        if last is not None and last[0] == threads and t - last[2] >= THREAD_NAMES_S:
            return last[1], None
        loaders = [
            st
            for st in (procfs.read_stat(pid, tid) for tid in procfs.thread_ids(pid))
            if st is not None and is_loader_thread(st.comm)
        ]
        changed = t if last is None or last[0] != threads else last[2]
        self._named[pid] = (threads, len(loaders), changed)
        first = run_clock(min(st.start_ticks for st in loaders), self._boot_at_t0) if loaders else None
        return len(loaders), first

    # -- for the meta --------------------------------------------------------------------
    def process_list(self) -> list[dict]:
        """Every process sampled, with every fact the analysis takes as it is
        (:meth:`memprobe.probe.ledger.Ledger.listed`)."""
        with self._lock:
            return self.ledger.listed(self.roles)

    def stats(self, elapsed_s: float) -> dict[str, object]:
        """The base sampler's statistics, with the exact readings taken and the estimate's error."""
        return {
            **super().stats(elapsed_s),
            "exact_readings": self.exact_readings,
            "estimate_error": self.estimate_error(),
        }

    def estimate_error(self) -> dict:
        """The estimate against the exact reading that replaced it (percent of that reading),
        over the intervals without a change of structure; those with one (a fork, a sharer's
        exit: invisible to the counters) are counted apart."""
        plain = [c.error_pct for c in self.plan.checks if not c.event]
        events = [c.error_pct for c in self.plan.checks if c.event]
        out: dict = {"median_pct": None, "max_pct": None, "n": len(plain), "n_events": len(events)}
        out["events_median_pct"] = round(statistics.median(events), 2) if events else None
        if plain:
            out.update(median_pct=round(statistics.median(plain), 2), max_pct=round(max(plain), 2))
            worst = max((c for c in self.plan.checks if not c.event), key=lambda c: c.error_pct)
            out["max_at"] = {  # where to look first
                "t": worst.t,
                "pid": worst.pid,
                "estimate_mb": round(worst.estimate / MB, 2),
                "exact_mb": round(worst.exact / MB, 2),
            }
        return out


def compact(row: Row) -> Row:
    """The row without its empty fields: a cheap row has ~15 (the exact tier's), and encoding
    them was a third of a tick. The first tick writes every column, so the table has them all."""
    return {k: v for k, v in row.items() if v is not None}
