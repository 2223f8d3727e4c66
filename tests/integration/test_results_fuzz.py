"""Results folders with randomly damaged values load, summarize and render, or are refused with
one :class:`UsageError` naming the file: never a traceback, never a hang (issue 23).

Two small folders written by real runs (tests/data/results-v1: a scenario run and a recorded
job) are copied, then one value is changed in a copy: a JSON value of manifest.json or a run
record (meta.json) replaced by a value of another type or out of range, a column of a Parquet
table replaced, nulled, made non-finite or dropped, or one value of one row of a table left in
JSON lines (as a killed memprobe leaves it). Seeded: a failure names its case,
and ``FUZZ_CASE=<n>`` re-runs that one alone.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from memprobe.analysis import summarize_all
from memprobe.core.errors import UsageError
from memprobe.report.render import render
from memprobe.results.files import check_run_records
from memprobe.results.folder import ResultSet

DATA = Path(__file__).resolve().parents[1] / "data" / "results-v1"
CASES = int(os.environ.get("FUZZ_CASES", "300"))
SEED = int(os.environ.get("FUZZ_SEED", "23"))
RENDER_EVERY = 10  # rendering the page costs ~0.2 s: every 10th accepted case is rendered too
PER_CASE_S = 20  # far above what a case takes (~20 ms); only a hang reaches it

ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    -(10**30),
    10**30,
    1e308,
    -0.0,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "2",
    "x" * 300,
    "\udcff\u202e<script>",
    [],
    [1, "a", None],
    {},
    {"a": {"b": []}},
]


def _paths(value: Any, at: tuple = ()) -> Iterator[tuple]:
    """Every place in parsed JSON: the path of keys and indexes to it."""
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*at, i))


def _set(doc: Any, at: tuple, value: Any, *, delete: bool = False) -> Any:
    if not at:
        return value
    parent = doc
    for k in at[:-1]:
        parent = parent[k]
    if delete:
        del parent[at[-1]]
    else:
        parent[at[-1]] = value
    return doc


def _mutate_json(rng: random.Random, path: Path) -> str:
    doc = json.loads(path.read_text())
    at = rng.choice([p for p in _paths(doc) if p])
    delete = rng.random() < 0.15
    value = rng.choice(ODD_VALUES)
    doc = _set(doc, at, value, delete=delete)
    path.write_text(json.dumps(doc))  # NaN and Infinity spelled as Python's json writes them
    return f"{path.name}:{'.'.join(map(str, at))} {'deleted' if delete else repr(value)[:40]}"


def _mutate_table(rng: random.Random, path: Path) -> str:
    df = pd.read_parquet(path)
    if df.empty:
        return f"{path.name}: empty, unchanged"
    col = rng.choice(list(df.columns))
    how = rng.choice(["str", "nan", "inf", "negative", "none", "drop", "huge", "bool", "shuffle", "mixed"])
    n = len(df)
    rows = sorted(rng.sample(range(n), max(1, n // 3)))
    if how == "str":
        df[col] = df[col].astype(str)
    elif how == "drop":
        df = df.drop(columns=[col])
    elif how == "shuffle":
        df = df.sample(frac=1, random_state=rng.randrange(1000)).reset_index(drop=True)
    elif how == "mixed":
        df[col] = [str(v) if i in rows else v for i, v in enumerate(df[col])]
    else:
        value = {
            "nan": math.nan,
            "inf": math.inf,
            "negative": -5,
            "none": None,
            "huge": 10**18,
            "bool": True,
        }[how]
        values = df[col].astype(object).tolist()
        for i in rows:
            values[i] = value
        try:
            df[col] = pd.Series(values, dtype=object).infer_objects()
        except (TypeError, ValueError):
            df[col] = pd.Series([str(v) for v in values])
    try:
        df.to_parquet(path, index=False)
    except Exception:
        df[col] = df[col].astype(str)
        df.to_parquet(path, index=False)
    return f"{path.name}:{col} {how}"


def _mutate_lines(rng: random.Random, root: Path) -> str:
    """The folder as a killed memprobe leaves it (rows still in JSON lines), one value of one row
    changed: JSON lines hold any type in any row."""
    table = rng.choice(["samples", "system", "progress"])
    df = pd.read_parquet(root / f"{table}.parquet")
    (root / f"{table}.parquet").unlink()
    rows = json.loads(df.drop(columns=["run_id"]).to_json(orient="records"))
    i = rng.randrange(len(rows))
    col = rng.choice(list(rows[i]))
    value = rng.choice(ODD_VALUES)
    rows[i][col] = value
    (run,) = root.glob("runs/*")
    (run / f"{table}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"{table}.jsonl row {i}:{col} {repr(value)[:40]}"


def _mutate(rng: random.Random, root: Path) -> str:
    json_files = [root / "manifest.json", *sorted(root.glob("runs/*/meta.json"))]
    tables = [p for p in sorted(root.glob("*.parquet")) if p.stat().st_size > 1000]
    draw = rng.random()
    if draw < 0.55:
        return _mutate_json(rng, rng.choice(json_files))
    if draw < 0.7:
        return _mutate_lines(rng, root)
    return _mutate_table(rng, rng.choice(tables))


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang


def _cases() -> list[int]:
    one = os.environ.get("FUZZ_CASE")
    return [int(one)] if one else list(range(CASES))


def test_damaged_values_are_refused_in_one_line_or_reported(tmp_path: Path) -> None:
    outcomes = {"refused": 0, "loaded": 0, "rendered": 0}
    failures = []
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for case in _cases():
            rng = random.Random(SEED * 100_000 + case)
            kind = rng.choice(["scenario", "record"])
            root = Path(shutil.copytree(DATA / kind, tmp_path / f"{case}-{kind}"))
            what = _mutate(rng, root)
            signal.alarm(PER_CASE_S)
            try:
                results = ResultSet.load(root)
                check_run_records(root)
                summaries = summarize_all(results)
                outcomes["loaded"] += 1
                if outcomes["loaded"] % RENDER_EVERY == 0:
                    page = render(results)
                    page.encode("utf-8")  # no lone surrogate: the page can be written
                    outcomes["rendered"] += 1
                assert len(summaries) == len(results.metas)
            except UsageError as exc:
                message = str(exc)
                outcomes["refused"] += 1
                if "\n" in message or str(root) not in message:
                    failures.append(
                        f"case {case} ({kind}, {what}): not one line naming the file: {message!r}"
                    )
            except _Hang:
                failures.append(f"case {case} ({kind}, {what}): still going after {PER_CASE_S} s")
            except Exception as exc:
                failures.append(f"case {case} ({kind}, {what}): {type(exc).__name__}: {exc}"[:300])
            finally:
                signal.alarm(0)
            shutil.rmtree(root)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert not failures, f"{len(failures)} of {len(_cases())} cases failed:\n" + "\n".join(failures)
    if len(_cases()) == CASES:  # both outcomes are exercised, not only refusals
        assert outcomes["loaded"] > CASES // 10 and outcomes["refused"] > CASES // 10, outcomes
