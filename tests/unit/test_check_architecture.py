"""tools/check_architecture.py: the modules and docs/architecture.md agree (run by make check-code).

Each test builds a small fake tree (memprobe/ and docs/architecture.md) in tmp_path."""

from __future__ import annotations

import textwrap
from pathlib import Path

from inprocess import load_tool

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path, files: dict[str, str], doc: str) -> Path:
    for rel, text in files.items():
        path = root / "memprobe" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "architecture.md").write_text(textwrap.dedent(doc), encoding="utf-8")
    return root


DOC = """\
| module | role |
|---|---|
| `__init__.py` | the API |
| `run/` | the run path: `session.py` runs a scenario |
| `core/` | shared: `text.py` escapes |
"""
FILES = {
    "__init__.py": '"""memprobe."""\n',
    "run/__init__.py": '"""The run path."""\n',
    "run/session.py": '"""Sessions."""\n',
    "core/__init__.py": '"""Core."""\n',
    "core/text.py": '"""Text."""\n',
}


def test_a_tree_that_agrees_with_its_doc_has_no_finding(tmp_path: Path) -> None:
    assert load_tool("check_architecture").problems(_tree(tmp_path, FILES, DOC)) == []


def test_a_module_the_doc_does_not_name_is_found_with_its_path(tmp_path: Path) -> None:
    tool = load_tool("check_architecture")
    root = _tree(tmp_path, {**FILES, "run/runner.py": '"""Runner."""\n', "probe/__init__.py": ""}, DOC)
    found = tool.problems(root)
    assert found == [
        "memprobe/probe/__init__.py:1: not named in docs/architecture.md (name it in backticks as `probe/`)",
        "memprobe/run/runner.py:1: not named in docs/architecture.md (name it in backticks as `run/runner.py`)",
    ]
    # Named in a package's row by its path under the package, or anywhere by its full path: found no more.
    doc = (
        DOC.replace("runs a scenario", "runs a scenario, `runner.py` supervises")
        + "\n`probe/` reads /proc.\n"
    )
    (root / "docs" / "architecture.md").write_text(doc, encoding="utf-8")
    assert tool.problems(root) == []


def test_a_module_over_500_lines_must_say_why_in_its_docstring(tmp_path: Path) -> None:
    tool = load_tool("check_architecture")
    body = "x = 1\n" * 500
    files = {
        **FILES,
        "run/session.py": '"""Sessions.\n\nIt is long."""\n' + body,
        "core/text.py": '"""Text.\n\nOver 500 lines because it is one table of\nescapes."""\n' + body,
    }
    found = tool.problems(_tree(tmp_path, files, DOC))
    assert len(found) == 1 and found[0].startswith("memprobe/run/session.py:1: 503 lines, over 500"), found
    assert "'Over 500 lines because'" in found[0]
    # Exactly 500 lines is within the limit.
    files["run/session.py"] = '"""Sessions."""\n' + "x = 1\n" * 499
    assert load_tool("check_architecture").problems(_tree(tmp_path, files, DOC)) == []


def test_a_docstring_or_comment_naming_what_does_not_exist_is_found_with_its_line(tmp_path: Path) -> None:
    session = '''\
        """Sessions: :func:`run_scenario`, :func:`memprobe.core.text.printable`, ``memprobe.core.text``,
        :class:`Session`, :meth:`Session.finish`, :attr:`Session.folder`, :class:`~memprobe.run.session.Base`,
        :exc:`OSError`, :class:`torch.utils.data.DataLoader`, `memprobe.core.text.printable()`."""

        import torch

        from memprobe.core import text
        from memprobe.core.text import printable as shown


        def run_scenario():
            """Calls :func:`shown` and :func:`text.printable`; see :func:`missing_helper`."""


        class Base:
            def start(self):
                pass


        class Model(torch.nn.Module):
            """:meth:`forward` (from torch)."""


        class Session(Base):
            """:meth:`finish`, :meth:`start` (inherited), :meth:`stop`."""

            def __init__(self):
                self.folder = None

            def finish(self):
                """Ends it; :meth:`Session.gone` does not exist, `memprobe.core.text.gone` neither."""


        # see :func:`memprobe.run.session.with_lineage` and :meth:`Session.finish`
        '''
    files = {
        **FILES,
        "run/session.py": session,
        "core/text.py": '"""Text."""\n\ndef printable(s):\n    return s\n',
    }
    found = load_tool("check_architecture").problems(_tree(tmp_path, files, DOC))
    assert found == [
        "memprobe/run/session.py:12: `missing_helper` names nothing that exists",
        "memprobe/run/session.py:25: `stop` names nothing that exists",
        "memprobe/run/session.py:31: `Session.gone` names nothing that exists",
        "memprobe/run/session.py:31: `memprobe.core.text.gone` names nothing that exists",
        "memprobe/run/session.py:34: `memprobe.run.session.with_lineage` names nothing that exists",
    ]


def test_main_prints_one_line_per_finding_and_exits_1(tmp_path: Path, capsys) -> None:
    tool = load_tool("check_architecture")
    root = _tree(tmp_path, {**FILES, "run/runner.py": '"""See :func:`nothing`."""\n'}, DOC)
    assert tool.main([str(root)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "error: memprobe/run/runner.py:1: not named in docs/architecture.md (name it in backticks as `run/runner.py`)",
        "error: memprobe/run/runner.py:1: `nothing` names nothing that exists",
    ]
    assert tool.main([str(_tree(tmp_path / "ok", FILES, DOC))]) == 0


def test_the_checkout_itself_names_every_module_in_docs_architecture() -> None:
    tool = load_tool("check_architecture")
    assert [p for p in tool.problems(REPO) if "not named in" in p] == []


def test_a_report_module_reaching_the_probe_through_another_module_is_found_with_the_chain(
    tmp_path: Path,
) -> None:
    files = {
        **FILES,
        "report/__init__.py": '"""Report."""\n',
        "report/page.py": '"""Page."""\nfrom memprobe.core import words\n',
        "core/words.py": '"""Words."""\n',
        "probe/__init__.py": '"""Probe."""\n',
        "probe/tree.py": '"""Tree."""\n',
    }
    doc = DOC + "| `report/` | `page.py` |\n| `probe/` | `tree.py` |\n| `core/words.py` | words |\n"
    tool = load_tool("check_architecture")
    assert tool.problems(_tree(tmp_path, files, doc)) == []
    # the words now come from the probe: the page reaches it through them, and so does the core
    (tmp_path / "memprobe" / "core" / "words.py").write_text(
        '"""Words."""\nfrom memprobe.probe.tree import x\n'
    )
    assert tool.problems(tmp_path) == [
        (
            "memprobe/report/page.py:1: memprobe.report reaches memprobe.probe: "
            "memprobe.report.page -> memprobe.core.words -> memprobe.probe"
        ),
        "memprobe/core/words.py:1: memprobe.core reaches memprobe.probe: memprobe.core.words -> memprobe.probe",
    ]


def test_a_private_name_used_by_another_module_is_found(tmp_path: Path) -> None:
    files = {
        **FILES,
        "run/session.py": '"""Sessions."""\nfrom memprobe.core import text\n\n\ndef f():\n    return text.escape()\n',
    }
    tool = load_tool("check_architecture")
    assert tool.problems(_tree(tmp_path, files, DOC)) == []
    (tmp_path / "memprobe" / "run" / "session.py").write_text(
        '"""Sessions."""\nfrom memprobe.core import text\nfrom memprobe.core.text import _table\n\n\n'
        "def f():\n    return text._escape()\n"
    )
    assert tool.problems(tmp_path) == [
        "memprobe/run/session.py:3: imports _table from memprobe.core.text",
        "memprobe/run/session.py:7: uses _escape, private to memprobe.core.text",
    ]
