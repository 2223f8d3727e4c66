"""Give each process in a run's tree a role people can read: main, worker k, or a helper."""

from __future__ import annotations

from dataclasses import dataclass

from memprobe.core.vocabulary import (
    FORKSERVER,
    MAIN,
    OTHER,
    RESOURCE_TRACKER,
    SPAWN_STARTING,
    WORKER_STARTING,
    is_helper,
    is_resource_tracker,
    worker_role,
)
from memprobe.probe import procfs

TORCH_WORKER_COMM = "pt_data_worker"


@dataclass(frozen=True)
class Role:
    name: str  # "main", "worker 0", "forkserver", "resource tracker", "spawn (starting)", "other"
    worker: int = -1  # worker index, -1 for non-workers

    @property
    def is_worker(self) -> bool:
        return self.worker >= 0

    @property
    def is_helper(self) -> bool:
        return is_helper(self.name)


class RoleBook:
    """Remembers the role of every pid seen in a run.

    The loader process tells the supervisor its worker pids in order (``set_workers``); that is
    authoritative. Before it arrives, a ``pt_data_worker`` gets a provisional index in order of
    appearance, so a worker is never shown as "other".
    """

    def __init__(self, main_pid: int) -> None:
        self.main_pid = main_pid
        self._explicit: dict[int, int] = {}
        self._provisional: dict[int, int] = {}
        self._fixed: dict[int, Role] = {}

    def set_workers(self, pids: list[int]) -> None:
        for index, pid in enumerate(pids):
            self._explicit[pid] = index
            self._fixed.pop(pid, None)

    def role(self, pid: int, comm: str, ppid: int | None = None) -> Role:
        if pid == self.main_pid:
            return Role(MAIN)
        if pid in self._explicit:
            return Role(worker_role(self._explicit[pid]), self._explicit[pid])
        # comm before any remembered role: a worker sampled before torch renamed it is one now.
        if comm == TORCH_WORKER_COMM:
            index = self._provisional.setdefault(pid, len(self._provisional))
            return Role(worker_role(index), index)
        if pid in self._fixed:
            return self._fixed[pid]
        if ppid is not None and self._fixed.get(ppid, Role("")).name == FORKSERVER:
            # Forked by the forkserver, not yet renamed: it inherited the server's cmdline.
            return Role(WORKER_STARTING)
        return self._classify_by_cmdline(pid)

    def _classify_by_cmdline(self, pid: int) -> Role:
        cmd = " ".join(procfs.read_cmdline(pid))
        if is_resource_tracker(cmd):
            role = Role(RESOURCE_TRACKER)
        elif "multiprocessing.forkserver" in cmd:
            role = Role(FORKSERVER)
        elif "multiprocessing.spawn" in cmd or "--multiprocessing-fork" in cmd:
            # A spawn worker before torch renames it; re-resolved on every tick.
            return Role(SPAWN_STARTING)
        else:
            # Not remembered: a helper sampled between fork and exec still shows its parent's
            # cmdline, and gets its real role once it has exec'd.
            return Role(OTHER)
        self._fixed[pid] = role  # helpers keep their role: they exec once and stay
        return role
