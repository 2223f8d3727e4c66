"""A results folder's rows gathered from JSON lines into Parquet, in memory that does not grow
with the job's length, and read back.

When the runs end, every run's JSON-lines rows of a table go into one Parquet file of the folder
(``samples.parquet``, ``system.parquet``, ``progress.parquet``, ``threads.parquet``; a ``run_id``
column tells the runs apart; ``runs.parquet`` holds one row per run record) and the JSON lines
are removed (:func:`consolidate`). The lines are parsed :data:`GATHER_ROWS` at a time and written
in row groups sized to the table (:func:`group_bytes`); chunks that type a column differently are
joined under one widened schema. :func:`run_frame` reads the rows of a run still going; a gathered table is read by
:mod:`memprobe.results.parquet` (a long one reduced: :mod:`memprobe.results.reduce`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import pandas as pd

from memprobe.core.errors import ResultsWriteError
from memprobe.core.text import escape_surrogates
from memprobe.results import reduce
from memprobe.results.files import (
    iter_jsonl,
    new_file,
    read_json,
    read_jsonl,
    run_dirs,
    write_atomic,
)
from memprobe.results.parquet import parquet_groups

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

PARQUET_TABLES = ("samples", "system", "progress", "threads")  # the tables gathered into Parquet


def _write_parquet_atomic(df: pd.DataFrame, path: Path) -> None:
    # An open file, not a path: Arrow cannot take a path that is not UTF-8 (a folder named with
    # other bytes), Python's open() can.
    write_atomic(path, lambda f: df.to_parquet(f, index=False))


def consolidate(root: Path) -> None:
    """Gather every run's JSON-lines rows into one Parquet file per table, then drop the lines.

    Streamed: the lines are read once, :data:`GATHER_ROWS` at a time, and written as they come
    (:func:`_gather_table`), so the memory it needs does not grow with the job's length. Safe to
    repeat after a failure part-way (a full disk): a run whose rows are already in a table's
    Parquet file is not read again from its JSON lines."""
    dirs = run_dirs(root)
    metas = [read_json(d / "meta.json", root) for d in dirs]
    for table in PARQUET_TABLES:
        _gather_table(root, table, dirs)
    _write_parquet_atomic(pd.DataFrame([_flat_meta(m) for m in metas]), root / "runs.parquet")
    for d in dirs:
        for table in PARQUET_TABLES:
            (d / f"{table}.jsonl").unlink(missing_ok=True)


# Rows of JSON lines parsed at once: ~7 MB of Python objects. Parsed 20,000 at a time (~30 MB)
# they left pymalloc's arenas pinned by a few objects that outlive a chunk (caches, lazily
# imported modules): after gathering 1 h x 64 processes, 95 arenas (99 MB) held 30 MB of objects
# and 66 MB of free pools, which Python keeps and no Arrow or numpy buffer can use, so the reading
# back and the analysis stood on them (the finish's peak RSS 389-396 MB). At 5,000: 50 arenas, 17
# MB free, peak 355 MB (docs/performance.md). The row groups do not depend on it (group_bytes).
GATHER_ROWS = 5_000


def jsonl_chunks(path: Path, root: Path | None = None, size: int | None = None) -> Iterator[list[dict]]:
    """The rows of a JSON-lines file of the results folder ``root`` (:func:`iter_jsonl`),
    ``size`` (:data:`GATHER_ROWS`) at a time; nothing when the file does not exist."""
    size = size or GATHER_ROWS
    rows: list[dict] = []
    for row in iter_jsonl(path, root):
        rows.append(row)
        if len(rows) >= size:
            yield rows
            rows = []
    if rows:
        yield rows


def _table_chunks(root: Path, table: str, dirs: list[Path]) -> Iterator[pa.Table]:
    """A table's rows in chunks: those already gathered (a gathering stopped part-way), then
    every other run's JSON lines (:func:`_run_chunks`)."""
    path = root / f"{table}.parquet"
    done: set[str] = set()
    if path.exists():
        for group in parquet_groups(path):
            if "run_id" in group.column_names:
                done.update(group.column("run_id").unique().to_pylist())
            yield group
    for d in dirs:
        if d.name not in done:
            yield from _run_chunks(d, table)


def _run_chunks(run_dir: Path, table: str) -> Iterator[pa.Table]:
    """One run's JSON lines of ``table`` in chunks, each typed as pandas types it (:func:`run_frame`)."""
    import pyarrow as pa

    for rows in jsonl_chunks(run_dir / f"{table}.jsonl", run_dir.parents[1]):
        df = pd.DataFrame(rows)
        df.insert(0, "run_id", escape_surrogates(run_dir.name))
        yield pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)


def _gather_table(root: Path, table: str, dirs: list[Path]) -> None:
    """Write ``<table>.parquet`` from :func:`_table_chunks` (see :func:`_write_chunks`)."""
    sources = [root / f"{table}.parquet", *(d / f"{table}.jsonl" for d in dirs)]
    _write_chunks(_table_chunks(root, table, dirs), root / f"{table}.parquet", group_bytes(sources))


def _write_chunks(chunks: Iterator[pa.Table], final: Path, row_group_bytes: int = 0) -> None:
    """Write ``final`` (Parquet) from ``chunks``, one chunk in memory at a time.

    The JSON lines are compact (a row leaves out its empty fields), so a chunk can lack a column
    or type it otherwise (all empty: null; ints where another chunk has floats). A chunk that fits
    the file's columns is written into it (a missing column as nulls, ints as floats); one that
    does not starts another spool file; at the end the spool files are joined into one schema."""
    import pyarrow.parquet as pq

    spools: list[tuple[Path, pa.Schema]] = []  # each spool file and its chunks' schema
    with contextlib.ExitStack() as open_spool:
        try:
            writer: pq.ParquetWriter | None = None
            group = _RowGroup(row_group_bytes)
            for chunk in chunks:
                fitted = _conform(chunk, writer.schema) if writer is not None else None
                if fitted is None:
                    if writer is not None:
                        group.write(writer)
                    open_spool.close()
                    spool, sink = new_file(final, f"{len(spools)}.spool")  # never a name left there
                    spools.append((spool, chunk.schema))
                    open_spool.enter_context(sink)  # a file, not a path: see _write_parquet_atomic
                    writer = open_spool.enter_context(pq.ParquetWriter(sink, chunk.schema))
                    fitted = _conform(chunk, writer.schema)
                assert writer is not None and fitted is not None
                group.add(fitted, writer)
            if writer is not None:
                group.write(writer)
            open_spool.close()
            schema = _unified([s for _, s in spools])
            if not spools:
                _write_parquet_atomic(pd.DataFrame(), final)
            elif len(spools) == 1:  # the usual case: every chunk fitted the first one's columns
                os.replace(spools[0][0], final)
            else:
                write_atomic(
                    final, lambda tmp: _join_spools([p for p, _ in spools], schema, tmp, row_group_bytes)
                )
        except OSError as exc:
            raise ResultsWriteError(final, exc) from exc
        finally:
            open_spool.close()
            for spool, _ in spools:
                spool.unlink(missing_ok=True)


# The most Arrow data per Parquet row group written (group_bytes): ~240,000 sample rows.
# Whoever opens a Parquet file holds its footer, which describes every row group: 26.6 KB of
# memory per group of the samples' 32 columns, with or without column statistics (measured:
# pq.ParquetFile opened ten times on a 1,000-group file), so groups of a fixed size made it grow
# with the job's length (72 h of 64 processes: 1,037 groups of 16 MB, ~27 MB). A group is held
# whole while it is written, during the gathering, whose peak is ~150 MB below the analysis's at
# 64 processes; it is read a slice or a column at a time (memprobe.results.reduce). So from ~2.5
# GB of JSON lines (~6 h of 64 processes) the samples are ~370 groups (a 500th of the JSON lines
# each; their Arrow data is ~0.74 of them: 369 groups at 8 h x 64), ~10 MB of footer, whatever
# the length up to ~32 GB (~80 h of 64).
GROUP_BYTES = 64 << 20


# Row groups a gathered table aims at (of MAX_GROUPS-th of its JSON lines each).
MAX_GROUPS = 500
# The least Arrow data of a row group, whatever the chunks parsed (GATHER_ROWS): ~20,000 sample
# rows, the groups a short table always had.
LEAST_GROUP_BYTES = 5 << 20


def group_bytes(sources: list[Path]) -> int:
    """The least size of the row groups a table gathered from ``sources`` (its JSON lines, and
    the part gathered before) is written in: a :data:`MAX_GROUPS`-th of their bytes, at least
    :data:`LEAST_GROUP_BYTES`, at most :data:`GROUP_BYTES`. In bytes, not chunks parsed: only a
    long, wide job pays for larger groups, where they save more footer than they cost."""
    size = 0
    for path in sources:
        with contextlib.suppress(OSError):
            size += path.stat().st_size
    return min(GROUP_BYTES, max(LEAST_GROUP_BYTES, size // MAX_GROUPS))


class _RowGroup:
    """Chunks held until they make one row group of at least ``nbytes``."""

    def __init__(self, nbytes: int) -> None:
        self.least = nbytes
        self.chunks: list[pa.Table] = []
        self.nbytes = 0

    def add(self, chunk: pa.Table, writer: pq.ParquetWriter) -> None:
        self.chunks.append(chunk)
        self.nbytes += chunk.nbytes
        if self.nbytes >= self.least:
            self.write(writer)

    def write(self, writer: pq.ParquetWriter) -> None:
        """Write the chunks held as one row group (every chunk has the writer's schema)."""
        import pyarrow as pa

        table = pa.concat_tables(self.chunks) if self.chunks else None
        if table is not None and table.num_rows:  # a table gathered before with no row gives 0
            writer.write_table(table, row_group_size=table.num_rows)
        self.chunks, self.nbytes = [], 0


def _join_spools(spools: list[Path], schema: pa.Schema, out: BinaryIO, row_group_bytes: int) -> None:
    import pyarrow.parquet as pq

    with pq.ParquetWriter(out, schema) as writer:
        group = _RowGroup(row_group_bytes)
        for spool in spools:
            for part in parquet_groups(spool):
                fitted = _conform(part, schema)
                assert fitted is not None  # the unified schema takes every part
                group.add(fitted, writer)
        group.write(writer)


def _conform(chunk: pa.Table, schema: pa.Schema) -> pa.Table | None:
    """``chunk`` with ``schema``'s columns and types (a missing column as nulls, ints and nulls
    cast up), or None when it has a column ``schema`` lacks or a type it cannot take."""
    import pyarrow as pa

    if chunk.schema.equals(schema):
        return chunk
    if any(name not in schema.names for name in chunk.column_names):
        return None
    columns = []
    for field in schema:
        if field.name not in chunk.column_names:
            columns.append(pa.nulls(len(chunk), field.type))
            continue
        column = chunk.column(field.name)
        if column.type != field.type:
            if column.null_count == len(column):  # nothing in it yet: any type takes it
                column = pa.nulls(len(column), field.type)
            elif _widened(column.type, field.type) != field.type:
                return None
            else:
                column = column.cast(field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _widened(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type that holds both ``a``'s and ``b``'s values: nulls take any type, ints and floats
    become floats, anything else mixed becomes text."""
    import pyarrow as pa

    if a == b or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if any(f(a) for f in numeric) and any(f(b) for f in numeric):
        return pa.float64() if pa.types.is_floating(a) or pa.types.is_floating(b) else pa.int64()
    return pa.large_string()


def _unified(schemas: list[pa.Schema]) -> pa.Schema:
    """One schema for every spool file: columns in order of first appearance, types widened."""
    import pyarrow as pa

    types: dict[str, pa.DataType] = {}
    for schema in schemas:
        for field in schema:
            types[field.name] = _widened(types[field.name], field.type) if field.name in types else field.type
    return pa.schema(list(types.items()))


def unconsolidated(root: Path) -> bool:
    """Whether some run's rows are still only in JSON lines (gathering stopped: a full disk, a
    killed memprobe)."""
    return any((d / f"{t}.jsonl").exists() for d in run_dirs(root) for t in PARQUET_TABLES)


LIVE_GATHER_BYTES = 32 * 2**20  # JSON lines of a run still going beyond which they are streamed


def run_frame(run_dir: Path, table: str, moments: list[float] | None = None) -> pd.DataFrame:
    """One run's rows of ``table`` not gathered yet (a session still being written): read
    whole, or, beyond :data:`LIVE_GATHER_BYTES` of JSON lines, gathered into a temporary
    Parquet file and read from it as a gathered table is (a long run reduced: memprobe.results.reduce);
    the folder is left as it is."""
    import tempfile

    path = run_dir / f"{table}.jsonl"
    try:
        large = path.stat().st_size > LIVE_GATHER_BYTES
    except OSError:
        large = False
    if large:
        with tempfile.TemporaryDirectory(prefix="memprobe-") as tmp:
            gathered = Path(tmp) / f"{table}.parquet"
            _write_chunks(_run_chunks(run_dir, table), gathered, group_bytes([path]))
            return reduce.load_table(gathered, table, Path(tmp), {run_dir.name: moments or []}, name_as=path)
    rows = read_jsonl(path, run_dir.parents[1])
    df = pd.DataFrame(rows)
    if not df.empty:
        df.insert(0, "run_id", escape_surrogates(run_dir.name))
    return df


def _flat_meta(meta: dict) -> dict:
    spec = meta.get("spec", {})
    flat = {k: v for k, v in meta.items() if not isinstance(v, (dict, list))}
    for section in ("dataset", "loader"):
        for k, v in (spec.get(section) or {}).items():
            flat[f"{section}.{k}"] = v
    for k in ("backend", "mode", "workers"):
        flat.setdefault(k, spec.get(k))
    return flat
