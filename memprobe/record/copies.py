"""Which of a recorded job's dataset structures its forked workers copied, read from outside while
they run: the maps ``memprobe.mark_dataset`` saved beside the marks file
(:mod:`memprobe.record.dataset_mark`), joined with the pages of the marking process's forked
children (:func:`memprobe.probe.copied_pages.forked_children`).

A DataLoader's workers end with their epoch (or the job): their pages are read every
:data:`EVERY_S` while they live, or less often where a reading takes long (at most :data:`SHARE`
of the wall time: a reading of 2 workers over 300,000 records took ~0.8 s, so ~8 s apart), and
the latest reading of the latest generation is kept; so the table is the workers' copies up to
that spacing before they ended. The reading and the join run in memprobe's process, not the
job's. Where several processes marked their dataset (the
ranks of a torchrun job), the one whose workers copied the most is kept, and the table says how
many marked it.

Marked or not, every process of the job's tree with forked workers has them read so (unmarked,
within :data:`KINDS_SHARE` of the wall time: every recording pays it), and their copied bytes
are told by where they lie (:data:`memprobe.core.vocabulary.COPY_KINDS`: the heap,
anonymous mappings, file mappings, the stack), what can be seen from outside without the map.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from memprobe.probe.attribution import Joined, attribute, table
from memprobe.probe.copied_pages import copied_pages, forked_children
from memprobe.probe.object_map import ObjectMap
from memprobe.probe.procfs import read_children
from memprobe.record.dataset_mark import SUFFIX

TREE = 256  # processes of the job's tree looked at, at most
MAX_PARENTS = 16  # parents of forked workers kept in the meta, at most
EVERY_S = 2.0  # at most this often; a costly reading is spaced out to SHARE
SHARE = 0.1  # of the wall time, at most, spent reading and joining where a dataset was marked
KINDS_SHARE = 0.01  # where none was (every recording pays it): the sampler's own order of cost


class CopiedStructures:
    """The recorder's side of ``mark_dataset``: maps loaded once, workers read every EVERY_S."""

    def __init__(self, marks_file: Path, root: int | None = None) -> None:
        self.marks_file = marks_file
        self.root = root  # the job's first process: its tree's forks read by kind, marked or not
        # Each parent's forked workers' copied bytes by where they lie (KINDS), latest reading.
        self.kinds: dict[int, list[tuple[int, int, dict[str, int]]]] = {}
        self.maps: dict[int, ObjectMap] = {}
        self.refused: dict[str, str] = {}  # a map file that could not be read: why
        self.latest: dict[int, tuple[list[Joined], list[int], float, float]] = {}
        self.next_t = 0.0
        self.cost_s = 0.0

    def poll(self) -> None:
        """Read the marking processes' workers if it is time, or at once when a map was saved
        since the last poll: a reading of the unmarked tree (spaced to :data:`KINDS_SHARE`) had
        put the next one 30 s off, and a 6 s job whose map came after it got no table. Never raises."""
        now = time.monotonic()
        try:
            new = self._load()
        except Exception as exc:  # noqa: BLE001  (memprobe's trouble never reaches the job)
            self.refused["(reading)"] = f"{type(exc).__name__}: {exc}"
            new = False
        if now < self.next_t and not new:
            return
        try:
            for parent in dict.fromkeys([*self.maps, *self._parents()]):
                self._read(parent, self.maps.get(parent))
        except Exception as exc:  # noqa: BLE001  (memprobe's trouble never reaches the job)
            self.refused["(reading)"] = f"{type(exc).__name__}: {exc}"
        took = time.monotonic() - now
        self.cost_s += took
        self.next_t = time.monotonic() + max(EVERY_S, took / (SHARE if self.maps else KINDS_SHARE))

    def _load(self) -> bool:
        """Load the maps saved since the last call; whether there was one."""
        new = False
        for path in self.marks_file.parent.glob(f"{self.marks_file.name}{SUFFIX}*.npz"):
            if str(path) in self.refused:
                continue
            try:
                pid = int(path.name[len(self.marks_file.name) + len(SUFFIX) : -len(".npz")])
                if pid not in self.maps:
                    self.maps[pid] = ObjectMap.load(path)
                    new = True
            except (OSError, ValueError, KeyError) as exc:
                self.refused[str(path)] = f"{type(exc).__name__}: {exc}"
        return new

    def _parents(self) -> list[int]:
        """The processes of the job's tree (breadth first from its root, at most TREE of them)."""
        if self.root is None:
            return []
        out: list[int] = []
        queue = [self.root]
        while queue and len(out) < TREE:
            pid = queue.pop(0)
            out.append(pid)
            queue += read_children(pid, all_threads=False)
        return out

    def _read(self, parent: int, omap: ObjectMap | None) -> None:
        workers = forked_children(parent)
        if not workers:
            return
        t0 = time.monotonic()
        found = [(k, pid, copied_pages(pid, parent, every_kind=True)) for k, pid in enumerate(workers)]
        read_s = time.monotonic() - t0
        self.kinds[parent] = [(k, pid, c.by_kind) for k, pid, c in found if c is not None]
        if omap is None:
            return
        joined = [(k, pid, c, attribute(omap, c.pages)) for k, pid, c in found if c is not None]
        if joined:
            unread = [pid for _, pid, c in found if c is None]
            self.latest[parent] = (joined, unread, read_s, time.monotonic() - t0 - read_s)

    def _most_copied(self, parent: int) -> dict[str, Any]:
        """One marking process's workers (a rank's): the path they copied most, and their total."""
        joined = self.latest[parent][0]
        per_path = np.sum([a.per_path for *_, a in joined], axis=0)
        i = int(per_path.argmax())
        return {
            "parent": parent,
            "path": self.maps[parent].paths[i],
            "path_mb": round(float(per_path[i]) / 1e6, 3),
            "copied_mb": round(sum(a.copied for *_, a in joined) / 1e6, 3),
        }

    def discard(self) -> None:
        """Delete the maps' files (tens of MB for a million records): read, and their table saved."""
        for path in self.marks_file.parent.glob(f"{self.marks_file.name}{SUFFIX}*.npz"):
            with contextlib.suppress(OSError):
                path.unlink()

    def info(self) -> dict[str, Any]:
        """What the run's meta keeps under ``dataset_info``: the table (or why there is none), and
        the copied bytes by kind of every parent of forked workers, marked or not."""
        by_kind = [
            {
                "parent": parent,
                "workers": [
                    {
                        "worker": k,
                        "pid": pid,
                        "kinds_mb": {kind: round(b / 1e6, 3) for kind, b in kinds.items()},
                    }
                    for k, pid, kinds in found
                ],
            }
            for parent, found in sorted(self.kinds.items())[:MAX_PARENTS]
            if found
        ]
        kinds = {"copied_by_kind": by_kind, "copies_reading_s": round(self.cost_s, 3)} if by_kind else {}
        return {**self._table(), **kinds}

    def _table(self) -> dict[str, Any]:
        if not self.latest:
            why = "; ".join(f"{k}: {v}" for k, v in self.refused.items())
            if self.maps and not why:
                why = (
                    "no forked worker of a process that marked its dataset was seen while it ran "
                    "(spawn and forkserver workers copy nothing of it; a job shorter than a reading's spacing)"
                )
            return {"attribution": {"error": why[:500]}} if why else {}
        parent = max(self.latest, key=lambda p: sum(a.copied for *_, a in self.latest[p][0]))
        joined, unread, read_s, join_s = self.latest[parent]
        found = table(self.maps[parent], joined, unread=unread, pagemap_s=read_s, join_s=join_s)
        found["parent"] = parent
        found["marked_by"] = len(self.maps)
        found["by_process"] = [self._most_copied(p) for p in sorted(self.latest)]
        found["reading_cost_s"] = round(self.cost_s, 3)
        return {"attribution": found}
