"""Results on disk: written as the run goes, so a crash loses at most the last second.

Layout of a results folder::

    manifest.json          schema version, scenario, environment, status, timing
    scenario.yaml          the scenario file as run
    runs/<run_id>/meta.json      the run's spec and outcome (written via a temp file + rename)
    runs/<run_id>/*.jsonl        append-only while running: samples, system, progress, events
    samples.parquet  system.parquet  progress.parquet  threads.parquet  runs.parquet
                           (all runs, one table each, a run_id column)
    summary.json           one entry per run: the figures and the verdict
    report.html

While a run is going, rows are appended to JSON-lines files and flushed on every write; a
reader tolerates a torn last line. When the runs end, the tables are consolidated into Parquet
(again temp file + rename) and the JSON-lines files removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from memprobe.errors import ResultsWriteError, UsageError

SCHEMA_VERSION = 1
TABLES = ("samples", "system", "progress", "events", "threads")
PARQUET_TABLES = ("samples", "system", "progress", "threads")


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` then rename ``tmp`` to ``path``: readers see the old file or the new
    one, never half. On failure the temporary file is removed and a :class:`ResultsWriteError`
    (a full disk, say) names the file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
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
    """Write ``text`` to ``path`` atomically (see :func:`write_atomic`): the report pages."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


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


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file; a torn or corrupt line (a crash mid-write) is skipped."""
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return rows


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


def read_json(path: Path) -> dict:
    """A JSON object memprobe wrote, or a :class:`UsageError` naming the file (a hand-edited,
    truncated or foreign file): never a traceback."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a memprobe JSON file (damaged or truncated: {exc})") from None
    if not isinstance(data, dict):
        raise UsageError(
            f"{path}: not a memprobe JSON file (expected an object, found {type(data).__name__})"
        )
    return data


def check_run_records(root: Path) -> None:
    """Every run record of ``root`` has what a summary needs, or a :class:`UsageError` names the
    record (a meta.json edited by hand): for `memprobe report` and `compare`."""
    for d in run_dirs(root):
        meta = read_json(d / "meta.json")
        spec = meta.get("spec")
        missing = [k for k in ("run_id", "status") if not isinstance(meta.get(k), str)]
        missing += [
            f"spec.{k}"
            for k in ("backend", "mode", "workers", "verdict")
            if not isinstance(spec, dict) or k not in spec
        ]
        if missing:
            raise UsageError(f"{d / 'meta.json'}: not a memprobe run record (no {', '.join(missing)})")


def run_dirs(root: Path) -> list[Path]:
    base = root / "runs"
    if not base.is_dir():
        return []
    dirs = [d for d in base.iterdir() if (d / "meta.json").exists()]
    index = {d: read_json(d / "meta.json").get("index", 0) for d in dirs}
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

    Safe to repeat after a failure part-way (a full disk): a run whose rows are already in a
    table's Parquet file is not read again from its JSON lines."""
    metas = [read_json(d / "meta.json") for d in run_dirs(root)]
    for table in PARQUET_TABLES:
        _write_parquet_atomic(ResultSet._load_table(root, table), root / f"{table}.parquet")
    _write_parquet_atomic(pd.DataFrame([_flat_meta(m) for m in metas]), root / "runs.parquet")
    for d in run_dirs(root):
        for table in PARQUET_TABLES:
            (d / f"{table}.jsonl").unlink(missing_ok=True)


def _read_parquet(path: Path) -> pd.DataFrame:
    """A table memprobe consolidated, or a :class:`UsageError` naming it (truncated, damaged, or
    not memprobe's: every table of a results folder has a run_id and a t column)."""
    import pyarrow as pa  # only where a Parquet file is read: a running session writes JSON lines

    try:
        with open(path, "rb") as f:  # see _write_parquet_atomic
            df = pd.read_parquet(f)
    except (OSError, pa.ArrowException, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UsageError(
            f"{path}: cannot be read (truncated or damaged: {reason}); what is in the other files is intact"
        ) from None
    missing = [c for c in ("run_id", "t") if c not in df.columns] if len(df.columns) else []
    if missing:
        raise UsageError(f"{path}: not a memprobe table (no {', '.join(missing)} column)")
    return df


def unconsolidated(root: Path) -> bool:
    """Whether some run's rows are still only in JSON lines (gathering stopped: a full disk, a
    killed memprobe)."""
    return any((d / f"{t}.jsonl").exists() for d in run_dirs(root) for t in PARQUET_TABLES)


def _run_frame(run_dir: Path, table: str) -> pd.DataFrame:
    rows = read_jsonl(run_dir / f"{table}.jsonl")
    df = pd.DataFrame(rows)
    if not df.empty:
        df.insert(0, "run_id", run_dir.name)
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


class ResultSet:
    """A results folder loaded back: everything the analysis and the report need."""

    def __init__(
        self, root: Path, manifest: dict, metas: list[dict], tables: dict[str, pd.DataFrame]
    ) -> None:
        self.root = root
        self.manifest = manifest
        self.metas = metas
        self.tables = tables

    @classmethod
    def load(cls, root: str | Path) -> ResultSet:
        root = Path(root)
        manifest_path = root / "manifest.json"
        if not manifest_path.exists():
            raise UsageError(f"{root}: not a memprobe results folder (no manifest.json)")
        manifest = read_json(manifest_path)
        metas = [read_json(d / "meta.json") for d in run_dirs(root)]
        tables = {t: cls._load_table(root, t) for t in PARQUET_TABLES}
        tables["events"] = pd.concat(
            [_run_frame(d, "events") for d in run_dirs(root)] or [pd.DataFrame()], ignore_index=True
        )
        return cls(root, manifest, metas, tables)

    @staticmethod
    def _load_table(root: Path, table: str) -> pd.DataFrame:
        frames = []
        path = root / f"{table}.parquet"
        done: set[str] = set()
        if path.exists():
            frames.append(_read_parquet(path))
            if "run_id" in frames[0]:  # a table with no rows has no columns either
                done = set(frames[0]["run_id"].unique())
        # Rows not yet consolidated (a crash, or a run still going) live in JSON lines; a run
        # already in the Parquet file (consolidation stopped between the two) is not read twice.
        frames += [_run_frame(d, table) for d in run_dirs(root) if d.name not in done]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def run_table(self, table: str, run_id: str) -> pd.DataFrame:
        df = self.tables.get(table, pd.DataFrame())
        if df.empty or "run_id" not in df:
            return pd.DataFrame()
        return df[df["run_id"] == run_id].reset_index(drop=True)
