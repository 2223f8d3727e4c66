"""memprobe cure's conversion (memprobe/run/cure.py): which attributes of a dataset become a
SharedList or Arrow strings, which are refused and why, and the change it prints for each."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from torch.utils.data import Dataset, Subset

import memprobe
from memprobe.cli import cure as cure_cli
from memprobe.cli import main
from memprobe.run import cure

N = 1_200  # above MIN_ELEMENTS (1,000)


class Records(Dataset):
    def __init__(self, n: int = N) -> None:
        self.records = [{"id": i, "name": f"item {i}", "box": [float(i)] * 4} for i in range(n)]
        self.small = [1, 2, 3]
        self.ids = np.arange(n)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict:
        return self.records[i]


class Index:
    """A user's own structure holding the records."""

    def __init__(self) -> None:
        self.entries = [("a", i) for i in range(N)]


class Mixed(Dataset):
    def __init__(self) -> None:
        self.by_key = {f"k{i}": i for i in range(N)}
        self.seen = set(range(N))
        self.objects = np.array([{"i": i} for i in range(N)], dtype=object)
        self.callbacks = [lambda: None] * N  # cannot be pickled
        self.index = Index()


class Frame(Dataset):
    def __init__(self) -> None:
        self.frame = pd.DataFrame(
            {
                "path": pd.Series([f"/data/{i}.jpg" for i in range(N)], dtype=object),
                "tags": pd.Series([["a", "b"] for _ in range(N)], dtype=object),
                "label": np.arange(N),
            }
        )

    def __getitem__(self, i: int) -> dict:
        row = self.frame.iloc[i]
        return {"path": str(row["path"]), "label": int(row["label"])}


def test_a_large_list_of_dicts_becomes_a_shared_list_with_the_same_records() -> None:
    ds = Records()
    before = [ds[i] for i in (0, 7, N - 1)]
    out, done = cure.convert(ds)
    assert out is ds
    assert isinstance(ds.records, memprobe.SharedList)
    assert [ds[i] for i in (0, 7, N - 1)] == before
    assert ds.small == [1, 2, 3]  # below MIN_ELEMENTS: left as it is
    assert [c.attribute for c in done.converted] == ["self.records"]
    assert done.converted[0].was == f"list of {N:,} dict"
    assert done.converted[0].change == "self.records = memprobe.SharedList(self.records)"
    assert done.refused == []


def test_min_elements_decides_what_is_large() -> None:
    ds = Records()
    _, done = cure.convert(ds, min_elements=N + 1)
    assert done.converted == [] and isinstance(ds.records, list)
    _, done = cure.convert(ds, min_elements=3)
    assert [c.attribute for c in done.converted] == ["self.records", "self.small"]


def test_what_cannot_be_converted_is_named_with_why() -> None:
    ds = Mixed()
    _, done = cure.convert(ds)
    assert done.converted == []
    why = {r.attribute: r.why for r in done.refused}
    assert set(why) == {"self.by_key", "self.seen", "self.objects", "self.callbacks", "self.index.entries"}
    assert "looked up by key" in why["self.by_key"] and "searchsorted" in why["self.by_key"]
    assert "not read by position" in why["self.seen"]
    assert "numpy array of Python objects" in why["self.objects"]
    assert "record 0 (function) cannot be pickled" in why["self.callbacks"]
    assert "not those of a Index, whose code it does not know" in why["self.index.entries"]
    assert "self.index.entries = memprobe.SharedList(self.index.entries)" in why["self.index.entries"]
    # nothing was changed
    assert isinstance(ds.by_key, dict) and isinstance(ds.callbacks, list)
    assert isinstance(ds.index.entries, list)


def test_a_frames_string_columns_become_arrow_strings_and_other_object_columns_are_refused() -> None:
    ds = Frame()
    assert ds.frame["path"].dtype == object  # pandas 3 infers its own str dtype unless told
    before = ds[5]
    _, done = cure.convert(ds)
    assert str(ds.frame["path"].dtype) == "string"
    assert ds.frame["path"].dtype.storage == "pyarrow"
    assert ds.frame["tags"].dtype == object and ds.frame["label"].dtype == np.int64
    assert ds[5] == before
    (c,) = done.converted
    assert c.attribute == "self.frame" and "'path'" in c.now and "'tags'" not in c.now
    assert c.change == "self.frame = self.frame.astype({'path': 'string[pyarrow]'})"
    (r,) = done.refused
    assert r.attribute == "self.frame['tags']" and "not strings" in r.why


def test_a_wrapped_dataset_is_converted_too_and_a_list_dataset_becomes_a_shared_list() -> None:
    inner = Records()
    sub = Subset(inner, range(100))
    _, done = cure.convert(sub)
    assert [c.attribute for c in done.converted] == ["self.dataset.records"]
    assert isinstance(inner.records, memprobe.SharedList)
    assert sub[3] == inner.records[3]
    out, done = cure.convert([{"i": i} for i in range(N)])
    assert isinstance(out, memprobe.SharedList) and out[4] == {"i": 4}
    assert done.converted[0].attribute == "dataset"


@dataclass(frozen=True)
class Frozen:
    records: list


def test_an_attribute_that_cannot_be_set_is_refused_and_left_as_it_is() -> None:
    ds = Frozen([{"i": i} for i in range(N)])
    _, done = cure.convert(ds)
    assert done.converted == []
    (r,) = done.refused
    assert r.attribute == "self.records" and "cannot be set (FrozenInstanceError" in r.why
    assert isinstance(ds.records, list)


def test_the_conversion_report_round_trips_through_json(tmp_path: Path) -> None:
    _, done = cure.convert(Mixed())
    assert cure.Conversion.from_json(done.to_json()) == done


def test_the_changes_are_the_advice_own_lines() -> None:
    by_key = {v.key: v for v in cure.VARIANTS}
    assert by_key[cure.FREEZE].change().startswith("import gc; gc.freeze()")
    assert by_key[cure.THREADS].change().startswith("loader = memprobe.ThreadDataLoader(")
    assert 'multiprocessing_context="spawn"' in by_key[cure.SPAWN_VARIANT].change()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # Refused as text, nothing imported (before: `.x:y` a TypeError traceback, exit 1); a name
        # that is well made but cannot be imported: tests/integration/test_user_modules.py.
        (["cure", ".x:y"], "dataset factory '.x:y': '.x' is not the name of a module (a relative name"),
        (["cure", "mod:"], "dataset factory 'mod:': no callable after ':'"),
        (["cure", ":f"], "dataset factory ':f': no module before ':'"),
        (["cure", "x:y", "--kwargs", "{bad"], "--kwargs: not valid JSON"),
        (["cure", "x:y", "--kwargs", "[1]"], "--kwargs: a JSON object"),
        (["cure", "x:y", "--workers", "0"], "--workers: got 0"),
        (["cure", "x:y", "--workers", "100000"], "--workers: got 100000; allowed: at most"),
        (
            ["cure", "x:y", "--only", "as-is,frozen"],
            "--only: unknown variant 'frozen'; allowed: as-is, converted, gc-freeze, threads, spawn",
        ),
        (["cure", "x:y", "--only", ""], "--only: unknown variant ''"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memprobe: error: ") and message in err


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["cure", "--help"])
    assert "memprobe cure mypkg.data:build_dataset" in capsys.readouterr().out


def test_help_names_every_variant_only_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["cure", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    keys = ", ".join(v.key for v in cure.VARIANTS)
    assert f"--only VARIANTS run only these variants, comma-separated: {keys} (default: all)" in help_text


def test_only_runs_the_named_variants_in_the_tables_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--only spawn,as-is``: two runs (as is first, as in the table), two rows, no other
    variant run or shown."""
    ran = []

    def profile(ref: str, **kwargs: object) -> SimpleNamespace:
        ran.append((ref, kwargs["mode"], kwargs["out"]))
        return _run("growing" if kwargs["mode"] == "fork" else "flat")

    monkeypatch.setattr("memprobe.run.api.profile", profile)
    argv = ["cure", "memprobe.run.cure:converted", "--only", "spawn,as-is", "-o", str(tmp_path / "o")]
    assert main(argv) == 0
    assert ran == [
        ("memprobe.run.cure:converted", "fork", tmp_path / "o" / "r1-as-is"),
        ("memprobe.run.cure:converted", "spawn", tmp_path / "o" / "r1-spawn"),
    ]
    rows = [line[:28].strip() for line in capsys.readouterr().out.splitlines()]
    assert "as is (fork)" in rows and "spawn (as is)" in rows
    assert not {"SharedList / Arrow (fork)", "gc.freeze() (fork)", "threads"} & set(rows)


def test_a_skipped_variant_and_the_conversion_are_shown() -> None:
    """The table says the converted variant was not run, and why, with what was refused."""
    conv = cure.Conversion(
        [], [cure.Refused("self.index", "dict of 5 entries", "a dict is looked up by key")]
    )
    outcomes = [cure.Outcome(v) for v in cure.VARIANTS[:2]]
    outcomes[1].conversion, outcomes[1].skipped = conv, "nothing converted"
    text = cure_cli.render(outcomes, "m:f", {}, Path("out"))
    assert "converted for the SharedList / Arrow variant: nothing (not run)" in text
    assert "self.index (dict of 5 entries): a dict is looked up by key" in text
    rows = {line[:28].strip(): line[28:].strip() for line in text.splitlines()}
    assert rows["SharedList / Arrow (fork)"] == "not run: nothing converted"
    assert rows["as is (fork)"] == "not run"


def test_parser_registers_cure() -> None:
    from memprobe.cli import _parser

    args = _parser().parse_args(["cure", "m:f", "--rounds", "3"])
    assert isinstance(args, argparse.Namespace) and args.handler is cure_cli.main and args.rounds == 3


def _run(verdict: str) -> SimpleNamespace:
    """What the table reads of a memprobe.profile() result (a fork run of 2 workers)."""
    return SimpleNamespace(
        summary=SimpleNamespace(
            status="ok",
            error=None,
            verdict=verdict,
            mode="fork",
            workers=2,
            growth_threshold_mb=50.0,
            worker_uss_growth_mb=0.5 if verdict == "flat" else 80.0,
            main_uss_growth_mb=0.1,
            worker_uss_start_mb=9.0,
            total_pss_peak_mb=400.0,
            items_per_s=1000.0,
        )
    )


def test_the_output_escapes_what_the_dataset_names_and_prints_the_guard(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An attribute named with an escape sequence is shown escaped; a flat conversion gets the
    pytest guard for the user's factory, with its arguments."""
    flat, grew = _run("flat"), _run("growing")
    outcomes = [cure.Outcome(v) for v in cure.VARIANTS]
    outcomes[0].results = [grew]
    outcomes[1].results = [flat]
    outcomes[1].conversion = cure.Conversion(
        [cure.Converted("self.rec\x1b[2J", "list of 5 dict", "memprobe.SharedList", "self.rec = x")]
    )
    monkeypatch.setattr(cure, "run_variants", lambda *a, **k: outcomes)
    assert (
        main(["cure", "memprobe.run.cure:converted", "--kwargs", '{"n": 3}', "-o", str(tmp_path / "o")]) == 0
    )
    out = capsys.readouterr().out
    assert "\x1b" not in out and "self.rec\\x1b[2J: list of 5 dict -> memprobe.SharedList" in out
    assert 'memprobe.profile("memprobe.run.cure:converted", kwargs={\'n\': 3}, mode="fork", workers=2)' in out
    assert "result.assert_flat()" in out


class Holder:
    """A user's own structure holding a frame of strings."""

    def __init__(self) -> None:
        self.frame = Frame().frame


class HoldsAFrame(Dataset):
    def __init__(self) -> None:
        self.holder = Holder()


def test_a_frame_inside_the_users_own_class_is_named_and_left_as_it_is() -> None:
    ds = HoldsAFrame()
    _, done = cure.convert(ds)
    assert done.converted == []
    why = {r.attribute: r.why for r in done.refused}
    assert "not those of a Holder" in why["self.holder.frame"]
    assert (
        "self.holder.frame = self.holder.frame.astype({'path': 'string[pyarrow]'})"
        in why["self.holder.frame"]
    )
    assert ds.holder.frame["path"].dtype == object


def test_no_guard_is_printed_where_the_dataset_as_it_is_stayed_flat() -> None:
    outcomes = [cure.Outcome(v) for v in cure.VARIANTS[:2]]
    outcomes[0].results = outcomes[1].results = [_run("flat")]
    text = cure_cli.render(outcomes, "m:f", {}, Path("out"))
    assert "the dataset as it is stayed flat: no fix is needed" in text
    assert "def test_dataset_stays_flat" not in text


def test_a_flat_fix_that_costs_more_memory_in_all_is_not_offered_as_a_fix() -> None:
    """spawn stayed flat at a total PSS peak of 3,424 MB against 1,563 MB as is (each worker its
    own copy): set apart, not among the fixes (before: listed among "the fixes that stayed flat");
    the fixes come least memory first."""
    outcomes = [cure.Outcome(v) for v in cure.VARIANTS]
    peaks = {"as-is": 1563.0, "converted": 720.0, "gc-freeze": 1400.0, "threads": 650.0, "spawn": 3424.0}
    for o in outcomes:
        run = _run("growing" if o.variant.key == "as-is" else "flat")
        run.summary.total_pss_peak_mb = peaks[o.variant.key]
        o.results = [run]
    text = cure_cli.render(outcomes, "m:f", {}, Path("out"))
    fixes = text[text.index("what to change") : text.index("flat, but more memory in all")]
    assert "spawn" not in fixes
    order = [
        fixes.index(label)
        for label in ("threads: flat", "SharedList / Arrow (fork): flat", "gc.freeze() (fork): flat")
    ]
    assert order == sorted(order)
    assert (
        "  spawn (as is): flat, but +1,861.0 MB more in all" in text
        or "  spawn (as is): flat, but 1,861 MB more in all" in text
    )


def _copied(entries_mb: float, labels_mb: float) -> dict:
    """The analysis' attribution table of a run whose 2 workers copied so much of each path."""
    from memprobe.analysis.attribution import attribution

    worker = {
        "method": "frames",
        "copied_mb": entries_mb + labels_mb + 10.0,
        "paths_mb": [entries_mb, labels_mb],
        "other_paths_mb": 0.0,
        "outside_on_dataset_pages_mb": 0.0,
        "outside_elsewhere_mb": 10.0,
    }
    found = {
        "paths": ["dataset.index.entries", "dataset.labels"],
        "held_mb": [60.0, 5.0],
        "workers": [{**worker, "worker": k, "pid": k + 10} for k in range(2)],
    }
    return attribution({"dataset_info": {"attribution": found}}) or {}


def test_cure_shows_which_attribute_each_fix_moved_and_the_share_of_what_it_could_not_convert() -> None:
    grew, flat = _run("growing"), _run("flat")
    grew.summary.attribution = _copied(50.0, 5.0)
    flat.summary.attribution = _copied(50.0, 0.0)
    outcomes = [cure.Outcome(v) for v in cure.VARIANTS[:2]]
    outcomes[0].results, outcomes[1].results = [grew], [flat]
    outcomes[1].conversion = cure.Conversion(
        [cure.Converted("self.labels", "list of 5 int", "memprobe.SharedList", "self.labels = x")],
        [cure.Refused("self.index.entries", "list of 9 dict", "inside a Index")],
    )
    text = cure_cli.render(outcomes, "m:f", {}, Path("out"))
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.startswith("  dataset")}
    assert rows["dataset.labels"] == ["5.0", "0.0"]  # the fix moved it
    assert rows["dataset.index.entries"] == ["50.0", "50.0"]  # not converted: still copied
    assert (
        "not converted: dataset.index.entries holds 50.0 of the 65.0 MB each worker copied as is (77%)"
        in text
    )
