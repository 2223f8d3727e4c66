"""Results folders with randomly damaged values load, summarize and render, or are refused with
one :class:`UsageError` naming the file: never a traceback, never a hang (issue 23).

Two small folders written by real runs (tests/data/results-v1: a scenario run and a recorded
job) are copied, then one value is changed in a copy: a JSON value of manifest.json or a run
record (meta.json) replaced by a value of another type or out of range, a column of a Parquet
table replaced, nulled, made non-finite or dropped, or one value of one row of a table left in
JSON lines (as a killed memprobe leaves it). Seeded: a failure names its case,
and ``FUZZ_CASE=<n>`` re-runs that one alone.

Then job folders of several nodes (issue 39), ``memprobe report`` run on each as a user would:
odd values in each node's ``node`` (meta.json), odd folder names, symbolic links where node
folders are and inside them, nodes whose memprobe was killed, ``-o`` onto a folder's own files;
no traceback, no hang, no line a folder forged, nothing written outside the folders given
(``FUZZ_JOB_CASES``, 40 by default; ``FUZZ_SEED`` for both).
"""

from __future__ import annotations

import contextlib
import io
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

from memprobe.analysis.runs import analyse_all, summarize_all
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
                    page = render(results, analyse_all(results))
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


# -- job folders of several nodes (issue 39) ------------------------------------------------------
#
# A job folder of 1 to 3 nodes' folders (copies of the recorded job above), each node's `node`
# (meta.json) given odd values, the folders odd names, some of them symbolic links (to a node's
# folder outside the job whose memprobe was killed, to a file of the user's, to nowhere, to the job
# folder itself), links left inside a node at the names memprobe writes, some nodes killed mid-run
# (their folders to be finished), then `memprobe report` on the job folder or on its folders named
# one by one, with or without -o. Each must end with exit 0 or one line and exit 2, within
# PER_JOB_S, print no line a folder forged (every line printable, none starting with the text the
# folder planted), and write nothing outside the folders given and the page asked for.

JOB_CASES = int(os.environ.get("FUZZ_JOB_CASES", "40"))
PER_JOB_S = 60  # far above what a case takes (~1 s: up to 3 nodes analysed, a page); only a hang reaches it
FORGED = "FORGED"
ODD_TEXT: list[Any] = [
    f"n0\nnode 9 (h): {FORGED}",
    f"\x1b]0;{FORGED}\x07\x1b[2J",
    f"\r{FORGED}",
    f"\u202e{FORGED}",
    f"<script>{FORGED}</script>",
    "\udcff",
    "",
    "x" * 300,
]
ODD_NAMES = [
    b"node0",
    b"node1",
    f"n\n{FORGED}: growing".encode(),
    f"\x1b[2J{FORGED}".encode(),
    b"n\xff\xfe",
    b"-o",
    b" node 2",
    b"n" * 200,
]
NODE_FIELDS = {
    "host": ODD_TEXT + ODD_VALUES,
    "node_rank": [0, 1, 2, None, -1, True, 99_999, 10**12, "1", 1.5],
    "nodes": [1, 2, 3, None, 0, 10**12, "2", math.nan],
    "env": [{}, None, "x", {"SLURM_JOB_ID": "77"}, {"SLURM_JOB_ID": "88"}, {"SLURM_JOB_ID": ODD_TEXT[0]}],
}


def _node_meta(rng: random.Random, folder: Path) -> str:
    """The node's `node` in its meta.json: each field an odd value, or `node` itself one."""
    path = folder / "runs" / "job" / "meta.json"
    meta = json.loads(path.read_text())
    if rng.random() < 0.1:
        meta["node"] = rng.choice(ODD_VALUES)
    else:
        meta["node"] = {k: rng.choice(v) for k, v in NODE_FIELDS.items() if rng.random() < 0.9}
    said = repr(meta["node"])[:60]
    if rng.random() < 0.3:  # its memprobe killed mid-run: `report` would finish (rewrite) it
        _killed(folder)
        said += " killed"
    path.write_text(json.dumps(meta))
    return said


def _killed(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(status="running", finished=None)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    meta = json.loads((folder / "runs" / "job" / "meta.json").read_text())
    (folder / "runs" / "job" / "meta.json").write_text(json.dumps({**meta, "status": "running"}))


def _snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root``, links not followed: a file's bytes, a link's target."""
    out = {}
    for d, dirs, names in os.walk(root):
        for name in dirs + names:
            p = Path(d, name)
            if p.is_symlink():
                out[str(p)] = ("link", os.fsencode(os.readlink(p)))
            elif p.is_file():
                out[str(p)] = ("file", p.read_bytes())
    return out


def _job_case(rng: random.Random, case: Path) -> tuple[list[str], list[str]]:
    """A job folder with its outside, and the `memprobe report` arguments; and what was done."""
    job, outside = case / "job", case / "outside"
    outside.mkdir(parents=True)
    precious = outside / "bashrc"
    precious.write_text("export KEEP=1\n")
    elsewhere = Path(shutil.copytree(DATA / "record", outside / "node-elsewhere"))
    _killed(elsewhere)  # followed, it would be finished and rewritten
    job.mkdir()
    said = []
    names = rng.sample(ODD_NAMES, rng.randint(1, 3))
    nodes = []
    for raw in names:
        node = Path(shutil.copytree(DATA / "record", job / os.fsdecode(raw)))
        said.append(f"{raw!r}: {_node_meta(rng, node)}")
        nodes.append(node)
    for _ in range(rng.randint(0, 2)):  # links in the job folder, where node folders are
        link = job / f"link{rng.randrange(100)}"
        if not link.exists() and not link.is_symlink():
            target = rng.choice([elsewhere, precious, case / "nowhere", job, Path("/")])
            link.symlink_to(target)
            said.append(f"{link.name} -> {target.name}")
    if nodes and rng.random() < 0.4:  # links inside a node, at names memprobe reads or writes
        node = rng.choice(nodes)
        name = rng.choice(
            ["runs", "report.html", "summary.json", ".samples.parquet.0.spool", "samples.parquet"]
        )
        target = elsewhere / "runs" if name == "runs" else precious
        if (node / name).is_dir():
            shutil.rmtree(node / name)
        else:
            (node / name).unlink(missing_ok=True)
        (node / name).symlink_to(target)
        said.append(f"{node.name!r}/{name} -> {target}")
    args: list[str] = [str(job)] if rng.random() < 0.7 else [str(p) for p in nodes]
    draw = rng.random()
    if draw < 0.15:
        args += ["-o", str(case / "pages" / "deeper" / "job.html")]
    elif draw < 0.25 and nodes:
        args += ["-o", str(rng.choice(nodes) / rng.choice(["manifest.json", "runs", "page.html"]))]
    elif draw < 0.3:
        args += ["-o", str(case)]
    return args, said


def test_job_folders_of_several_nodes_are_reported_or_refused_writing_nothing_outside(
    tmp_path: Path,
) -> None:
    from inprocess import Hung, call_memprobe

    failures = []
    one = os.environ.get("FUZZ_CASE")
    outcomes = {0: 0, 2: 0}
    for n in [int(one)] if one else range(JOB_CASES):
        rng = random.Random(SEED * 100_000 + 50_000 + n)
        case = tmp_path / str(n)
        args, said = _job_case(rng, case)
        before = _snapshot(case / "outside")
        out, err = io.StringIO(), io.StringIO()
        what = f"case {n} (report {' '.join(a.replace(str(case), '') for a in args)!r}; {'; '.join(said)})"
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = call_memprobe("report", *args, cwd=case, timeout=PER_JOB_S)
        except Hung:
            failures.append(f"{what}: still going after {PER_JOB_S} s")
            continue
        except Exception as exc:
            failures.append(f"{what}: {type(exc).__name__}: {exc}"[:600])
            continue
        said_lines = (out.getvalue() + err.getvalue()).splitlines()
        if code not in outcomes:
            failures.append(f"{what}: exit {code}: {err.getvalue()[-300:]!r}")
            continue
        outcomes[code] += 1
        lines = err.getvalue().strip().splitlines()  # a node's problem each, then the refusal
        if code == 2 and not (lines and lines[-1].startswith("memprobe: error: ")):
            failures.append(f"{what}: refused without a line saying why: {err.getvalue()[-300:]!r}")
        if not all(line.startswith("memprobe: ") for line in lines):
            failures.append(f"{what}: a line on stderr that is not memprobe's: {err.getvalue()[-300:]!r}")
        forged = [line for line in said_lines if not line.isprintable() or FORGED in line.split(":")[0][:12]]
        if forged:
            failures.append(f"{what}: a line the folder forged or holding control characters: {forged[:2]!r}")
        if _snapshot(case / "outside") != before:
            failures.append(f"{what}: something outside the folders given changed")
        written = {p.name for p in case.iterdir()} - {"job", "outside", "pages"}
        if written:
            failures.append(f"{what}: written beside the job folder: {sorted(written)}")
        shutil.rmtree(case)
    assert not failures, f"{len(failures)} of {JOB_CASES} cases failed:\n" + "\n".join(failures)
    if not one:  # both outcomes are exercised: reported jobs and refusals
        assert outcomes[0] > JOB_CASES // 10 and outcomes[2] > JOB_CASES // 10, outcomes
