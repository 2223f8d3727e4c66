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
from memprobe.probe.copied_pages import CopiedPages, copied_pages
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
    """The copied bytes of each path; ``pages``: the copied pages' numbers, sorted, unique.

    Page by page: the map's blocks are sorted and do not overlap, so the blocks on page ``p``
    are one run of them, found by two binary searches per copied page (not per object: a
    million-object dataset has tens of thousands of copied pages); each (page, block) pair then
    counts the block's bytes on that page."""
    pages = np.asarray(pages, dtype=np.uint64)
    ps = np.uint64(page_size)
    copied_total = len(pages) * page_size
    if not len(omap.starts) or not len(pages):
        return Attribution(np.zeros(len(omap.paths)), copied_total, 0, copied_total)
    first = omap.starts // ps
    last = (omap.ends - np.uint64(1)) // ps
    lo = np.searchsorted(last, pages, side="left")  # the first block ending on or after the page
    hi = np.searchsorted(first, pages, side="right")  # past the last block starting on or before it
    counts = np.maximum(hi.astype(np.int64) - lo.astype(np.int64), 0)
    pairs = int(counts.sum())
    page = np.repeat(pages, counts)
    block = np.repeat(lo.astype(np.int64) - (np.cumsum(counts) - counts), counts) + np.arange(pairs)
    on_page = np.minimum(omap.ends[block], (page + np.uint64(1)) * ps) - np.maximum(
        omap.starts[block], page * ps
    )
    per_path = np.bincount(
        omap.path_ids[block], weights=on_page.astype(np.float64), minlength=len(omap.paths)
    )
    dataset_pages = int(np.count_nonzero(counts))  # copied pages with any of the dataset's bytes
    return Attribution(
        per_path,
        copied_total,
        round(max(dataset_pages * page_size - float(per_path.sum()), 0.0)),
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
    return table(
        omap,
        joined,
        unread=[pid for _, pid, c in found if c is None],
        pagemap_s=read_s,
        join_s=time.monotonic() - t1,
    )


Joined = tuple[int, int, CopiedPages, Attribution]  # worker number, pid, its pages, their attribution


def table(
    omap: ObjectMap, joined: list[Joined], *, unread: list[int], pagemap_s: float, join_s: float
) -> dict[str, Any]:
    """The workers' attributions as summary.json keeps them (MB, the paths :func:`_kept`)."""
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
        "unread_workers": unread,
        "other_paths": len(omap.paths) - len(keep),
        "walk": omap.facts(),
        "pagemap_s": round(pagemap_s, 3),
        "join_s": round(join_s, 3),
    }


def _kept(together: np.ndarray, held: np.ndarray) -> list[int]:
    """The paths summary.json names: the most copied, then the largest held (a never-read
    attribute is worth naming as such), in the walk's order."""
    by_copied = [int(i) for i in np.argsort(-together, kind="stable") if together[i] > 0][: KEEP_PATHS // 2]
    rest = [int(i) for i in np.argsort(-held, kind="stable") if int(i) not in by_copied]
    return sorted(by_copied + rest[: KEEP_PATHS - len(by_copied)])
