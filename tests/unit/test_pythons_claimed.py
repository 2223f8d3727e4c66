"""What is claimed is what was tested (issue 45): the Pythons pyproject.toml's classifiers list are
exactly those docs/pythons.md's results table has whole-suite runs of, each run's failures named
in its row (a failure nobody named would read as a pass); the README names the same Pythons, and
requires-python lets each of them install."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| (3\.\d+)\.\d+(t?) \|(.*)$", re.M)
RESULT = re.compile(r"([\d,]+) passed, (\d+) failed, (\d+) skipped")


def claimed() -> tuple[set[str], bool, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    versions = {
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    free = any(
        c.startswith("Programming Language :: Python :: Free Threading") for c in project["classifiers"]
    )
    return versions, free, project["requires-python"]


def runs_listed() -> list[tuple[str, str]]:
    """docs/pythons.md's results rows: ("3.13t" (minor version, t for free-threaded), the row's rest)."""
    text = (REPO / "docs" / "pythons.md").read_text()
    table = text.split("## The results", 1)[1].split("\n## ", 1)[0]
    return [(m[1] + m[2], m[3]) for m in ROW.finditer(table)]


def test_the_classifiers_list_exactly_the_pythons_the_suite_ran_on_and_each_failure_is_named() -> None:
    versions, free, requires = claimed()
    rows = runs_listed()
    assert {v.rstrip("t") for v, _ in rows} == versions
    assert free == any(v.endswith("t") for v, _ in rows)
    for version, rest in rows:
        result = RESULT.search(rest)
        assert result, f"{version}: no 'N passed, N failed, N skipped' in its row"
        named = re.findall(r"`tests/[^`]+::test_[^`]+`", rest.rsplit("|", 2)[-2])
        assert len(named) == int(result[2]), f"{version}: {result[0]}, its failures named: {named}"
        assert version.rstrip("t") + ".0" in SpecifierSet(requires), (version, requires)


def test_the_readme_names_the_same_pythons() -> None:
    versions, free, _ = claimed()
    sentence = re.search(r"Tested on CPython ([^:]+):", (REPO / "README.md").read_text())
    assert sentence, "the README says no 'Tested on CPython ...:'"
    named = set(re.findall(r"\b3\.\d+t?\b", sentence[1]))
    assert {v.rstrip("t") for v in named} == versions
    assert free == any(v.endswith("t") for v in named)
    assert named == {v for v, _ in runs_listed()}
