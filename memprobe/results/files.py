"""The files of a results folder: written atomically or appended line by line, read back safely.

A JSON file (manifest.json, meta.json, summary.json) and a page are written to a temporary name
and renamed: a reader sees the old file or the new one, never half. While a run is going, its rows
are appended to JSON-lines files (``runs/<run_id>/<table>.jsonl``) and flushed on every write; a
reader tolerates a torn last line. Everything memprobe reads of a folder, which may come from
someone else, is opened here (:func:`open_in_folder`): regular files inside it, reached without
following a symbolic link, of a stated size at most (see :mod:`memprobe.core.safe_read`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from memprobe.core.errors import ResultsWriteError, UsageError
from memprobe.core.safe_read import display_path, open_regular, read_regular
from memprobe.core.text import escape_surrogates
from memprobe.results.schema import check_meta

TABLES = ("samples", "system", "progress", "events", "threads")  # a run's JSON-lines files
# What memprobe reads of a results folder, which may come from someone else: regular files
# inside it, reached without following a symbolic link (see memprobe.core.safe_read), at most:
MAX_JSON_BYTES = 64 << 20  # manifest.json, meta.json, summary.json (a record of 100,000 processes: ~50 MB)
# A Parquet table or a run's JSON-lines file, read a row group or a line at a time: what memprobe
# itself writes, ~6.5 MB of JSON lines per process and hour at the default interval (measured: 72 h
# of 64 processes, 29.8 GB of samples.jsonl, refused at the former 16 GiB). 1 TiB: a week of 1,000.
MAX_TABLE_BYTES = 1 << 40
MAX_LINE_BYTES = 1 << 20  # one JSON line (a row is a few hundred bytes)
IN_FOLDER = "a regular file inside the results folder"


def new_file(near: Path, suffix: str) -> tuple[Path, BinaryIO]:
    """A file of this writer's own beside ``near`` (``.NAME.PID.RANDOM.SUFFIX``), open for
    writing in binary: created here, and only if no such name was there (``O_EXCL``,
    ``O_NOFOLLOW``). Two memprobes writing one folder's files at once (two ``memprobe report`` of
    one folder) never share one; and no name left in the folder (a killed memprobe's, or a
    symbolic link to ~/.bashrc in a folder from someone else) is ever written through."""
    path = near.with_name(f".{near.name}.{os.getpid()}.{secrets.token_hex(4)}.{suffix}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return path, os.fdopen(fd, "wb")


def write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(f)`` on a temporary file of this call's own (:func:`new_file`), then rename it
    to ``path``: readers see the old file or the new one, never half; of two writers at once,
    each renames a whole file, the last one's staying (before: one fixed temporary name, which
    the second writer removed under the first). On failure the temporary file is removed and a
    :class:`ResultsWriteError` (a full disk, a read-only folder) names the file."""
    tmp: Path | None = None
    try:
        tmp, f = new_file(path, "tmp")
        with f:
            write(f)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise ResultsWriteError(path, exc) from exc
    except BaseException:
        _remove(tmp)
        raise
    return path


def _remove(tmp: Path | None) -> None:
    """A temporary file removed where it can be: on a read-only file system even the attempt
    fails (EROFS), and the error that matters is the write's."""
    if tmp is not None:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def unwritable(folder: Path) -> str | None:
    """Why memprobe cannot write in ``folder``, in words (a read-only file system, an immutable
    folder, no permission), or None when it can: asked before anything is written, so that a
    report of a folder it may only read changes nothing and says what to do instead."""
    try:
        if os.access(folder, os.W_OK):
            return None
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError as exc:
        return exc.strerror or str(exc)
    return "a read-only file system" if read_only else "memprobe may not write there"


def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`write_atomic`): the report pages. A lone
    surrogate left in it (see :func:`_escaped`) is written as an escape, never a traceback."""
    return write_atomic(path, lambda f: f.write(text.encode("utf-8", "backslashreplace")))


def _json_writer(data: Any) -> Callable[[BinaryIO], None]:
    def write(f: BinaryIO) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8")  # written as it is made: a meta can be 50 MB
        json.dump(data, text, indent=2, default=_json_default)
        text.flush()
        text.detach()
        os.fsync(f.fileno())

    return write


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, _json_writer(data))


def write_json_exclusive(path: Path, data: Any) -> bool:
    """Create ``path`` with JSON ``data``, whole, unless it exists: False then. Two processes
    racing for one file: exactly one gets it (a hard link never replaces an existing name)."""
    tmp: Path | None = None
    try:
        tmp, f = new_file(path, "tmp")
        with f:
            _json_writer(data)(f)
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError as exc:
        raise ResultsWriteError(path, exc) from exc
    finally:
        _remove(tmp)
    return True


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def open_in_folder(root: Path, path: Path, limit: int | None = None) -> BinaryIO:
    """``path``, a file of the results folder ``root``, opened for reading in binary: the one
    way memprobe opens what is in a results folder. A regular file inside ``root`` of at most
    ``limit`` bytes (:data:`MAX_TABLE_BYTES` by default), reached without following a symbolic
    link, or a :class:`UsageError` naming it; a FIFO or device is refused without waiting. A
    missing file raises FileNotFoundError."""
    return open_regular(path, limit=MAX_TABLE_BYTES if limit is None else limit, root=root, allowed=IN_FOLDER)


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


def folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``: changes when the folder is deleted, moved or replaced."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
