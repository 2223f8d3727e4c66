"""The scenarios that come with memprobe: run by name, listed, copied out (never overwriting)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memprobe.cli import main
from memprobe.run.scenario import load_scenario
from memprobe.run.scenario_file import SHIPPED_DIR, find_scenario, shipped_scenarios

REPO = Path(__file__).resolve().parents[2]
NAMES = sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml"))


def test_every_scenario_of_the_repository_is_shipped_under_its_name() -> None:
    assert list(shipped_scenarios()) == NAMES
    for name, path in shipped_scenarios().items():
        assert path.read_bytes() == (REPO / "scenarios" / f"{name}.yaml").read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_name_runs_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    scenario = load_scenario(find_scenario(name))
    assert scenario.runs()
    # Its factory modules are found next to it, wherever memprobe is installed.
    assert str(SHIPPED_DIR.resolve()) in scenario.sys_path or not scenario.factories


def test_a_path_that_exists_wins_over_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quick").write_text("name: mine\nbackends: [numpy]\nmodes: [thread]\n")
    assert load_scenario(find_scenario("quick")).name == "mine"
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "quick.yaml").write_text("name: also_mine\nbackends: [numpy]\n")
    assert load_scenario(find_scenario("scenarios/quick.yaml")).name == "also_mine"


def test_a_name_that_is_neither_gets_one_line_listing_the_shipped_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "list_vs_arrays", "-o", "out"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("memprobe: error: list_vs_arrays: no such scenario file")
    assert all(name in err for name in NAMES), err
    assert not (tmp_path / "out").exists()


def test_a_bad_name_is_shown_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "\x1b[2Jquick"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2Jquick" in err and len(err.splitlines()) == 1


def test_scenarios_lists_each_with_its_runs_and_description(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        scenario = load_scenario(SHIPPED_DIR / f"{name}.yaml")
        runs = len(scenario.runs())
        assert f"\n  {name} ({runs} run{'s' if runs > 1 else ''})\n" in out
        assert " ".join(scenario.description.split())[:20] in " ".join(out.split())
    assert "memprobe scenarios copy" in out


def test_copy_writes_the_scenario_and_the_module_it_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["scenarios", "copy", "user_datasets", "mine.yaml"]) == 0
    assert (tmp_path / "mine.yaml").read_bytes() == (REPO / "scenarios" / "user_datasets.yaml").read_bytes()
    assert (tmp_path / "user_datasets.py").read_bytes() == (
        REPO / "scenarios" / "user_datasets.py"
    ).read_bytes()
    copy = load_scenario(find_scenario("mine.yaml"))
    assert copy.sys_path[0] == str(tmp_path.resolve())  # where its factories are imported from
    # Into a folder: under the scenario's name; the module already there (the same) is kept.
    (tmp_path / "sub").mkdir()
    assert main(["scenarios", "copy", "quick", "sub"]) == 0
    assert (tmp_path / "sub" / "quick.yaml").read_bytes() == (REPO / "scenarios" / "quick.yaml").read_bytes()
    assert main(["scenarios", "copy", "quick"]) == 0
    assert (tmp_path / "quick.yaml").is_file()


def test_copy_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("my own\n")
    assert main(["scenarios", "copy", "quick", "mine.yaml"]) == 2
    assert (tmp_path / "mine.yaml").read_text() == "my own\n"
    # A different user_datasets.py next to it: nothing is written, not even the YAML.
    (tmp_path / "user_datasets.py").write_text("# mine\n")
    assert main(["scenarios", "copy", "user_datasets", "other.yaml"]) == 2
    assert (tmp_path / "user_datasets.py").read_text() == "# mine\n"
    assert not (tmp_path / "other.yaml").exists()
    assert main(["scenarios", "copy", "nope", "x.yaml"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("memprobe: error: ") for line in err), err
    assert "exists" in err[0] and "user_datasets.py: exists" in err[1] and "quick" in err[2]
    assert not (tmp_path / "x.yaml").exists()


def test_copy_into_a_missing_folder_writes_nothing_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["scenarios", "copy", "user_datasets", "nodir/mine.yaml"]) == 2
    assert main(["scenarios", "copy", "quick", "nodir/"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "memprobe: error: scenarios copy: nodir/mine.yaml: cannot write: No such file or directory; "
        "nothing was written"
    )
    assert err[1] == "memprobe: error: scenarios copy: nodir/: no such folder; nothing was written"
    assert list(tmp_path.iterdir()) == []


def test_copy_shows_a_strange_file_name_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["scenarios", "copy", "quick", "\x1b[2J.yaml"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J.yaml" in out
    assert (tmp_path / "\x1b[2J.yaml").read_bytes() == (REPO / "scenarios" / "quick.yaml").read_bytes()
