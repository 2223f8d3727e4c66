"""A page census: a process's private pages, counted on a fixed sample of them.

/proc/PID/pagemap holds one 64-bit entry per virtual page; bit 63 says the page is present and
bit 56 (``PM_MMAP_EXCLUSIVE``, Linux 4.2+, readable without privileges: only the frame numbers
are hidden) that it is mapped by this process alone. That is the page smaps_rollup counts as
private, so the share of exclusive pages on a sample of a process's mappings, times their size,
is their USS. Read for a sample, it costs a fraction of the exact reading's walk of every
page: 64 runs of 32 pages (2,048 entries) take ~0.2 ms where smaps_rollup of a 600 MB process
takes 13-60 ms on the loaded 2-core machine. On a parent of 4 forked workers that had each read
40 % of its 1.5 M records, the census of its exclusive anonymous pages had a standard error of
2.6 % (distinct records: a DataLoader's workers) and 5.7 % (the same records, in order) against
all of them counted, over 30 panels (``python benchmarks/bench_census.py``, 2026-11-25).

The sample is systematic (runs evenly spaced from a random start, over the mappings laid end to
end): at random positions those standard errors were 5.6 % and 17 % (where the copied pages lie
together, a random sample misses or hits them in clumps).

Two strata, each sampled on its own: the private writable mappings without a file (``rw-p``:
the heap, Python's arenas, numpy's buffers), where forked workers copy a parent's pages, and the
mappings of files (libraries), whose pages become shared when another process maps them (a
torchrun launcher's ~60 MB of private torch pages, shared once its ranks import torch: the
estimate from its own counters, which did not move, stayed 40 % high). The population is the
mappings as they were when the panel was drawn; what the process maps later lies outside it (see
:meth:`~memprobe.probe.estimator.ExactPlanner.census`).
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import random
import time
from dataclasses import dataclass

import numpy as np

from memprobe.core.system import PAGE_SIZE

# Runs of pages read per census of the anonymous mappings, and of the file mappings, and their
# length. A read costs ~1.7 µs a run (one pread each) and little per page: 64 runs of 32 pages
# had about the standard error of 128 runs of 16 (2.6 % and 5.7 % against 2.4 % and 6.3 %,
# bench_census.py) at two thirds of the time (0.21 against 0.32 ms).
RUNS = 64
FILE_RUNS = 64  # presence is sparse there: 32 runs left a launcher's file pages 15 MB off (1 SD)
RUN_PAGES = 32
_PRESENT = np.uint64(0x80)  # bit 63, shifted down by 56
_PRESENT_EXCLUSIVE = np.uint64(0x81)  # bits 63 and 56, shifted down by 56
_SHIFT = np.uint64(56)


@dataclass(frozen=True)
class Census:
    """Bytes of the population that are present, and present and mapped by this process alone,
    scaled up from the sample."""

    exclusive: float
    present: float
    # One standard error (bytes) of the change of ``exclusive`` since the panel's first census,
    # and of ``exclusive`` itself: from the differences between neighbouring runs, as for any
    # systematic sample.
    error: float = 0.0
    level_error: float = 0.0


def mappings(maps: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(first page, pages)`` of each private writable mapping without a file, and of each
    mapping of a file, from the text of /proc/PID/maps. The stack and the kernel's areas
    ([vvar], [vdso]) are in neither."""
    anon: list[tuple[int, int]] = []
    files: list[tuple[int, int]] = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        path = fields[5].strip() if len(fields) == 6 else ""
        if path.startswith("/"):
            stratum = files
        elif fields[1] == "rw-p" and path in ("", "[heap]"):
            stratum = anon
        else:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        stratum.append((start // PAGE_SIZE, (end - start) // PAGE_SIZE))
    return anon, files


def systematic_runs(
    mappings: list[tuple[int, int]], *, runs: int = RUNS, run_pages: int = RUN_PAGES, start: float = 0.5
) -> list[tuple[int, int]]:
    """``runs`` runs of ``run_pages`` pages, evenly spaced over the mappings laid end to end
    from ``start`` (in [0, 1), a fraction of the spacing); every page where the mappings hold
    no more than twice the sample. Each run lies within one mapping."""
    sizes = [n for _, n in mappings]
    total = sum(sizes)
    if total <= 2 * runs * run_pages:
        return [m for m in mappings if m[1] > 0]
    ends = []
    acc = 0
    for n in sizes:
        acc += n
        ends.append(acc)
    out = []
    for k in range(runs):
        x = (k + start) * total / runs
        i = bisect.bisect_right(ends, x)
        first, n = mappings[i]
        length = min(run_pages, n)
        offset = min(int(x - (ends[i] - n)), n - length)
        out.append((first + offset, length))
    return out


@dataclass(frozen=True)
class Stratum:
    """One stratum of a panel (the anonymous mappings, or the file mappings): its sample's runs."""

    runs: list[tuple[int, int]]
    scale: float  # bytes of the stratum per sampled page
    complete: bool  # every page of the stratum is in the sample: no sampling error
    starts: np.ndarray  # where each run starts in the entries read

    @property
    def pages(self) -> int:
        return sum(n for _, n in self.runs)


class PagePanel:
    """A fixed sample of one process's pages, read again and again (the same pages: what
    changes between two censuses is what changed in the process, not in the sample)."""

    def __init__(self, pid: int, strata: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]], fd: int):
        """``strata``: (the sample's runs, the stratum's mappings) of each stratum."""
        self.pid = pid
        self.strata: list[Stratum] = []  # the anonymous mappings', then the file mappings'
        for runs, maps in strata:
            population, sampled = sum(n for _, n in maps), sum(n for _, n in runs)
            starts = np.cumsum([0] + [n for _, n in runs[:-1]]) if runs else np.zeros(0, dtype=int)
            self.strata.append(
                Stratum(runs, population / max(sampled, 1) * PAGE_SIZE, sampled >= population, starts)
            )
        self._fd = fd
        self._first: list[np.ndarray] | None = None  # each stratum's exclusive pages per run, first census
        self._last: list[tuple[float, np.ndarray]] = []  # each stratum's (present bytes, runs), latest
        self.files_read_at = -math.inf  # time.monotonic() of the last census that read the file mappings

    @classmethod
    def draw(cls, pid: int, rng: random.Random | None = None) -> PagePanel | None:
        """A new panel over ``pid``'s mappings now; ``None`` if the process is gone or not ours
        to read."""
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                maps = f.read()
            fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        anon, files = mappings(maps)
        rng = rng or random.Random()
        strata = [
            (systematic_runs(anon, runs=RUNS, start=rng.random()), anon),
            (systematic_runs(files, runs=FILE_RUNS, start=rng.random()), files),
        ]
        return cls(pid, strata, fd)

    def read(self, *, files: bool = True) -> Census | None:
        """The census now; ``None`` if the process is gone or its pagemap unreadable.
        ``files=False``: its file mappings as the last census found them (their pages change
        slowly; half the cost)."""
        last: list[tuple[float, np.ndarray]] = []
        try:
            for i, stratum in enumerate(self.strata):
                if i > 0 and not files and len(self._last) == len(self.strata):
                    last.append(self._last[i])
                    continue
                chunks = [os.pread(self._fd, n * 8, first * 8) for first, n in stratum.runs]
                entries = np.frombuffer(b"".join(chunks), dtype=np.uint64) >> _SHIFT
                if len(entries) != stratum.pages:
                    return None  # an exited process's pagemap reads as empty
                mine = (entries & _PRESENT_EXCLUSIVE) == _PRESENT_EXCLUSIVE
                runs = np.add.reduceat(mine, stratum.starts) if len(mine) else np.zeros(0)
                last.append((np.count_nonzero(entries & _PRESENT) * stratum.scale, runs))
        except OSError:
            return None
        self._last = last
        if files:
            self.files_read_at = time.monotonic()
        per_run = [runs for _, runs in last]
        if self._first is None:
            self._first = per_run
        present = sum(p for p, _ in last)
        exclusive = sum(
            float(runs.sum()) * stratum.scale for stratum, runs in zip(self.strata, per_run, strict=True)
        )
        variance = level_variance = 0.0
        for stratum, now, then in zip(self.strata, per_run, self._first, strict=True):
            if not stratum.complete and len(now) > 1:
                variance += _variance((now - then) * stratum.scale)
                level_variance += _variance(now * stratum.scale)
        return Census(
            exclusive=exclusive, present=float(present), error=variance**0.5, level_error=level_variance**0.5
        )

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def _variance(runs: np.ndarray) -> float:
    """The variance of the sum of a systematic sample's runs (bytes each), from the differences
    between neighbours (the estimator that holds where neighbouring runs are alike)."""
    return len(runs) * float(np.sum(np.diff(runs) ** 2)) / (2 * (len(runs) - 1))
