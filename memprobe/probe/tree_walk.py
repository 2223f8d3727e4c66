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
        # pid -> (its children at the latest walk, whether that list has every thread's)
        self._kids: dict[int, tuple[list[int], bool]] = {}
        self._next: dict[int, tuple[list[int], bool]] = {}

    def begin(self) -> None:
        """A walk starts. The cursor is read before it: a fork during the walk moves the
        cursor, and the next walk reads."""
        cursor = last_pid()
        self._reuse = cursor is not None and cursor == self._cursor
        self._cursor = cursor
        self._next = {}

    def end(self, pids: list[int]) -> list[int]:
        """The walk (which found ``pids``, returned) is over: its lists are the ones to keep."""
        self._kids = self._next
        return pids

    def children(
        self, pid: int, read: Callable[[int], list[int]], *, complete: bool, whole: bool
    ) -> list[int]:
        """``pid``'s children: the last walk's list when it may be kept (``whole``: only a list
        with every thread's children), else ``read(pid)``, which has every thread's when
        ``complete``. With no new pid, no thread is new either: a list read whole stays whole."""
        kept = self._kids.get(pid) if self._reuse else None
        if kept is not None and (kept[1] or not whole):
            kids, complete = kept
        else:
            kids = read(pid)
        self._next[pid] = (kids, complete)
        return kids
