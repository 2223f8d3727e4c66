"""Reading the Parquet tables of a results folder, the one place: a table whole
(:func:`read_parquet`: every value checked, :mod:`memprobe.results.schema`), its row groups one at a
time (:func:`parquet_groups`: a long table is never held whole), each file opened inside the
folder without following a link (:func:`memprobe.results.files.open_in_folder`). A file that
cannot be read is a :class:`~memprobe.core.errors.UsageError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from memprobe.core.errors import UsageError
from memprobe.core.safe_read import display_path
from memprobe.core.text import escape_surrogates
from memprobe.results.files import open_in_folder
from memprobe.results.schema import check_table

if TYPE_CHECKING:
    import pyarrow as pa


def read_parquet(path: Path, root: Path) -> pd.DataFrame:
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


def parquet_groups(
    path: Path,
    columns: list[str] | None = None,
    where: Callable[[pa.Table], pa.Array] | None = None,
    by: tuple[str, ...] = ("run_id", "t"),
) -> Iterator[pa.Table]:
    """The row groups of a Parquet file memprobe wrote, one at a time (``columns`` only, those of
    them it has), or a :class:`UsageError` naming a file that cannot be read.

    With ``where`` (a group's ``by`` columns -> which of its rows to keep), only those rows, read
    a column at a time: a long table's groups are large (:func:`memprobe.results.gather.group_bytes`), and only one
    column of one is held whole, besides the rows kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open_in_folder(path.parent, path) as f:  # an open file: see _write_parquet_atomic
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            wanted = names if columns is None else [c for c in columns if c in names]
            for i in range(parquet.num_row_groups):
                if where is None or not all(c in names for c in by):
                    yield parquet.read_row_group(i, columns=wanted)
                    continue
                mask = where(parquet.read_row_group(i, columns=list(by)))
                yield pa.Table.from_arrays(
                    [parquet.read_row_group(i, columns=[c]).column(0).filter(mask) for c in wanted],
                    schema=pa.schema([parquet.schema_arrow.field(c) for c in wanted]),
                )
    except (OSError, pa.ArrowException) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UsageError(
            f"{display_path(path)}: cannot be read (truncated or damaged: {escape_surrogates(reason)}); what is "
            "in the other files is intact"
        ) from None
