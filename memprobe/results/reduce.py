"""A long run's tables read back in bounded memory: each series reduced to the ticks that matter.

A recording samples every process every 0.2 s: 72 hours of 64 processes are 83 million sample
rows, more than the analysis can hold. A run with more than :data:`REDUCE_ABOVE_ROWS` rows in a
table (:data:`SYSTEM_REDUCE_ABOVE_ROWS` in ``system``: :func:`reduce_above`) is therefore read
in two streamed passes over its Parquet file: the first chooses the ticks to keep (a row group's
columns it needs, :data:`READ_ROWS` rows at a time), the second reads only the rows at those
ticks (a column of a row group at a time). The full data stays in the Parquet file; a run below
the limit is read whole, exactly as before.

Kept, for every run reduced (whole ticks: every process's row at a kept time, so totals summed
across processes at one time stay right):

* the run's first and last tick, the first tick of each of :data:`BUCKETS` equal slices of it,
  and in ``samples`` the first PSS round of each slice and each process's first exact reading in
  each of its ``EXACT_TICKS / processes`` slices;
* the ticks around the times the run's record names (:func:`moments`: milestones, each process's
  start and end, where the last third of its life begins): the last at or before, the first after;
* ``samples``: each process's first and last tick, its first and last exact reading, and the
  ticks of its largest and smallest RSS, PSS, USS and estimated USS (its peaks and the start and
  end of its growth are read as recorded);
* the other tables: in each slice, the ticks of each numeric column's largest and smallest value
  (the lowest available memory, the most in /dev/shm).

What it costs: the kept ticks, at most ``2 x BUCKETS + EXACT_TICKS + 26 x processes`` for
``samples``; times the processes alive at each, that is the rows analysed, whatever the run's
length (measured: 143,233 sample rows kept of 1,151,937 for 1 h of 64 processes; 8,233 of
215,998 for 4 h of 3).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import numpy as np
import pandas as pd

from memprobe.results.parquet import parquet_groups, read_parquet
from memprobe.results.schema import check_table

if TYPE_CHECKING:
    import pyarrow as pa

REDUCE_ABOVE_ROWS = 200_000  # a run's rows in one table beyond which its series are reduced
# The system table (the machine's: one row per tick) is reduced from 20,000 rows a run (1.1 h at
# the default interval of 0.2 s): read whole up to 200,000 rows (11 h) it cost the finish of 8 h x
# 64 processes ~10 MB more than of 1 h (144,000 rows: 7.4 MB as pandas, and what the analysis and
# the page derive from it). Reduced it keeps at most (1 + 2 x its numeric columns) x BUCKETS ticks
# and the ticks around the run's moments: about what 20,000 rows are, whatever the job's length.
SYSTEM_REDUCE_ABOVE_ROWS = 20_000
BUCKETS = 500  # equal slices of a reduced run
# Exact readings kept of a reduced run's processes, shared between them: each process's first one
# in each of EXACT_TICKS // processes slices (its growth is measured on its exact readings).
EXACT_TICKS = 2000
# samples: each process's extremes of these (the largest and the smallest) keep their tick
SAMPLE_VALUES = ("rss_mb", "pss_mb", "uss_mb", "uss_est_mb")


@dataclass
class _Span:
    """One run of a table as first read: its rows and time range."""

    rows: int = 0
    t0: float = np.inf
    t1: float = -np.inf
    pids: set[int] = field(default_factory=set)


@dataclass
class _Ticks:
    """The ticks kept of one reduced run, gathered chunk by chunk."""

    span: _Span
    first: np.ndarray = field(default_factory=lambda: np.full(BUCKETS, np.inf))
    first_exact: np.ndarray = field(default_factory=lambda: np.full(BUCKETS, np.inf))
    # pid -> its first exact reading in each of its slices
    own_exact: dict[int, np.ndarray] = field(default_factory=dict)
    # (key, column, "max"/"min") -> (value, t): a process's (or a slice's) extremes
    extremes: dict[tuple, tuple[float, float]] = field(default_factory=dict)
    # times the run's record names (moments()): the ticks around each
    moments: np.ndarray = field(default_factory=lambda: np.zeros(0))
    before: np.ndarray = field(default_factory=lambda: np.zeros(0))
    after: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        self.before = np.full(len(self.moments), -np.inf)
        self.after = np.full(len(self.moments), np.inf)

    def around(self, t: np.ndarray) -> None:
        """Note the ticks in ``t`` nearest each moment: the last at or before, the first after."""
        if not len(self.moments) or not len(t):
            return
        ticks = np.unique(t)
        i = np.searchsorted(ticks, self.moments, side="right")
        has_before, has_after = i > 0, i < len(ticks)
        self.before[has_before] = np.maximum(self.before[has_before], ticks[i[has_before] - 1])
        self.after[has_after] = np.minimum(self.after[has_after], ticks[i[has_after]])

    def bucket(self, t: np.ndarray, buckets: int | None = None) -> np.ndarray:
        buckets = buckets or BUCKETS
        width = (self.span.t1 - self.span.t0) / buckets or 1.0
        return np.clip(((t - self.span.t0) / width).astype(np.int64), 0, buckets - 1)

    def exact(self, pid: int, t: np.ndarray) -> None:
        buckets = max(10, EXACT_TICKS // max(1, len(self.span.pids)))
        firsts = self.own_exact.setdefault(pid, np.full(buckets, np.inf))
        np.minimum.at(firsts, self.bucket(t, buckets), t)

    def extreme(self, key: tuple, value: float, t: float, larger: bool) -> None:
        old = self.extremes.get(key)
        if old is None or (value > old[0] if larger else value < old[0]) or (value == old[0] and t < old[1]):
            self.extremes[key] = (value, t)

    def times(self) -> np.ndarray:
        chosen = {self.span.t0, self.span.t1}  # the run's first and last tick
        for firsts in (self.first, self.first_exact, self.before, self.after, *self.own_exact.values()):
            chosen.update(float(t) for t in firsts[np.isfinite(firsts)])
        chosen.update(t for _, t in self.extremes.values())
        return np.array(sorted(chosen), dtype=float)


def load_table(
    path: Path, table: str, root: Path, moments: dict[str, list[float]], *, name_as: Path | None = None
) -> pd.DataFrame:
    """The table in ``path`` (a file of the folder ``root``): read whole
    (:func:`~memprobe.results.parquet.read_parquet`) when no run has more than
    :data:`REDUCE_ABOVE_ROWS` rows in it, else with each such run reduced (see the module), its
    values checked as a whole table's are, a problem named as ``name_as``'s (by default
    ``path``'s); ``moments``: for each run, the times its record names (:func:`moments`)."""

    def read_whole(p: Path) -> pd.DataFrame:
        return read_parquet(p, root)

    try:
        spans = _spans(path)
    except (ValueError, TypeError, OverflowError):
        # Values no memprobe wrote (a pid of inf or text, a damaged folder): read whole, where
        # they are refused naming the file and the column, whatever the table's length.
        return read_whole(path)
    long = {run for run, span in spans.items() if span.rows > reduce_above(table)}
    if not long:
        return read_whole(path)
    ticks = {
        run: _Ticks(spans[run], moments=np.array(sorted(set(moments.get(run, ()))), dtype=float))
        for run in long
    }
    names = _column_names(path)
    if table == "samples" and "pid" not in names:
        return read_whole(path)  # refused there, naming the column
    values = (
        [c for c in SAMPLE_VALUES if c in names]
        if table == "samples"
        else [c for c in names if c not in ("run_id", "t", "pid")]
    )
    wanted = (
        ["run_id", "t", "pid", "tier", "missing", *values] if table == "samples" else ["run_id", "t", *values]
    )
    for frame in _frames(parquet_groups(path, wanted)):
        for run, rows in frame[frame["run_id"].isin(long)].groupby("run_id", sort=False):
            (_choose_samples if table == "samples" else _choose_system)(ticks[str(run)], rows, values)
    keep = {run: t.times() for run, t in ticks.items()}
    parts = list(parquet_groups(path, where=lambda key: _kept(key, keep)))
    return check_table(name_as or path, _to_pandas(parts), table)


READ_ROWS = 65_536  # rows of a row group made pandas at once (a long table's groups are large)


def _frames(groups: Iterator[pa.Table]) -> Iterator[pd.DataFrame]:
    """Each group's rows as pandas, :data:`READ_ROWS` at a time (what is chosen from them does not
    depend on where they are cut: every choice is the least, the largest or the earliest)."""
    for group in groups:
        for start in range(0, group.num_rows, READ_ROWS):
            yield group.slice(start, READ_ROWS).to_pandas()


def reduce_above(table: str) -> int:
    """A run's rows in ``table`` beyond which they are read reduced."""
    return min(REDUCE_ABOVE_ROWS, SYSTEM_REDUCE_ABOVE_ROWS) if table == "system" else REDUCE_ABOVE_ROWS


def _spans(path: Path) -> dict[str, _Span]:
    spans: dict[str, _Span] = {}
    for frame in _frames(parquet_groups(path, ["run_id", "t", "pid"])):
        if "t" not in frame.columns or "run_id" not in frame.columns or frame.empty:
            continue  # not a table memprobe wrote: read whole, where it is refused with its reason
        for run, rows in frame.groupby("run_id", sort=False):
            span = spans.setdefault(str(run), _Span())
            span.rows += len(rows)
            span.t0, span.t1 = min(span.t0, float(rows["t"].min())), max(span.t1, float(rows["t"].max()))
            if "pid" in rows:
                span.pids.update(int(p) for p in rows["pid"].unique())
    return spans


def _column_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    with open(path, "rb") as f:  # an open file, not a path: see memprobe.results.gather
        return list(pq.ParquetFile(f).schema_arrow.names)


def moments(meta: dict) -> list[float]:
    """The times a run's record (meta.json) names: its milestones, and each process's start,
    first and last sample, end, first and last exact reading, and where the last third of its
    life begins (whether its memory levelled off is judged from there)."""
    times = list((meta.get("milestones") or {}).values())
    for p in meta.get("processes") or []:
        if isinstance(p, dict):
            keys = ("start_t", "first_t", "last_t", "end_t", "first_pss_t", "last_pss_t")
            times += [p.get(k) for k in keys]
            first, last = p.get("first_t"), p.get("last_t")
            if _number(first) and _number(last):
                times.append(last - (last - first) / 3)
    return [float(t) for t in times if _number(t)]


def _number(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _choose_samples(ticks: _Ticks, rows: pd.DataFrame, values: list[str]) -> None:
    t = rows["t"].to_numpy(float)
    ticks.around(t)
    np.minimum.at(ticks.first, ticks.bucket(t), t)
    exact = (rows["tier"] == "pss").to_numpy(bool) & ~rows["missing"].fillna(False).astype(bool).to_numpy()
    np.minimum.at(ticks.first_exact, ticks.bucket(t[exact]), t[exact])
    by_pid = rows.groupby("pid", sort=False)["t"]
    for pid, lo, hi in zip(by_pid.min().index, by_pid.min(), by_pid.max(), strict=True):
        ticks.extreme((pid, "t", "min"), lo, lo, larger=False)
        ticks.extreme((pid, "t", "max"), hi, hi, larger=True)
    if exact.any():
        by_pid = rows[exact].groupby("pid", sort=False)["t"]
        for pid, times in by_pid:
            ticks.exact(int(pid), times.to_numpy(float))
            ticks.extreme((pid, "exact", "min"), times.min(), times.min(), larger=False)
            ticks.extreme((pid, "exact", "max"), times.max(), times.max(), larger=True)
    _extremes(ticks, rows, "pid", values)


def _choose_system(ticks: _Ticks, rows: pd.DataFrame, values: list[str]) -> None:
    t = rows["t"].to_numpy(float)
    ticks.around(t)
    buckets = ticks.bucket(t)
    np.minimum.at(ticks.first, buckets, t)
    numeric = [
        c
        for c in values
        if pd.api.types.is_numeric_dtype(rows[c]) and not pd.api.types.is_bool_dtype(rows[c])
    ]
    _extremes(ticks, rows.assign(_bucket=buckets), "_bucket", numeric)


def _extremes(ticks: _Ticks, rows: pd.DataFrame, key: str, values: list[str]) -> None:
    """Note, for each ``key`` (a process, a slice), the tick of each column's largest and
    smallest value in ``rows`` (the earliest of equal ones)."""
    for column in values:
        known = rows[[key, column, "t"]].dropna(subset=[column])
        if known.empty:
            continue
        for larger in (False, True):
            # the least (largest) value, and of equal ones the earliest: whatever the rows' order
            ordered = known.sort_values([column, "t"], ascending=[not larger, True], kind="stable")
            for k, value, t in ordered.drop_duplicates(key, keep="first").itertuples(index=False, name=None):
                ticks.extreme((k, column, "max" if larger else "min"), float(value), float(t), larger)


def _kept(key: pa.Table, keep: dict[str, np.ndarray]) -> pa.Array:
    """Which rows of a group (its ``run_id`` and ``t``) to read: those of a run not reduced, and
    of a reduced run those at its kept ticks."""
    import pyarrow as pa
    import pyarrow.compute as pc

    run_id, t = key.column("run_id"), key.column("t")
    mask = pc.invert(pc.is_in(run_id, value_set=pa.array(list(keep), run_id.type)))
    for run, times in keep.items():
        at = pc.and_(pc.equal(run_id, run), pc.is_in(t, value_set=pa.array(times, pa.float64())))
        mask = pc.or_(mask, at)
    return mask


def _to_pandas(parts: list[pa.Table]) -> pd.DataFrame:
    import pyarrow as pa

    if not parts:
        return pd.DataFrame()
    table = pa.concat_tables(parts)
    del parts[:]  # one copy at a time: the kept rows as Arrow, then as pandas
    return table.to_pandas()
