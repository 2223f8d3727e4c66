"""The children lists of the sampler's walk of a tree, read again only when a pid was allocated.

Every process and thread created where memprobe can see it takes a pid from memprobe's pid
namespace (one in a nested namespace too), and /proc/loadavg's last field is the last pid
allocated there: while it is unchanged, no process of the tree has a child it did not have at the
last walk. Reading each process's children file at every tick was 13 % of a tick of 301
processes (cProfile, ``benchmarks/bench_wide_sampler.py --ticks 16 --widths 300 --profile``);
a process or thread created anywhere in the namespace moves the cursor, and the tree is walked
as before.
"""

from __future__ import annotations

from collections.abc import Callable


def last_pid() -> int | None:
    """The last pid allocated in memprobe's pid namespace, or ``None`` if unreadable."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


class ChildrenLists:
    """One walk's children lists (:meth:`children`), the last walk's kept when no pid was
    allocated between the two walks' starts (see the module doc)."""

    def __init__(self) -> None:
        self._cursor: int | None = None  # last_pid() at the start of the latest walk
        self._reuse = False
        self._kids: dict[int, list[int]] = {}  # pid -> its children at the latest walk
        self._next: dict[int, list[int]] = {}

    def begin(self, *, fresh: bool) -> None:
        """A walk starts (``fresh``: read every list whatever the cursor). The cursor is read
        before the walk: a fork during it moves the cursor, and the next walk reads."""
        cursor = last_pid()
        self._reuse = not fresh and cursor is not None and cursor == self._cursor
        self._cursor = cursor
        self._next = {}

    def end(self) -> None:
        """The walk is over: its lists (of the processes it visited) are the ones to keep."""
        self._kids = self._next

    def children(self, pid: int, read: Callable[[int], list[int]]) -> list[int]:
        """``pid``'s children: the last walk's list when it may be kept, else ``read(pid)``."""
        kids = self._kids.get(pid) if self._reuse else None
        if kids is None:
            kids = read(pid)
        self._next[pid] = kids
        return kids
