"""Sample a process tree from the outside, in two tiers, within a CPU budget.

The sampler runs as a thread of the *supervising* process, never inside the process that forks
the DataLoader workers: a thread there would be forked into every worker and its reads would
touch the very pages being measured.

A sampler of another kind (the record/watch sampler, :mod:`memprobe.probe.tree_sampler`) is a
subclass. It changes the loop through these hooks, and through nothing else:

* :meth:`Sampler.run_round` (``tick``): one tick's whole work: find the processes, read them,
  write their rows (default: the cheap tier of every process, and smaps_rollup of every process
  when a PSS round is due within ``pss_cpu_budget``);
* :meth:`Sampler.discover` (``tick``): the pids to sample this tick (the tree, the orphans that
  left it, the process group's stragglers);
* :meth:`Sampler.children` (``pid``): a process's direct children, as the tree is walked;
* :meth:`Sampler.read_cheap` (``pid``): the cheap tier of one process;
* :meth:`Sampler.interval`: seconds from the start of one tick to the next.

A subclass's ``run_round`` builds on the base's parts: :meth:`Sampler.sample` (one process's row),
:meth:`Sampler.lost_rows` (rows of the processes that left), :meth:`Sampler.add_pss` (an exact
reading onto a row), :meth:`Sampler.system_row`, :meth:`Sampler.take_pss_request` (a full
round was asked for), :meth:`Sampler.pss_round_done` (tell those waiting for one) and
:meth:`Sampler.cpu_spent` (the sampler's CPU time so far).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memprobe.core.vocabulary import DENIED_OTHER_USER, DENIED_REASON
from memprobe.probe import cgroup, procfs
from memprobe.probe.roles import RoleBook

MB = procfs.MB
Row = dict[str, Any]  # one JSON line of samples: numbers, strings, booleans, None by column
Sink = Callable[[str, list[Row]], None]

_CHEAP_FIELDS = (
    "rss_mb",
    "rss_anon_mb",
    "rss_file_mb",
    "rss_shmem_mb",
    "cpu_s",
    "minflt",
    "threads",
    "sys_cpu_s",
)
_PSS_FIELDS = (
    "pss_mb",
    "pss_anon_mb",
    "pss_file_mb",
    "pss_shmem_mb",
    "uss_mb",
    "shared_clean_mb",
    "shared_dirty_mb",
    "private_clean_mb",
    "private_dirty_mb",
    "swap_mb",
    "swap_pss_mb",
    "anon_huge_mb",
)
SAMPLE_COLUMNS = (
    "t",
    "pid",
    "role",
    "worker",
    "state",
    "tier",
    "missing",
    "reason",
    # When an exact reading was taken (``t``'s clock; null on a cheap row): a tick is dated by its
    # start, and under load it reads a process up to a second later, after a fork that started in
    # between (the analysis keeps such a reading out of a parent's state before its workers).
    "read_t",
    *_CHEAP_FIELDS,
    *_PSS_FIELDS,
)


@dataclass(frozen=True)
class SamplerSettings:
    interval_s: float = 0.1  # cheap tier period
    # Share of one core the budgeted part of the sampler may use. The forced rounds (warm, done,
    # a new generation of workers) and the cheap tier's own cost come on top: on a quiet machine a
    # 500k-record list x fork run measured 1.9-2.0 % of a core in all with 0.012 (0.015: 2.0-2.2 %),
    # with the same PSS rounds in its growth window (docs/performance.md).
    pss_cpu_budget: float = 0.012
    pss_min_interval_s: float = 0.25
    pss_max_interval_s: float = 10.0  # never go longer than this without a PSS round
    # A full /proc scan finds processes that left the tree but not the run's group (orphans
    # reparented to init, e.g. a forkserver's workers). Orphans appear only when a process of
    # the tree exits, so the scan runs then, and otherwise only this often: it reads every
    # process on the machine (~4 ms for 120 processes here, ~40 ms on a busy training node).
    group_scan_interval_s: float = 10.0
    mem_available_interval_s: float = 1.0  # /proc/meminfo: machine context, not per process
    threads_of_main: bool = False  # per-thread CPU of the main process (thread-mode loaders)
    enabled: bool = True  # False: take no samples at all (to measure the sampler's own effect)


class Sampler:
    """Samples ``root`` and its descendants until stopped.

    Rows go to ``sink(table, rows)``: table ``"samples"`` (one row per process per tick, PSS
    fields ``None`` on cheap-only ticks) and ``"system"`` (/dev/shm, MemAvailable, the sampler's
    own CPU time). A process that vanishes gets one row with ``missing=True`` and a reason.
    """

    def __init__(
        self,
        root: int,
        sink: Sink,
        settings: SamplerSettings | None = None,
        *,
        t0: float | None = None,
        pgid: int | None = None,
    ) -> None:
        self.root = root
        self.sink = sink
        self.settings = settings or SamplerSettings()
        self.t0 = time.monotonic() if t0 is None else t0
        self.pgid = pgid
        self.roles = RoleBook(root)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._pss_now = threading.Event()
        self._pss_done = threading.Condition()
        self._last_pss_tick = -1.0  # monotonic start time of the latest finished PSS round
        self._ended = False  # the sampling thread has returned (stopped, or died)
        self._thread: threading.Thread | None = None
        self._alive: set[int] = set()
        self._gone: set[int] = set()
        self._orphans: set[int] = set()  # left the tree alive (parent exited): still followed
        self._started: dict[int, int] = {}  # pid -> start time in ticks, to tell a reused pid
        self._last_role: dict = {}  # pid -> Role at its latest sample, for its "missing" row
        self._next_pss = 0.0
        self._next_scan = 0.0
        self._next_meminfo = 0.0
        # The memory cgroup the root is charged to: its charge and OOM kills with MemAvailable;
        # followed where the root moves into another (cgexec, systemd-run --scope).
        self.cgroup = cgroup.Entered.of(root)
        # Who else is in that cgroup (cgroup.others): read at the first tick, where the root moves
        # into another, and every cgroup.OTHERS_INTERVAL_S; the largest reading kept for the meta.
        self.cgroup_others: cgroup.Others | None = None
        self._next_others = 0.0
        self.cpu_s = 0.0
        self._cpu0 = time.thread_time()  # the sampling thread's, from its start (see _run)
        self.pss_round_costs: list[float] = []
        self.cheap_round_costs: list[float] = []
        self.error: BaseException | None = None

    # -- control -------------------------------------------------------------------------
    def start(self) -> None:
        if not self.settings.enabled:
            return
        self._thread = threading.Thread(target=self._run, name="memprobe-sampler", daemon=True)
        self._thread.start()

    def stop(self, *, final_pss: bool = True) -> None:
        """Stop after one last round (with PSS unless ``final_pss`` is false)."""
        if final_pss:
            self._pss_now.set()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def stats(self, elapsed_s: float) -> dict[str, object]:
        """What sampling cost, for the run's meta.json: CPU seconds (both tiers) and their share
        of one core over ``elapsed_s``, rounds per tier and their mean cost, the error that
        stopped it (if one did). The one place these are computed, for every kind of run."""
        pss, cheap = self.pss_round_costs, self.cheap_round_costs
        out: dict[str, object] = {
            "cpu_s": round(self.cpu_s, 4),
            "cpu_share": round(self.cpu_s / max(elapsed_s, 1e-3), 5),
            "pss_rounds": len(pss),
            "cheap_rounds": len(cheap),
            "pss_round_mean_s": round(sum(pss) / len(pss), 6) if pss else None,
            "cheap_round_mean_s": round(sum(cheap) / len(cheap), 6) if cheap else None,
        }
        if self.error is not None:
            out["error"] = repr(self.error)
        return out

    def request_pss(self, *, wait_s: float = 0.0) -> bool:
        """Ask for a PSS round at the next tick; optionally wait for it to finish."""
        if not self.settings.enabled:
            return True
        with self._pss_done:
            if self._ended:
                return False  # the sampler stopped or died (its error is recorded): no round will come
            # Only a round that *starts* after this request counts: one already under way may
            # have read some processes before the moment the caller cares about.
            asked = time.monotonic()
            self._pss_now.set()
            self._wake.set()
            if wait_s > 0:
                self._pss_done.wait_for(lambda: self._last_pss_tick >= asked or self._ended, timeout=wait_s)
                return self._last_pss_tick >= asked
        return True

    # -- loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        self._cpu0 = cpu0 = time.thread_time()
        try:
            while True:
                stopping = self._stop.is_set()
                tick = time.monotonic()
                self.run_round(tick)
                self.cpu_s = time.thread_time() - cpu0
                if stopping:
                    break
                self._wake.wait(max(0.0, tick + self.interval() - time.monotonic()))
                self._wake.clear()
        except BaseException as exc:  # noqa: BLE001  (recorded and re-raised by the supervisor, never lost)
            self.error = exc
        finally:
            with self._pss_done:  # wake anyone waiting for a round that will never come
                self._ended = True
                self._pss_done.notify_all()

    def run_round(self, tick: float) -> None:
        """One tick (a hook): the cheap tier of every process, with smaps_rollup when a PSS round
        is due or was asked for; the rows to the sink."""
        pids = self.discover(tick)
        with_pss = self._pss_now.is_set() or tick >= self._next_pss
        if with_pss:
            self._pss_now.clear()  # before reading: a request arriving mid-round gets the next one
        c0 = time.thread_time()
        rows = [r for r in (self.sample(pid, tick, with_pss) for pid in pids) if r is not None]
        rows.extend(self.lost_rows({int(r["pid"]) for r in rows}, tick, with_pss))
        cost = time.thread_time() - c0
        if with_pss:
            self.pss_round_costs.append(cost)
            self._next_pss = tick + self._pss_gap(cost, tick)
            self.pss_round_done(tick)
        else:
            self.cheap_round_costs.append(cost)
        self.sink("samples", rows)
        if self.settings.threads_of_main:
            self.sink("threads", self._thread_rows(tick))
        self.sink("system", [self.system_row(tick)])

    def interval(self) -> float:
        """Seconds from the start of one tick to the next (a hook)."""
        return self.settings.interval_s

    def take_pss_request(self) -> bool:
        """Whether a full PSS round was asked for (:meth:`request_pss`, :meth:`stop`); the request
        is cleared before the round reads anything, so one arriving mid-round gets the next."""
        if not self._pss_now.is_set():
            return False
        self._pss_now.clear()
        return True

    def pss_round_done(self, tick: float) -> None:
        """A PSS round that started at ``tick`` (monotonic) is done: wake those waiting for it."""
        with self._pss_done:
            self._last_pss_tick = tick
            self._pss_done.notify_all()

    def cpu_spent(self) -> float:
        """The sampling thread's CPU seconds since it started."""
        return time.thread_time() - self._cpu0

    def _pss_gap(self, cost: float, tick: float) -> float:
        """Seconds until the next PSS round, so that the sampler's whole CPU time (both tiers,
        bookkeeping included) stays within ``pss_cpu_budget`` of one core."""
        st = self.settings
        elapsed = max(tick - self.t0, 1e-3)
        spent = self.cpu_spent()
        # Earliest moment at which the CPU spent so far plus this round's cost fits the budget.
        catch_up = (spent + cost) / st.pss_cpu_budget - elapsed
        gap = max(st.pss_min_interval_s, cost / st.pss_cpu_budget, catch_up)
        return min(gap, st.pss_max_interval_s)

    def discover(self, tick: float) -> list[int]:
        """The pids to sample this tick (a hook): the tree from the root, the orphans that left it
        alive, and, now and then, the processes of the run's group outside both."""
        pids = self._tree(self.root)
        for orphan in sorted(self._orphans - self._gone):
            pids += [p for p in self._tree(orphan) if p not in pids]
        if self.pgid is not None and tick >= self._next_scan:
            # Orphans (e.g. a forkserver's workers after a crash) leave the tree but keep the group.
            self._next_scan = tick + self.settings.group_scan_interval_s
            pids += [p for p in procfs.processes_in_group(self.pgid) if p not in pids]
        return [p for p in pids if p not in self._gone]

    def _tree(self, root: int) -> list[int]:
        return procfs.process_tree(root, self.children)

    def children(self, pid: int) -> list[int]:
        """A process's direct children (a hook; default: every thread's)."""
        return procfs.read_children(pid)

    def read_cheap(self, pid: int) -> procfs.CheapSample | None:
        """The cheap tier of one process (a hook): stat and status; ``None`` if it is gone."""
        return procfs.read_cheap(pid)

    def sample(self, pid: int, tick: float, with_pss: bool) -> Row | None:
        """One process's row of this tick (``with_pss``: with an exact reading); ``None`` if it
        is gone or its pid now names another process (reported once by :meth:`lost_rows`)."""
        cheap = self.read_cheap(pid)
        if cheap is None:
            return None  # reported once by lost_rows
        if self._started.setdefault(pid, cheap.stat.start_ticks) != cheap.stat.start_ticks:
            return None  # the pid was reused by another process: ours is gone
        role = self.roles.role(pid, cheap.stat.comm, cheap.stat.ppid)
        self._last_role[pid] = role
        row: Row = {
            "t": round(tick - self.t0, 4),
            "pid": pid,
            "role": role.name,
            "worker": role.worker,
            "state": cheap.stat.state,
            "tier": "cheap",
            "missing": False,
            "reason": None,
            "read_t": None,
            "rss_mb": cheap.rss / MB,
            "rss_anon_mb": cheap.rss_anon / MB,
            "rss_file_mb": cheap.rss_file / MB,
            "rss_shmem_mb": cheap.rss_shmem / MB,
            "cpu_s": cheap.stat.cpu_s,
            "minflt": cheap.stat.minflt,
            "threads": cheap.stat.threads,
            "sys_cpu_s": cheap.stat.sys_cpu_s,
        }
        row.update(dict.fromkeys(_PSS_FIELDS))
        if with_pss:
            self.add_pss(row, pid)
        return row

    def add_pss(self, row: Row, pid: int) -> None:
        """An exact reading (smaps_rollup) of ``pid`` onto its row: tier ``pss`` and when it was
        taken (``read_t``), or the reason it could not be read."""
        pss = procfs.read_pss_or_denied(pid)
        if isinstance(pss, procfs.Denied):
            row["reason"] = denied_reason(pss, os.geteuid())
            return
        if pss is None:
            row["reason"] = "smaps_rollup unreadable (process exiting?)"
            return
        row["tier"] = "pss"
        row["read_t"] = round(time.monotonic() - self.t0, 4)
        for name in _PSS_FIELDS:
            attr = name[:-3]
            row[name] = getattr(pss, attr) / MB
        # Rss from the same read as Pss keeps PSS <= RSS exact within one row.
        row["rss_mb"] = pss.rss / MB

    def lost_rows(self, sampled: set[int], tick: float, with_pss: bool) -> list[Row]:
        """Rows for the processes sampled last tick but not found in this tick's tree, reading
        each one's stat once: one that left the tree alive (its parent exited and it was
        re-parented to init or a subreaper) is still the run's and is sampled and followed; any
        other gets one ``missing`` row, with the reason, and is not read again."""
        rows = []
        for pid in sorted(self._alive - sampled):
            self._next_scan = 0.0  # an exit leaves orphans, an escape may have siblings: look next tick
            st = procfs.read_stat(pid)
            if st is not None and st.start_ticks != self._started.get(pid):
                st = None  # the pid was reused: ours exited
            row = self.sample(pid, tick, with_pss) if st is not None and st.state not in ("Z", "X") else None
            if row is not None:
                self._orphans.add(pid)
                sampled.add(pid)
            else:
                row = self._missing_row(pid, st, tick)
            rows.append(row)
        self._alive = sampled
        return rows

    def _missing_row(self, pid: int, st: procfs.StatInfo | None, tick: float) -> Row:
        self._gone.add(pid)
        role = self._last_role.pop(pid, None) or self.roles.role(
            pid, st.comm if st else "", st.ppid if st else None
        )
        reason = (
            "exited"
            if st is None
            else "zombie (exited, not yet reaped)"
            if st.state == "Z"
            else "exiting (memory released)"
        )
        row: Row = {
            "t": round(tick - self.t0, 4),
            "pid": pid,
            "role": role.name,
            "worker": role.worker,
            "state": st.state if st else None,
            "tier": "gone",
            "missing": True,
            "reason": reason,
            "read_t": None,
        }
        row.update(dict.fromkeys(_CHEAP_FIELDS + _PSS_FIELDS))
        return row

    def _thread_rows(self, tick: float) -> list[Row]:
        """CPU seconds per thread of the main process, named by the OS thread name."""
        rows = []
        for tid in procfs.thread_ids(self.root):
            st = procfs.read_stat(self.root, tid)
            if st is not None:
                rows.append({"t": round(tick - self.t0, 4), "tid": tid, "name": st.comm, "cpu_s": st.cpu_s})
        return rows

    def system_row(self, tick: float) -> Row:
        """The tick's row of the ``system`` table: /dev/shm, MemAvailable, the memory cgroup's
        charge and OOM kills and the machine's OOM kills (now and then), the sampler's CPU time,
        the processes followed."""
        shm = procfs.dev_shm_used()
        avail = charged = kills = machine_kills = cache = None
        others: cgroup.Others | None = None
        if self.cgroup is not None and self.root in self._alive:
            # Every tick, not once a second: a job that moves itself into a cgroup as it starts
            # (cgexec) is seen there before it can allocate much (one small read, ~19 us).
            entered = self.cgroup
            self.cgroup = self.cgroup.followed(self.root, round(tick - self.t0, 4))
            if self.cgroup is not entered:
                self.cgroup_others, self._next_others = None, tick  # another cgroup: read it now
            if tick >= self._next_others:
                self._next_others = tick + cgroup.OTHERS_INTERVAL_S
                others = cgroup.others(self.cgroup.where, {*self._started, os.getpid()})
                if self.cgroup_others is None or others.rss_bytes >= self.cgroup_others.rss_bytes:
                    self.cgroup_others = others
        if tick >= self._next_meminfo:
            self._next_meminfo = tick + self.settings.mem_available_interval_s
            avail = procfs.mem_available()
            if self.cgroup is not None:
                charged, kills = cgroup.charge(self.cgroup.where)
                cache = cgroup.file_cache(self.cgroup.where)  # memory.stat: ~25 us
            machine_kills = cgroup.machine_oom_kills()
        return {
            "t": round(tick - self.t0, 4),
            "dev_shm_mb": None if shm is None else shm / MB,
            "mem_available_mb": None if avail is None else avail / MB,
            "cgroup_mb": None if charged is None else charged / MB,
            "cgroup_oom_kills": kills,
            # Of that charge, the page cache of files: reclaimed before the OOM killer acts.
            "cgroup_file_cache_mb": None if cache is None else cache / MB,
            "machine_oom_kills": machine_kills,  # machine-wide (record.limit: whose, if the job's)
            # The other processes in the job's cgroup and their RSS summed (cgroup.others), now and then.
            "cgroup_others": None if others is None else others.processes,
            "cgroup_others_mb": None if others is None else others.rss_bytes / MB,
            "sampler_cpu_s": self.cpu_s,
            "processes": len(self._alive),
        }


def denied_reason(denied: procfs.Denied, own_uid: int) -> str:
    """A row's reason for a process whose memory map the kernel refused memprobe (running as
    ``own_uid``): whose process it is. Starts with :data:`memprobe.core.vocabulary.DENIED_REASON`."""
    me = f"memprobe runs as uid {own_uid}"
    if denied.uids is None:
        return f"{DENIED_REASON} ({me})"
    real, effective = denied.uids
    if effective != own_uid:
        setuid = f", started by uid {real}: a set-user-ID program" if real != effective else ""
        return f"{DENIED_OTHER_USER} (uid {effective}{setuid}); {me}"
    return (
        f"{DENIED_REASON}: the process is not dumpable (it changed its uids or called "
        f"prctl(PR_SET_DUMPABLE, 0)); {me}"
    )
