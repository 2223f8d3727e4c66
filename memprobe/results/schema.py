"""What a results folder's values may be, checked once when it is loaded: a folder may come
from someone else, or be edited by hand, and the analysis and the report then trust its types.

Every value the analysis or the report reads is checked here for its type and range; a value
that does not fit is refused with one line naming the file and the field (``meta.json:
spec.workers: '2' is not a whole number; allowed: ...``), a :class:`UsageError` (exit 2). Keys
memprobe does not read are left alone. Numbers must be finite and at most 10^15 in size (no
measure of a run comes near; a larger one overflows the arithmetic or a 64-bit column). An older
version's metas are checked in today's shape, upgraded first (:mod:`memprobe.results.upgrade`).

Over 500 lines because it is the one list of every value a folder holds that memprobe reads,
with the few rules they are checked by: a reader of the format (or a writer of a new value, as
the attribution of copied pages was) finds them all here, in the file's own order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from memprobe.core.errors import UsageError
from memprobe.core.safe_read import display_path
from memprobe.core.text import has_control
from memprobe.core.vocabulary import CGROUP_PARTS
from memprobe.results.upgrade import is_recorded, upgrade_recorded

MAX_NUMBER = 1e15


class _Bad(Exception):
    def __init__(self, field: str, what: str) -> None:
        super().__init__(field, what)
        self.field, self.what = field, what


Rule = Callable[[Any, str], None]  # (value, field) -> None, or _Bad


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text):,} characters)"


def _number(*, whole: bool = False, low: float = -MAX_NUMBER, optional: bool = True) -> Rule:
    noun = "a whole number" if whole else "a number"
    allowed = f"{noun} from {low:g} to {MAX_NUMBER:g}" + (" or null" if optional else "")

    def check(v: Any, field: str) -> None:
        if v is None and optional:
            return
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Bad(field, f"{_shown(v)} is not {noun}; allowed: {allowed}")
        if not (math.isfinite(v) and low <= v <= MAX_NUMBER):
            raise _Bad(field, f"{_shown(v)} is out of range; allowed: {allowed}")
        if whole and not isinstance(v, int):
            raise _Bad(field, f"{_shown(v)} is not {noun}; allowed: {allowed}")

    return check


def _text(*, optional: bool = True) -> Rule:
    def check(v: Any, field: str) -> None:
        if not (isinstance(v, str) or (v is None and optional)):
            raise _Bad(field, f"{_shown(v)} is not text; allowed: a string{' or null' if optional else ''}")

    return check


def _name(*, optional: bool = True) -> Rule:
    """Text printed in the terminal's summary table (a run id, a status, a backend): no
    character a terminal would act on (an escape sequence could clear it or retitle it)."""
    text = _text(optional=optional)

    def check(v: Any, field: str) -> None:
        text(v, field)
        if isinstance(v, str) and has_control(v):
            raise _Bad(field, f"{_shown(v)} holds control characters; allowed: printable text")

    return check


def _flag(v: Any, field: str) -> None:
    if v is not None and not isinstance(v, bool):
        raise _Bad(field, f"{_shown(v)} is not true or false; allowed: true, false or null")


class _Absent:
    """What a rule of :func:`_object` gets for a key that is not there, if it asks (``null=False``)."""


ABSENT = _Absent()


def _object(
    fields: dict[str, Rule] | None = None,
    *,
    each: Rule | None = None,
    optional: bool = True,
    null: bool = True,
) -> Rule:
    """A JSON object: the listed ``fields`` checked, or ``each`` value. If ``optional`` it may be
    absent, and null too if ``null`` (some readers take a key that is there for an object)."""

    def check(v: Any, field: str) -> None:
        if optional and (v is ABSENT or (v is None and null)):
            return
        if not isinstance(v, dict):
            allowed = "an object" + (
                " or null" if optional and null else " (or no such key)" if optional else ""
            )
            raise _Bad(field, f"{_shown(None if v is ABSENT else v)} is not an object; allowed: {allowed}")
        for key, rule in (fields or {}).items():
            value = v.get(key, ABSENT)
            rule(
                None if value is ABSENT and not getattr(rule, "tells_absent", False) else value,
                f"{field}.{key}" if field else key,
            )
        if each is not None:
            for key, value in v.items():
                each(value, f"{field}.{key}" if field else str(key))

    check.tells_absent = True  # type: ignore[attr-defined]
    return check


def _list(each: Rule) -> Rule:
    def check(v: Any, field: str) -> None:
        if v is None:
            return
        if not isinstance(v, list):
            raise _Bad(field, f"{_shown(v)} is not a list; allowed: a list or null")
        for i, item in enumerate(v):
            each(item, f"{field}[{i}]")

    return check


def _required(rule: Rule, allowed: str) -> Rule:
    def check(v: Any, field: str) -> None:
        if v is None:
            raise _Bad(field, f"missing; allowed: {allowed}")
        rule(v, field)

    return check


_NUM = _number()
_COUNT = _number(whole=True, low=0)
_INT = _number(whole=True)
_SECONDS = _number(low=0)
_TEXT = _text()


def _ranks(v: Any, field: str) -> None:
    """rank (as text, a JSON key) -> the pid of that rank's process."""
    _object(each=_COUNT)(v, field)
    for key in v or {}:
        if not (key.isascii() and key.isdigit() and len(key) < 10):
            raise _Bad(f"{field}.{key}", "a rank that is not a whole number; allowed: 0, 1, 2, ...")


def _estimate_error(v: Any, field: str) -> None:
    """The sampler's check of its USS estimate: percentages over ``n`` readings (given when n > 0)."""
    _object(
        {
            "n": _COUNT,
            "n_events": _COUNT,
            "events_median_pct": _NUM,
            "max_mb": _NUM,
            "max_at": _object(),
            "median_pct": _NUM,
            "max_pct": _NUM,
        }
    )(v, field)
    if v and v.get("n"):
        for key in ("median_pct", "max_pct"):
            _number(optional=False)(v.get(key), f"{field}.{key}")


MANIFEST = _object(
    {
        "kind": _TEXT,
        "scenario": _TEXT,
        "scenario_path": _TEXT,
        "description": _TEXT,
        "status": _TEXT,
        "started": _NUM,
        "finished": _NUM,
        "ended": _TEXT,
        "environment": _object(
            {
                "cpu_count": _number(whole=True, low=1),
                "gil_enabled": _flag,
                "mem_total_mb": _SECONDS,
                "cgroup_limit_mb": _SECONDS,
            },
            null=False,
        ),
        "runs": _list(_text(optional=False)),
        "writer": _object({"pid": _INT, "start_ticks": _INT, "boot_id": _TEXT}),
        "signals": _list(_TEXT),
    },
    optional=False,
)

PROCESS = _object(
    {
        "pid": _required(_number(whole=True, low=0, optional=False), "a process id"),
        "ppid": _COUNT,
        "role": _TEXT,
        "kind": _TEXT,
        "forked": _flag,
        "start_method": _TEXT,
        "rank": _INT,
        "worker": _INT,
        "generation": _COUNT,
        "parent_role": _TEXT,
        "command": _TEXT,
        "exact_readings": _COUNT,
        **dict.fromkeys(
            (
                "start_t",
                "first_t",
                "last_t",
                "end_t",
                "first_pss_t",
                "last_pss_t",
                "threads_first_t",
                "threads_last_t",
            ),
            _NUM,
        ),
    },
    optional=False,
)

# What a run's process measured of its workers' copies (memprobe.probe.attribution); paths are a
# dataset's own names (foreign text: escaped where shown).
_MB = _required(_number(low=0, optional=False), "a number of MB from 0")
_WORKER_MB = ("copied_mb", "other_paths_mb", "outside_on_dataset_pages_mb", "outside_elsewhere_mb")
_ALSO = _object({"path": _text(optional=False), "counted_to": _text(optional=False), "objects": _COUNT})
_WALK = {"also_held": _list(_ALSO)} | {
    "objects": _COUNT,
    "blocks": _COUNT,
    "seconds": _SECONDS,
    "stopped": _TEXT,
    "unreadable": _list(_TEXT),
}
_KINDS = _list(
    _object(
        {
            "parent": _COUNT,
            "workers": _list(
                _object({"worker": _COUNT, "pid": _COUNT, "kinds_mb": _object(each=_MB, null=False)})
            ),
        }
    )
)
ATTRIBUTION = _object(
    {
        "error": _TEXT,
        "paths": _list(_text(optional=False)),
        "held_mb": _list(_MB),
        "workers": _list(
            _object(
                {
                    "worker": _COUNT,
                    "pid": _COUNT,
                    "method": _name(),
                    "new_mb": _SECONDS,
                    "paths_mb": _list(_MB),
                }
                | dict.fromkeys(_WORKER_MB, _MB),
                optional=False,
            )
        ),
        "unread_workers": _list(_COUNT),
        "other_paths": _COUNT,
        "walk": _object(_WALK | {"buffers_followed": _flag}),
        "pagemap_s": _SECONDS,
        "join_s": _SECONDS,
        "parent": _COUNT,
        "marked_by": _COUNT,
        "reading_cost_s": _SECONDS,
        "by_process": _list(
            _object(
                {"parent": _COUNT, "path": _text(optional=False)}
                | dict.fromkeys(("path_mb", "copied_mb"), _MB)
            )
        ),
    }
)


META = _object(
    {
        "run_id": _required(_name(optional=False), "the run's id"),
        "status": _required(_name(optional=False), "the run's status (ok, failed, ...)"),
        "index": _INT,
        "kind": _TEXT,
        "error": _object({"type": _TEXT, "message": _TEXT, "traceback": _TEXT}),
        "items": _COUNT,
        "batches": _COUNT,
        "milestones": _object(each=_number(optional=False), null=False),
        "epoch_warms": _list(_number(optional=False)),
        "marks_recorded": _flag,
        "started": _NUM,
        "elapsed_s": _SECONDS,
        "exit_code": _INT,
        "sampler": _object(
            {
                "cpu_s": _SECONDS,
                "cpu_share": _SECONDS,
                "exact_readings": _COUNT,
                "estimate_error": _estimate_error,
            },
            null=False,
        ),
        "dataset_info": _object(
            {
                "length": _COUNT,
                "bytes_per_item": _SECONDS,
                "pixels_per_item": _SECONDS,
                "gil_enabled": _flag,
                "decoder_backend": _name(),
                "attribution": ATTRIBUTION,
                "copied_by_kind": _KINDS,
                "copies_reading_s": _SECONDS,
            }
        ),
        "root_pid": _COUNT,
        "ranks": _ranks,
        "start_methods": _object(each=_COUNT),
        "processes": _list(PROCESS),
    },
    optional=False,
)


THRESHOLD = _required(
    _object(
        {"growth_threshold_mb": _required(_number(low=0, optional=False), "a threshold in MB")},
        optional=False,
    ),
    "an object with growth_threshold_mb",
)

# A scenario run's record holds its scenario's spec: what it ran and how it is judged.
SCENARIO = _object(
    {
        "spec": _required(
            _object(
                {
                    "backend": _required(_name(optional=False), "the backend's name"),
                    "mode": _required(
                        _name(optional=False), "fork, spawn, forkserver, threads or a recorded kind"
                    ),
                    "workers": _required(
                        _number(whole=True, low=0, optional=False), "a whole number of workers"
                    ),
                    "verdict": THRESHOLD,
                    "expect": _name(),
                    "workload": _TEXT,
                    "dataset": _object(),
                    "loader": _object({"epochs": _COUNT, "items": _COUNT}, null=False),
                    "decode": _object(),
                    "command": _list(_TEXT),
                },
                optional=False,
            ),
            "the run's spec (backend, mode, workers, verdict)",
        )
    },
    optional=False,
)

# A recorded job's record (record / watch) states what its analysis needs in its own fields.
RECORDED = _object(
    {
        "max_workers": _required(_number(whole=True, low=0, optional=False), "a whole number of workers"),
        "start_method": _name(),
        "verdict": THRESHOLD,
        "command": _list(_TEXT),
        "pid": _COUNT,
        "ended": _TEXT,
        "sampling": _object(),
        # The job's memory cgroup (memprobe.probe.cgroup), at the end and as it started.
        "cgroup": _object(
            {
                "version": _COUNT,
                "path": _TEXT,
                "limit_mb": _number(low=0),
                "usage_mb": _number(low=0),
                "usage_at_start_mb": _number(low=0),
                "oom_kills": _COUNT,
                "oom_kills_at_start": _COUNT,
                "since_t": _SECONDS,  # when the job entered it (0: from the start)
                "parts_mb": _object({k: _number(low=0) for k in CGROUP_PARTS}),
                # The other processes in it (memprobe.probe.cgroup.others), at their largest reading.
                "others": _object(
                    {
                        "processes": _COUNT,
                        "rss_mb": _number(low=0),
                        "largest": _list(_object({"name": _TEXT, "pid": _COUNT, "rss_mb": _number(low=0)})),
                    }
                ),
            }
        ),
    },
    optional=False,
)


def _workload_section(meta: dict, field: str) -> None:
    """The spec's section named by its workload (``dataset`` for ``records``), which the report
    lists, is an object."""
    if is_recorded(meta):
        return
    spec = meta["spec"]
    workload = spec.get("workload") or "records"
    key = "dataset" if workload == "records" else workload
    if spec.get(key) is not None and not isinstance(spec.get(key), dict):
        raise _Bad(
            f"spec.{key}",
            f"{_shown(spec[key])} is not an object; allowed: the {workload} workload's settings",
        )


def check_manifest(path: Path, manifest: dict) -> None:
    """Every value of manifest.json that memprobe reads, of its type and range."""
    _check(path, manifest, MANIFEST)


def check_meta(path: Path, meta: dict) -> None:
    """Every value of a run record (meta.json) that memprobe reads, of its type and range, in
    the current shape (:func:`upgrade_recorded`): a scenario run's spec, a recorded job's fields."""
    meta = upgrade_recorded(meta)
    _check(path, meta, META)
    _check(path, meta, RECORDED if is_recorded(meta) else SCENARIO)
    _check(path, meta, _workload_section)


def _check(path: Path, value: dict, rule: Rule) -> None:
    try:
        rule(value, "")
    except _Bad as bad:
        raise UsageError(f"{display_path(path)}: {bad.field}: {bad.what}") from None


# -- tables ---------------------------------------------------------------------------------------

TEXT_COLUMNS = frozenset({"run_id", "role", "state", "tier", "reason", "kind", "name", "start_method"})
BOOL_COLUMNS = frozenset({"missing"})
# The columns the analysis and the report cannot do without (found by dropping each column of
# the two schema-1 folders in turn: each of these gave a KeyError); a table with no rows has none.
COLUMNS = {
    "samples": (
        "run_id",
        "t",
        "pid",
        "role",
        "worker",
        "tier",
        "missing",
        "reason",
        "rss_mb",
        "cpu_s",
        "pss_mb",
        "uss_mb",
    ),
    "system": ("run_id", "t"),
    "progress": ("run_id", "t", "items"),
    "threads": ("run_id", "t", "tid", "name", "cpu_s"),
}
NEEDED = frozenset(
    {"run_id", "t", "pid", "tid", "role", "tier", "items", "batches"}
)  # never null: what every row is joined and ordered by


def check_table(path: Path, df: pd.DataFrame, table: str) -> pd.DataFrame:
    """``df``, a table of the folder read from ``path``, if it has the columns the analysis
    reads and every column holds what memprobe writes there (text, true/false, or finite numbers
    with nulls for what was not measured), with its number columns as numbers; else a
    :class:`UsageError` naming the file and the column."""
    name = display_path(path)
    missing = [c for c in COLUMNS.get(table, ()) if c not in df.columns] if len(df) else []
    if missing:
        raise UsageError(
            f"{name}: column {missing[0]!r}: missing; allowed: a memprobe {table} table (with "
            f"{', '.join(COLUMNS[table])})"
        )
    for col in list(df.columns):
        column = df[col]
        field = f"{name}: column {col!r}"
        if not isinstance(col, str):
            raise UsageError(f"{field}: a column name that is not text")
        nulls = int(column.isna().sum())
        if col in NEEDED and nulls:
            raise UsageError(f"{field}: {nulls:,} rows without a value; allowed: none")
        if col in TEXT_COLUMNS:
            if not pd.api.types.is_string_dtype(column.dtype) or column.dtype == object:
                _only(column, lambda v: isinstance(v, str), field, "text or null")
        elif col in BOOL_COLUMNS:
            if not pd.api.types.is_bool_dtype(column.dtype):
                _only(column, lambda v: isinstance(v, (bool, np.bool_)), field, "true, false or null")
        else:
            df[col] = _numbers(column, field)
    return df


def _only(column: pd.Series, ok: Callable[[Any], bool], field: str, allowed: str) -> None:
    values = column.dropna()
    odd = values[~values.map(ok).astype(bool)]
    if len(odd):
        raise UsageError(f"{field}: holds {_shown(odd.iloc[0])}; allowed: {allowed}")


def _numbers(column: pd.Series, field: str) -> pd.Series:
    """``column`` as float or integer numbers, each finite and at most :data:`MAX_NUMBER`."""
    if pd.api.types.is_bool_dtype(column.dtype) or not pd.api.types.is_numeric_dtype(column.dtype):
        _only(
            column,
            lambda v: (
                isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            ),
            field,
            "numbers or null",
        )
        column = pd.to_numeric(column.astype(object).where(column.notna(), None), errors="coerce")
    values = column.to_numpy(dtype=float, na_value=np.nan)
    bad = ~(np.abs(values) <= MAX_NUMBER) & ~np.isnan(values)  # infinite or too large
    if bad.any():
        raise UsageError(
            f"{field}: holds {_shown(values[bad][0])}; allowed: finite numbers of at most {MAX_NUMBER:g}, or null"
        )
    return column
