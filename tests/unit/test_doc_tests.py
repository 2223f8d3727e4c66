"""tools/check_doc_tests.py: every test the documentation names exists (run by make check-code)."""

from __future__ import annotations

from pathlib import Path

from inprocess import load_tool


def test_a_named_test_that_does_not_exist_is_found_and_one_that_does_is_not(tmp_path: Path) -> None:
    tool = load_tool("check_doc_tests")
    doc = tmp_path / "example.md"
    doc.write_text(
        "| case | what | `tests/unit/test_text.py::test_printable_lines_keeps_memprobe_s_own_newlines`, "
        "`...::test_no_such_thing` |\n"
        "| x | y | `tests/unit/test_text.py` `tests/unit/nope.py` `test_text.py` `test_nope.py` |\n"
        "| z | `test_printable_lines_keeps_memprobe_s_own_newlines[case]` `test_missing_one` `...[case]` |\n"
    )
    found = tool.problems(doc)
    assert [p.split(": ", 1)[0] for p in found] == [
        "example.md:1",
        "example.md:2",
        "example.md:2",
        "example.md:3",
    ], found
    assert (
        "test_no_such_thing" in found[0] and "tests/unit/nope.py" in found[1] and "test_nope.py" in found[2]
    )
    assert "test_missing_one" in found[3]


def test_the_documentation_names_only_tests_that_exist() -> None:
    assert load_tool("check_doc_tests").main([]) == 0
