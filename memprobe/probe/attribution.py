"""A worker's copied pages attributed to the dataset's paths: the object map joined with the pages.

Each copied page's bytes go to the objects on it, by the bytes each object has on that page (an
object over several pages counts its part on each copied one); the rest of a copied page holds
no object of the dataset (free space, the interpreter's objects, other data) and is counted
outside it, as are the copied pages without any of the dataset's objects. The parts therefore
add up to the copied total exactly: ``sum(paths) + outside == copied``, with ``outside`` split
into what lies on pages the dataset's objects share and what lies elsewhere.

:func:`attribute_workers` is what the run's process calls with its workers alive: every worker's
pages read first (the walk then writes reference counts, which would make the parent copy pages
it shares), then the walk, then the join; the result as summary.json keeps it, in MB.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from memprobe.core.system import PAGE_SIZE
from memprobe.probe.copied_pages import copied_pages
from memprobe.probe.object_map import MAX_OBJECTS, MAX_SECONDS, ObjectMap, walk

MB = 1e6
KEEP_PATHS = 40  # paths kept per run in summary.json: the largest copied, then the largest held


@dataclass(frozen=True)
class Attribution:
    """Copied bytes per path of the map (``per_path[i]`` for ``paths[i]``) and outside it."""

    per_path: np.ndarray
    copied: int
    outside_on_dataset_pages: int  # copied pages' bytes that lie between the dataset's objects
    outside_elsewhere: int  # copied pages without any of the dataset's objects

    @property
    def outside(self) -> int:
        return self.outside_on_dataset_pages + self.outside_elsewhere


def attribute(omap: ObjectMap, pages: np.ndarray, page_size: int = PAGE_SIZE) -> Attribution:
    """The copied bytes of each path; ``pages``: the copied pages' numbers, sorted, unique."""
    pages = np.asarray(pages, dtype=np.uint64)
    ps = np.uint64(page_size)
    starts, ends = omap.starts, omap.ends
    if not len(starts) or not len(pages):
        return Attribution(np.zeros(len(omap.paths)), len(pages) * page_size, 0, len(pages) * page_size)
    first = starts // ps
    last = (ends - np.uint64(1)) // ps

    def copied(page: np.ndarray) -> np.ndarray:
        i = np.searchsorted(pages, page)
        return (i < len(pages)) & (pages[np.minimum(i, len(pages) - 1)] == page)

    same = first == last
    hit_first, hit_last = copied(first), copied(last)
    on_first = np.where(same, ends - starts, (first + np.uint64(1)) * ps - starts).astype(np.float64)
    on_last = np.where(same, 0, ends - last * ps).astype(np.float64)
    # Whole pages between the first and the last: those of them copied, counted by two searches.
    inner = np.searchsorted(pages, last, side="left") - np.searchsorted(pages, first, side="right")
    inner = np.where(same, 0, np.maximum(inner, 0)).astype(np.float64)
    by_object = on_first * hit_first + on_last * hit_last + inner * page_size
    per_path = np.bincount(omap.path_ids, weights=by_object, minlength=len(omap.paths))
    copied_total = len(pages) * page_size
    # The copied pages with any of the dataset's bytes on them.
    touched = np.unique(np.concatenate([first[hit_first], last[hit_last]]))
    spans = ~same & (inner > 0)
    inner_pages = int(inner[spans].sum())  # an object's inner pages hold nothing else
    dataset_pages = len(touched) + inner_pages
    on_pages = dataset_pages * page_size - float(per_path.sum())
    return Attribution(
        per_path,
        copied_total,
        round(max(on_pages, 0.0)),
        copied_total - dataset_pages * page_size,
    )


def attribute_workers(
    dataset: Any,
    parent: int,
    workers: list[int],
    *,
    max_objects: int = MAX_OBJECTS,
    max_seconds: float = MAX_SECONDS,
    frames: bool = True,
) -> dict[str, Any]:
    """Each worker's copied MB by the dataset's paths, as summary.json keeps it.

    Every worker's pages are read before the walk, which writes to the parent's pages."""
    t0 = time.monotonic()
    found = [(k, pid, copied_pages(pid, parent, frames=frames)) for k, pid in enumerate(workers)]
    read_s = time.monotonic() - t0
    omap = walk(dataset, max_objects=max_objects, max_seconds=max_seconds)
    t1 = time.monotonic()
    joined = [(k, pid, c, attribute(omap, c.pages)) for k, pid, c in found if c is not None]
    join_s = time.monotonic() - t1
    held = omap.bytes_per_path()
    together = sum((a.per_path for *_, a in joined), np.zeros(len(omap.paths)))
    keep = _kept(together, held)
    return {
        "paths": [omap.paths[i] for i in keep],
        "held_mb": [round(held[i] / MB, 3) for i in keep],
        "workers": [
            {
                "worker": k,
                "pid": pid,
                "method": c.method,
                "copied_mb": round(a.copied / MB, 3),
                "new_mb": round(c.new_pages * PAGE_SIZE / MB, 3),
                "paths_mb": [round(a.per_path[i] / MB, 3) for i in keep],
                "other_paths_mb": round((a.per_path.sum() - a.per_path[keep].sum()) / MB, 3),
                "outside_on_dataset_pages_mb": round(a.outside_on_dataset_pages / MB, 3),
                "outside_elsewhere_mb": round(a.outside_elsewhere / MB, 3),
            }
            for k, pid, c, a in joined
        ],
        "unread_workers": [pid for _, pid, c in found if c is None],
        "other_paths": len(omap.paths) - len(keep),
        "walk": omap.facts(),
        "pagemap_s": round(read_s, 3),
        "join_s": round(join_s, 3),
    }


def _kept(together: np.ndarray, held: np.ndarray) -> list[int]:
    """The paths summary.json names: the most copied, then the largest held (a never-read
    attribute is worth naming as such), in the walk's order."""
    by_copied = [int(i) for i in np.argsort(-together, kind="stable") if together[i] > 0][: KEEP_PATHS // 2]
    rest = [int(i) for i in np.argsort(-held, kind="stable") if int(i) not in by_copied]
    return sorted(by_copied + rest[: KEEP_PATHS - len(by_copied)])
