"""The reading side of ``memprobe.mark()`` (:mod:`memprobe.record.marks`, the writing side, is
imported by the job and its workers): :class:`MarkReader` tails the run's mark file while the
job runs and turns its lines into the progress table's cumulative items and batches.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

from memprobe.core.text import printable
from memprobe.probe.sampler import Row


class MarkReader:
    """Tails a mark file: ``<monotonic s> <n> <pid>`` lines, a torn last line kept for later."""

    def __init__(self, path: Path, t0: float, *, from_end: bool = False) -> None:
        self.path = path
        self.t0 = t0
        self.offset = 0
        if from_end:
            with contextlib.suppress(OSError):
                self.offset = path.stat().st_size
        self._buf = b""
        self.items = 0
        self.batches = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.ignored = 0  # lines that are not marks (written by something else than memprobe.mark)
        self.first_ignored: str | None = None

    def poll(self) -> list[Row]:
        """New marks as one cumulative progress row (or none)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        self.offset += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        seen = False
        for line in lines:
            parts = line.split()
            try:
                mono, n = float(parts[0]), int(parts[1])
            except (IndexError, ValueError):
                mono, n = math.nan, -1
            if not (math.isfinite(mono) and n >= 0):  # NaN would become a time no table can join on
                if line.strip():
                    self.ignored += 1
                    if self.first_ignored is None:
                        self.first_ignored = printable(line[:80].decode("utf-8", "replace"))
                continue
            t = round(mono - self.t0, 4)
            self.items += n
            self.batches += 1
            self.first_t = t if self.first_t is None else self.first_t
            self.last_t = t if self.last_t is None else max(self.last_t, t)
            seen = True
        if not seen:
            return []
        return [{"t": self.last_t, "items": self.items, "batches": self.batches, "epoch": None}]

    def note(self) -> str | None:
        """What was ignored, in words (for the terminal), or None."""
        if not self.ignored:
            return None
        return (
            f"memprobe: {printable(str(self.path))}: {self.ignored:,} line(s) ignored that are not marks "
            f"('<monotonic seconds> <items> <pid>', as memprobe.mark() writes them), the first: "
            f"'{self.first_ignored}'; items/s count the {self.batches:,} marks read"
        )
