"""Which pages a forked worker copied from its parent, page by page, from /proc/PID/pagemap.

A forked worker starts with its parent's pages, shared. A page it holds alone at an address
where its parent has a page too is a copy (copy-on-access: the worker, or the parent, wrote to
it; in CPython a reference count or the collector's header is enough). Read over the worker's
private writable mappings without a file (``rw-p``: the heap, Python's arenas, numpy's buffers,
as :func:`memprobe.probe.census.mappings` takes them), the parent's entries read at the same
addresses:

* ``frames`` (with CAP_SYS_ADMIN, as root): the page frame (bits 0-54) differs from the
  parent's at the same address, both present;
* ``exclusive`` (without it: the kernel then shows frames as 0): the worker's page is present and
  mapped by it alone (bit 56, ``PM_MMAP_EXCLUSIVE``, Linux 4.2+), the parent's present.

Both count a page the parent copied after the fork (the worker then holds the original alone):
either way there are two copies of it. A page the worker has where its parent has none is new,
not a copy (``new_pages``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from memprobe.core.system import PAGE_SIZE
from memprobe.probe.census import mappings
from memprobe.probe.procfs import read_children

_PRESENT = np.uint64(1 << 63)
_EXCLUSIVE = np.uint64(1 << 56)
_FRAME = np.uint64((1 << 55) - 1)
_CHUNK_PAGES = 1 << 18  # entries read at once: 2 MB of pagemap


@dataclass(frozen=True)
class CopiedPages:
    """A worker's copied pages (page numbers, sorted) and how they were told."""

    pid: int
    pages: np.ndarray
    method: str  # frames | exclusive
    new_pages: int  # present in the worker where its parent has no page
    seconds: float
    by_kind: dict[str, int] = field(
        default_factory=dict
    )  # copied bytes by kind (vocabulary.COPY_KINDS; every_kind=True)

    @property
    def copied_bytes(self) -> int:
        return len(self.pages) * PAGE_SIZE


def regions(maps: str) -> list[tuple[int, int, str]]:
    """``(first page, pages, kind)`` of each private writable mapping of /proc/PID/maps' text."""
    out = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or len(fields[1]) < 4 or fields[1][3] != "p" or "w" not in fields[1]:
            continue
        path = fields[5].strip() if len(fields) == 6 else ""
        kind = (
            "heap"
            if path == "[heap]"
            else "stack"
            if path.startswith("[stack")
            else "file"
            if path.startswith("/")
            else "anonymous"
            if not path
            else None
        )
        if kind is not None:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            out.append((start // PAGE_SIZE, (end - start) // PAGE_SIZE, kind))
    return out


def copied_pages(
    worker: int, parent: int, *, frames: bool = True, every_kind: bool = False
) -> CopiedPages | None:
    """The pages ``worker`` holds as copies of ``parent``'s; ``None`` if either process is gone
    or its pagemap cannot be read. ``frames=False``: told by bit 56 even where frames can be
    read (what a process without CAP_SYS_ADMIN sees). ``every_kind``: every private writable
    mapping read, the copied bytes by kind in ``by_kind`` (``pages`` stays the anonymous ones')."""
    t0 = time.monotonic()
    try:
        with open(f"/proc/{worker}/maps", encoding="utf-8", errors="replace") as f:
            text = f.read()
        ranges = regions(text) if every_kind else [(first, n, "anonymous") for first, n in mappings(text)[0]]
        w_fd = os.open(f"/proc/{worker}/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        p_fd = os.open(f"/proc/{parent}/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        os.close(w_fd)
        return None
    try:
        found: list[np.ndarray] = []
        frames_seen = False
        copied_frames: list[np.ndarray] = []
        new = 0
        by_frames: dict[str, int] = {}
        by_exclusive: dict[str, int] = {}
        for first, n, kind in ranges:
            for at in range(first, first + n, _CHUNK_PAGES):
                count = min(_CHUNK_PAGES, first + n - at)
                w = _read(w_fd, at, count)
                p = _read(p_fd, at, count)
                if w is None or p is None:
                    return None
                w_present = (w & _PRESENT) != 0
                p_present = (p & _PRESENT) != 0
                both = w_present & p_present
                new += int(np.count_nonzero(w_present & ~p_present))
                pages = np.arange(at, at + count, dtype=np.uint64)
                frames_seen = frames_seen or bool(np.any(w[w_present] & _FRAME))
                differ = both & ((w & _FRAME) != (p & _FRAME))
                alone = both & ((w & _EXCLUSIVE) != 0)
                by_frames[kind] = by_frames.get(kind, 0) + int(np.count_nonzero(differ)) * PAGE_SIZE
                by_exclusive[kind] = by_exclusive.get(kind, 0) + int(np.count_nonzero(alone)) * PAGE_SIZE
                if kind in ("heap", "anonymous"):  # the attribution's pages (census.mappings' stratum)
                    copied_frames.append(pages[differ])
                    found.append(pages[alone])
        frames_seen = frames_seen and frames
        chosen = copied_frames if frames_seen else found
        pages = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.uint64)
        return CopiedPages(
            worker,
            pages,
            "frames" if frames_seen else "exclusive",
            new,
            time.monotonic() - t0,
            (by_frames if frames_seen else by_exclusive) if every_kind else {},
        )
    finally:
        os.close(w_fd)
        os.close(p_fd)


def _read(fd: int, first: int, count: int) -> np.ndarray | None:
    try:
        data = os.pread(fd, count * 8, first * 8)
    except OSError:
        return None
    if len(data) != count * 8:
        return None
    return np.frombuffer(data, dtype=np.uint64)


def forked_children(parent: int) -> list[int]:
    """``parent``'s children that are forks of it, not programs it started (an exec'd child lays
    its heap out anew, at a random address): those whose heap starts where the parent's does."""
    heap = _heap_start(parent)
    if heap is None:
        return []
    return [pid for pid in read_children(parent) if _heap_start(pid) == heap]


def _heap_start(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.rstrip().endswith("[heap]"):
                    return int(line.split("-", 1)[0], 16)
    except (OSError, ValueError):
        return None
    return None
