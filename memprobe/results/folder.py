"""Results on disk: written as the run goes, so a crash loses at most the last second.

Layout of a results folder::

    manifest.json          schema version, kind, name, environment, status, timing, writer
    scenario.yaml          the scenario file as run (``memprobe run`` only)
    runs/<run_id>/meta.json      the run's spec and outcome (written via a temp file + rename)
    runs/<run_id>/*.jsonl        append-only while running: samples, system, progress, events
    samples.parquet  system.parquet  progress.parquet  threads.parquet  runs.parquet
                           (all runs, one table each, a run_id column)
    summary.json           one entry per run: the figures and the verdict
    report.html

While a run is going, rows are appended to JSON-lines files and flushed on every write; a
reader tolerates a torn last line. When the runs end, the tables are consolidated into Parquet
(again temp file + rename) and the JSON-lines files removed.

:class:`ResultsFolder` is the one owner of a folder's life: it creates the folder (one naming
rule for every kind), writes the manifest (the same fields for ``run``, ``record``, ``watch`` and
``profile()``), finishes it, and opens it again, refusing a schema version it cannot read.
Older versions are read by mapping their keys (:func:`upgrade_meta`), never rewritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pandas as pd

from memprobe.core.errors import ResultsWriteError, SchemaVersionError, UsageError
from memprobe.core.safe_read import display_path, open_regular, read_regular
from memprobe.core.text import escape_surrogates
from memprobe.probe import procfs
from memprobe.results import reduce
from memprobe.results.schema import check_manifest, check_meta, check_table, upgrade_recorded

if TYPE_CHECKING:  # analysis reads results; results only names its summaries' type
    import pyarrow as pa

    from memprobe.core.summary import RunSummary

SCHEMA_VERSION = 2
# Every schema version this memprobe reads, and what it changed. A folder of an older version is
# read by mapping its keys (upgrade_meta); it is never rewritten in the new shape.
SCHEMA_VERSIONS = {
    1: "run milestones (warm, done, ...) under the key 'marks' of meta.json",
    2: "run milestones under 'milestones'; every manifest has kind, description, started, finished",
}
KINDS = ("scenario", "record", "watch", "profile")  # what wrote a folder: run, record, watch, profile()
DEFAULT_BASE = Path("reports")
TABLES = ("samples", "system", "progress", "events", "threads")
PARQUET_TABLES = ("samples", "system", "progress", "threads")
# What memprobe reads of a results folder, which may come from someone else: regular files
# inside it, reached without following a symbolic link (see memprobe.core.safe_read), at most:
MAX_JSON_BYTES = 64 << 20  # manifest.json, meta.json, summary.json (a record of 100,000 processes: ~50 MB)
MAX_TABLE_BYTES = 16 << 30  # a Parquet table or a run's JSON-lines file
MAX_LINE_BYTES = 1 << 20  # one JSON line (a row is a few hundred bytes)
IN_FOLDER = "a regular file inside the results folder"


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` then rename ``tmp`` to ``path``: readers see the old file or the new
    one, never half. On failure the temporary file is removed and a :class:`ResultsWriteError`
    (a full disk, say) names the file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        # A name left there (a killed memprobe, or a folder from someone else whose temporary
        # name is a symbolic link to ~/.bashrc) is removed, not written through.
        tmp.unlink(missing_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ResultsWriteError(path, exc) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`write_atomic`): the report pages. A lone
    surrogate left in it (see :func:`_escaped`) is written as an escape, never a traceback."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8", errors="backslashreplace"))


def _json_writer(data: Any) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=_json_default)
            f.flush()
            os.fsync(f.fileno())

    return write


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, _json_writer(data))


def write_json_exclusive(path: Path, data: Any) -> bool:
    """Create ``path`` with JSON ``data``, whole, unless it exists: False then. Two processes
    racing for one file: exactly one gets it (a hard link never replaces an existing name)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        _json_writer(data)(tmp)
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError as exc:
        raise ResultsWriteError(path, exc) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def open_in_folder(root: Path, path: Path, limit: int = MAX_TABLE_BYTES) -> BinaryIO:
    """``path``, a file of the results folder ``root``, opened for reading in binary: the one
    way memprobe opens what is in a results folder. A regular file inside ``root`` of at most
    ``limit`` bytes, reached without following a symbolic link, or a :class:`UsageError` naming
    it; a FIFO or device is refused without waiting. A missing file raises FileNotFoundError."""
    return open_regular(path, limit=limit, root=root, allowed=IN_FOLDER)


_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _escaped(value: Any) -> Any:
    """``value`` (parsed JSON) with every lone surrogate in its strings escaped: a command line
    or path with bytes that are not UTF-8 is saved as ``"\\udcff"``, and shown as ``\\xff``."""
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    if isinstance(value, dict):
        return {escape_surrogates(k): _escaped(v) for k, v in value.items()}
    return value


def _parse_json(data: bytes) -> Any:
    value = json.loads(data)
    return _escaped(value) if _ESCAPED_SURROGATE.search(data) else value


def iter_jsonl(path: Path, root: Path | None = None) -> Iterator[dict]:
    """Rows of a JSON-lines file of the results folder ``root`` (by default the file's own
    folder), one at a time; a torn or corrupt line (a crash mid-write) or a line that is not an
    object is skipped. A line longer than :data:`MAX_LINE_BYTES` (a row is a few hundred bytes)
    is no torn row but a file that is not memprobe's, say gigabytes of zeros: a
    :class:`UsageError`, at once. A missing file has no rows."""
    try:
        f = open_in_folder(root or path.parent, path)
    except FileNotFoundError:
        return
    with f:
        number = 0
        while line := f.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise UsageError(
                    f"{display_path(path)}: line {number:,}: longer than {MAX_LINE_BYTES:,} bytes; allowed: "
                    "JSON lines of at most that (memprobe's rows are a few hundred bytes)"
                )
            try:
                row = _parse_json(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                yield row


def read_jsonl(path: Path, root: Path | None = None) -> list[dict]:
    """Every row of a JSON-lines file (see :func:`iter_jsonl`)."""
    return list(iter_jsonl(path, root))


class RunWriter:
    """Appends one run's rows to its JSON-lines files; safe to call from several threads."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Open for the run's life; close() closes them.
        self._files = {name: open(run_dir / f"{name}.jsonl", "a", encoding="utf-8") for name in TABLES}  # noqa: SIM115

    def append(self, table: str, rows: list[dict]) -> None:
        if not rows:
            return
        text = "".join(json.dumps(r, default=_json_default) + "\n" for r in rows)
        with self._lock:
            f = self._files[table]
            try:
                f.write(text)
                f.flush()
            except OSError as exc:
                raise ResultsWriteError(Path(f.name), exc) from exc

    def write_meta(self, meta: dict) -> None:
        write_json_atomic(self.dir / "meta.json", meta)

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                # A full disk: the flush in close fails; the rows written before are kept.
                with contextlib.suppress(OSError):
                    f.close()


def read_json(path: Path, root: Path) -> dict:
    """A JSON object memprobe wrote in the results folder ``root``, or a :class:`UsageError`
    naming the file (a hand-edited, truncated, foreign or special file, a link): never a
    traceback. Lone surrogates in its strings are escaped (see :func:`_escaped`)."""
    name = display_path(path)
    try:
        data = _parse_json(read_regular(path, limit=MAX_JSON_BYTES, root=root, allowed=IN_FOLDER))
    except FileNotFoundError:
        raise UsageError(f"{name}: cannot read: no such file") from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        reason = escape_surrogates(str(exc) or type(exc).__name__)[:200]
        raise UsageError(f"{name}: not a memprobe JSON file (damaged or truncated: {reason})") from None
    if not isinstance(data, dict):
        raise UsageError(
            f"{name}: not a memprobe JSON file (expected an object, found {type(data).__name__})"
        )
    return data


def check_run_records(root: Path) -> None:
    """Every run record of ``root`` holds what a summary needs, of its type and range, or a
    :class:`UsageError` names the record and the field (a meta.json edited by hand): for
    `memprobe report` and `compare` (see :mod:`memprobe.results.schema`)."""
    for d in run_dirs(root):
        check_meta(d / "meta.json", read_json(d / "meta.json", root))


def run_dirs(root: Path) -> list[Path]:
    base = root / "runs"
    if not base.is_dir():
        return []
    dirs = [d for d in base.iterdir() if (d / "meta.json").exists()]
    index = {d: read_json(d / "meta.json", root).get("index", 0) for d in dirs}
    return sorted(dirs, key=lambda d: (index[d] if isinstance(index[d], int) else 0, d.name))


def _write_parquet_atomic(df: pd.DataFrame, path: Path) -> None:
    def write(tmp: Path) -> None:
        # An open file, not a path: Arrow cannot take a path that is not UTF-8 (a folder named
        # with other bytes), Python's open() can.
        with open(tmp, "wb") as f:
            df.to_parquet(f, index=False)

    write_atomic(path, write)


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


GATHER_ROWS = 20_000  # rows of JSON lines parsed at once: ~30 MB of Python objects


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
    """One run's JSON lines of ``table`` in chunks, each typed as pandas types it (:func:`_run_frame`)."""
    import pyarrow as pa

    for rows in jsonl_chunks(run_dir / f"{table}.jsonl", run_dir.parents[1]):
        df = pd.DataFrame(rows)
        df.insert(0, "run_id", escape_surrogates(run_dir.name))
        yield pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)


def _gather_table(root: Path, table: str, dirs: list[Path]) -> None:
    """Write ``<table>.parquet`` from :func:`_table_chunks` (see :func:`_write_chunks`)."""
    _write_chunks(_table_chunks(root, table, dirs), root / f"{table}.parquet")


def _write_chunks(chunks: Iterator[pa.Table], final: Path) -> None:
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
            for chunk in chunks:
                fitted = _conform(chunk, writer.schema) if writer is not None else None
                if fitted is None:
                    open_spool.close()
                    spool = final.with_name(f".{final.name}.{len(spools)}.spool")
                    spools.append((spool, chunk.schema))
                    sink = open_spool.enter_context(open(spool, "wb"))  # see _write_parquet_atomic
                    writer = open_spool.enter_context(pq.ParquetWriter(sink, chunk.schema))
                    fitted = _conform(chunk, writer.schema)
                assert writer is not None and fitted is not None
                writer.write_table(fitted)
            open_spool.close()
            schema = _unified([s for _, s in spools])
            if not spools:
                _write_parquet_atomic(pd.DataFrame(), final)
            elif len(spools) == 1:  # the usual case: every chunk fitted the first one's columns
                os.replace(spools[0][0], final)
            else:
                write_atomic(final, lambda tmp: _join_spools([p for p, _ in spools], schema, tmp))
        except OSError as exc:
            raise ResultsWriteError(final, exc) from exc
        finally:
            open_spool.close()
            for spool, _ in spools:
                spool.unlink(missing_ok=True)


def _join_spools(spools: list[Path], schema: pa.Schema, out: Path) -> None:
    import pyarrow.parquet as pq

    with open(out, "wb") as f, pq.ParquetWriter(f, schema) as writer:
        for spool in spools:
            for group in parquet_groups(spool):
                fitted = _conform(group, schema)
                assert fitted is not None  # the unified schema takes every part
                writer.write_table(fitted)


def parquet_groups(path: Path, columns: list[str] | None = None) -> Iterator[pa.Table]:
    """The row groups of a Parquet file memprobe wrote, one at a time (``columns`` only, those of
    them it has), or a :class:`UsageError` naming a file that cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open_in_folder(path.parent, path) as f:  # an open file: see _write_parquet_atomic
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            wanted = None if columns is None else [c for c in columns if c in names]
            for i in range(parquet.num_row_groups):
                yield parquet.read_row_group(i, columns=wanted)
    except (OSError, pa.ArrowException) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UsageError(
            f"{display_path(path)}: cannot be read (truncated or damaged: {escape_surrogates(reason)}); what is "
            "in the other files is intact"
        ) from None


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


def _read_parquet(path: Path, root: Path) -> pd.DataFrame:
    """A table memprobe consolidated, or a :class:`UsageError` naming it (truncated, damaged, or
    not memprobe's: every table of a results folder has a run_id and a t column)."""
    with open_in_folder(root, path) as f:  # an open file: see _write_parquet_atomic
        try:
            df = pd.read_parquet(f)
        except Exception as exc:  # noqa: BLE001  (Arrow raises many types on a damaged file; all mean the same)
            reason = escape_surrogates((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:200]
            raise UsageError(
                f"{display_path(path)}: cannot be read (truncated or damaged: {reason}); what is in "
                "the other files is intact"
            ) from None
    missing = [c for c in ("run_id", "t") if c not in df.columns] if len(df.columns) else []
    if missing:
        raise UsageError(f"{display_path(path)}: not a memprobe table (no {', '.join(missing)} column)")
    return check_table(path, df, path.name.removesuffix(".parquet"))


def unconsolidated(root: Path) -> bool:
    """Whether some run's rows are still only in JSON lines (gathering stopped: a full disk, a
    killed memprobe)."""
    return any((d / f"{t}.jsonl").exists() for d in run_dirs(root) for t in PARQUET_TABLES)


LIVE_GATHER_BYTES = 32 * 2**20  # JSON lines of a run still going beyond which they are streamed


def _run_frame(run_dir: Path, table: str, moments: list[float] | None = None) -> pd.DataFrame:
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
            _write_chunks(_run_chunks(run_dir, table), gathered)
            return reduce.load_table(
                gathered,
                table,
                lambda p: _read_parquet(p, p.parent),
                {run_dir.name: moments or []},
                check=lambda df: check_table(path, df, table),
            )
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


# -- the folder: create, manifest, finish, open ---------------------------------------------------


def default_out_dir(name: str, base: Path = DEFAULT_BASE) -> Path:
    """A new, empty ``<base>/<name>-<UTC time>``, created here: two sessions started in the same
    second get ``...Z`` and ``...Z-2`` instead of refusing each other."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        out = base / f"{name}-{stamp}{'' if n == 1 else f'-{n}'}"
        try:
            base.mkdir(parents=True, exist_ok=True)
            out.mkdir()
            return out
        except FileExistsError:
            if not base.is_dir():
                raise UsageError(
                    f"{base}: exists and is not a folder; choose a results folder (-o)"
                ) from None
        except OSError as exc:
            raise UsageError(
                f"{out}: cannot create the results folder: {exc.strerror}; choose one (-o)"
            ) from None
    raise UsageError(f"{base}: 1,000 results folders named {name}-{stamp}*; choose one (-o)")


def check_output(out: Path) -> None:
    """``out`` can take a new session's results: it does not exist yet, or is an empty folder."""
    try:
        if out.is_dir():
            if (out / "manifest.json").exists():
                raise UsageError(
                    f"{out}: already holds results; choose another output folder (-o) or remove it"
                )
            if any(out.iterdir()):
                raise UsageError(
                    f"{out}: a folder that is not empty; allowed: a new or empty folder for the results"
                )
        elif out.exists() or out.is_symlink():
            raise UsageError(
                f"{out}: exists and is not a folder; allowed: a new or empty folder for the results"
            )
    except OSError as exc:
        raise UsageError(f"{out}: cannot use it for results: {exc.strerror}") from None


def make_output(out: Path) -> Path:
    """Check ``out`` (:func:`check_output`), create it and return it."""
    check_output(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the results folder: {exc.strerror}") from None
    return out


def writer_identity() -> dict:
    """Who writes a results folder: `memprobe report` tells a session still going from one whose
    memprobe was killed (pid numbers are reused; with the start time they are not)."""
    me = procfs.read_stat(os.getpid())
    return {
        "pid": os.getpid(),
        "start_ticks": me.start_ticks if me else None,
        "boot_id": (procfs._read("/proc/sys/kernel/random/boot_id") or "").strip() or None,
    }


def writer_alive(manifest: dict) -> bool:
    """Whether the memprobe process that wrote ``manifest`` is still running (on this machine)."""
    writer = manifest.get("writer") or {}
    pid, ticks, boot = writer.get("pid"), writer.get("start_ticks"), writer.get("boot_id")
    if not isinstance(pid, int) or boot != writer_identity()["boot_id"]:
        return False
    st = procfs.read_stat(pid)
    return st is not None and st.start_ticks == ticks and st.state not in ("Z", "X")


def check_schema(path: Path, manifest: dict) -> int:
    """The schema version of ``manifest`` (read from ``path``) if this memprobe reads it, else a
    :class:`SchemaVersionError` naming the file, the version found and the versions it reads."""
    found = manifest.get("schema_version")
    version = found if isinstance(found, int) and not isinstance(found, bool) else None
    if version is not None and version in SCHEMA_VERSIONS:
        return version
    readable = ", ".join(map(str, SCHEMA_VERSIONS))
    if "schema_version" not in manifest:
        what = "no schema_version (not a results folder memprobe wrote)"
    elif version is not None and version > SCHEMA_VERSION:
        what = f"schema version {version}, written by a newer memprobe (upgrade memprobe to read it)"
    else:
        what = f"schema version {found!r}, which no memprobe writes"
    raise SchemaVersionError(f"{display_path(path)}: {what}; this memprobe reads schema versions {readable}")


def upgrade_meta(meta: dict, version: int) -> dict:
    """A run record (meta.json) of schema ``version`` in the current shape: version 1 named the
    run's milestones ``marks``, the word :func:`memprobe.mark` uses for counting items."""
    if version < 2 and "marks" in meta and "milestones" not in meta:
        return {("milestones" if k == "marks" else k): v for k, v in meta.items()}
    return meta


class ResultsFolder:
    """The one owner of a results folder: its creation, its manifest (the same fields whether
    ``run``, ``record``, ``watch`` or ``profile()`` wrote it, told apart by ``kind``), its end, and
    reading it back with the schema check. Used by :mod:`memprobe.run.session`,
    :mod:`memprobe.record.recording` and :mod:`memprobe.run.api`."""

    def __init__(self, root: Path, manifest: dict) -> None:
        self.root = root
        self.manifest = manifest

    @classmethod
    def create(
        cls,
        out: Path | None,
        *,
        kind: str,
        name: str,
        description: str,
        environment: dict,
        runs: Sequence[str],
        scenario_path: str | None = None,
        scenario_text: str | None = None,
        base: Path = DEFAULT_BASE,
    ) -> ResultsFolder:
        """A new folder with its manifest, status ``running``: ``out`` (new or empty), or
        ``<base>/<name>-<UTC time>`` when ``out`` is None. The manifest is created exclusively:
        of two sessions given one folder, one gets it and the other a clear error, never a mix."""
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}; allowed: {', '.join(KINDS)}")
        root = default_out_dir(name, base) if out is None else make_output(out)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "scenario": name,
            "scenario_path": scenario_path,
            "description": description,
            "status": "running",
            "started": time.time(),
            "finished": None,
            "environment": environment,
            "runs": list(runs),
            "writer": writer_identity(),
        }
        if not write_json_exclusive(root / "manifest.json", manifest):
            raise UsageError(f"{root}: already holds results; choose another output folder (-o) or remove it")
        if scenario_text is not None:
            write_text_atomic(root / "scenario.yaml", scenario_text)
        return cls(root, manifest)

    @classmethod
    def open(cls, root: str | Path) -> ResultsFolder:
        """A folder written before, or a :class:`UsageError`: not a results folder, a damaged
        manifest, or a schema version this memprobe does not read (:class:`SchemaVersionError`)."""
        root = Path(root)
        path = root / "manifest.json"
        if not path.exists():
            raise UsageError(f"{display_path(root)}: not a memprobe results folder (no manifest.json)")
        manifest = read_json(path, root)
        check_schema(path, manifest)
        check_manifest(path, manifest)
        return cls(root, manifest)

    @property
    def schema_version(self) -> int:
        return int(self.manifest["schema_version"])

    def save(self) -> None:
        write_json_atomic(self.root / "manifest.json", self.manifest)

    def finish(self, status: str, **fields: Any) -> None:
        """Say how the session ended (``complete`` or ``interrupted``) and when, then gather
        the runs' rows into Parquet. Safe to repeat (a full disk part-way)."""
        self.manifest.update(status=status, finished=time.time(), **fields)
        self.save()
        consolidate(self.root)

    def metas(self) -> list[dict]:
        """Every run's record, in run order, in the current schema's shape, its values checked
        (see :mod:`memprobe.results.schema`)."""
        metas = []
        for d in run_dirs(self.root):
            meta = upgrade_recorded(upgrade_meta(read_json(d / "meta.json", self.root), self.schema_version))
            check_meta(d / "meta.json", meta)
            metas.append(meta)
        return metas

    def load(self) -> ResultSet:
        return ResultSet.of(self)

    def write_summary(self, summaries: Sequence[RunSummary]) -> None:
        """summary.json: the session's facts from the manifest and one entry per run."""
        m = self.manifest
        write_json_atomic(
            self.root / "summary.json",
            {
                "schema_version": SCHEMA_VERSION,
                "kind": m.get("kind"),
                "scenario": m.get("scenario"),
                "status": m.get("status"),
                "started": m.get("started"),
                "finished": m.get("finished"),
                "environment": m.get("environment"),
                "runs": [s.to_dict() for s in summaries],
            },
        )

    def finish_abandoned(self) -> bool:
        """Mark a session whose memprobe was killed (SIGKILL, the OOM killer, a crash) as such:
        status ``interrupted``, the run it was in ``interrupted`` too, its rows gathered into
        Parquet. Its processes are gone already (each run's process ends its group when memprobe
        ends). False, and nothing changed, while that memprobe still runs."""
        root, manifest = self.root, self.manifest
        if manifest.get("status") != "running" or writer_alive(manifest):
            return False
        ended = _last_write(root) or time.time()
        finished = []
        for d in run_dirs(root):
            meta = read_json(d / "meta.json", root)
            if meta.get("status") == "running":
                meta.update(
                    status="interrupted",
                    error={
                        "type": "Interrupted",
                        "message": "memprobe ended while this run was going (killed?); what was "
                        "measured until then is kept",
                    },
                )
                write_json_atomic(d / "meta.json", meta)
            else:
                finished.append(meta.get("run_id"))
        # Killed after its last run had ended, while saving: nothing was cut short.
        whole = finished == list(manifest.get("runs") or [None])
        manifest.update(
            status="complete" if whole else "interrupted",
            finished=manifest.get("finished") or ended,
            ended="memprobe ended before finishing this session (killed?); 'memprobe report' finished "
            "the folder from what was saved",
        )
        self.save()
        consolidate(root)
        return True


def read_scenario_copy(root: Path) -> str | None:
    """The scenario file as run, copied into the folder (``memprobe run`` only), else None.
    Shown as it is: a byte that is not UTF-8 becomes U+FFFD."""
    from memprobe.run.scenario_file import MAX_SCENARIO_CHARS

    try:
        data = read_regular(root / "scenario.yaml", limit=MAX_SCENARIO_CHARS, root=root, allowed=IN_FOLDER)
    except FileNotFoundError:
        return None
    return data.decode("utf-8", "replace")


def _last_write(root: Path) -> float | None:
    """When a file of ``root`` was last written (following no link, reading no file; one that
    goes away meanwhile is passed over)."""
    times = []
    for d, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(d, name))
                if stat.S_ISREG(st.st_mode):
                    times.append(st.st_mtime)
    return max(times, default=None)


class ResultSet:
    """A results folder loaded back: everything the analysis and the report need."""

    def __init__(
        self,
        root: Path,
        manifest: dict,
        metas: list[dict],
        tables: dict[str, pd.DataFrame],
        scenario_text: str | None = None,
    ) -> None:
        self.root = root
        self.manifest = manifest
        self.metas = metas
        self.tables = tables
        self.scenario_text = scenario_text  # scenario.yaml as run (`memprobe run` only)

    @classmethod
    def load(cls, root: str | Path) -> ResultSet:
        """Everything saved in ``root``, opened with :meth:`ResultsFolder.open` (the schema
        version is checked; older run records are read in the current shape)."""
        return cls.of(ResultsFolder.open(root))

    @classmethod
    def of(cls, folder: ResultsFolder) -> ResultSet:
        root = folder.root
        metas = folder.metas()
        moments = {str(m.get("run_id")): reduce.moments(m) for m in metas}
        tables = {t: cls._load_table(root, t, moments) for t in PARQUET_TABLES}
        tables["events"] = pd.concat(
            [_run_frame(d, "events") for d in run_dirs(root)] or [pd.DataFrame()], ignore_index=True
        )
        return cls(root, folder.manifest, metas, tables, read_scenario_copy(root))

    @staticmethod
    def _load_table(root: Path, table: str, moments: dict[str, list[float]] | None = None) -> pd.DataFrame:
        frames = []
        path = root / f"{table}.parquet"
        done: set[str] = set()
        if path.exists():  # a long run's series reduced to what the analysis needs (memprobe.results.reduce)
            frames.append(
                reduce.load_table(
                    path,
                    table,
                    lambda p: _read_parquet(p, root),
                    moments or {},
                    check=lambda df: check_table(path, df, table),
                )
            )
            if "run_id" in frames[0]:  # a table with no rows has no columns either
                done = set(frames[0]["run_id"].unique())
        # Rows not yet consolidated (a crash, or a run still going) live in JSON lines; a run
        # already in the Parquet file (consolidation stopped between the two) is not read twice.
        frames += [
            check_table(d / f"{table}.jsonl", _run_frame(d, table, (moments or {}).get(d.name)), table)
            for d in run_dirs(root)
            if d.name not in done
        ]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def run_table(self, table: str, run_id: str) -> pd.DataFrame:
        df = self.tables.get(table, pd.DataFrame())
        if df.empty or "run_id" not in df:
            return pd.DataFrame()
        return df[df["run_id"] == run_id].reset_index(drop=True)
