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
| `run/` | the run path |
| `run/session.py` | runs a scenario |
| `core/` | shared |
| `core/text.py` | escapes |
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
        "memprobe/probe/__init__.py:1: not named in docs/architecture.md (give it a row: `probe/` | its job)",
        "memprobe/run/runner.py:1: not named in docs/architecture.md (give it a row: `run/runner.py` | its job)",
    ]
    # A row of its own each: found no more (a mention in another row's words is no row).
    doc = DOC.replace("| runs a scenario |", "| runs a scenario with `run/runner.py` |")
    (root / "docs" / "architecture.md").write_text(doc, encoding="utf-8")
    assert len(tool.problems(root)) == 2
    doc = DOC + "| `run/runner.py` | supervises |\n| `probe/` | reads /proc |\n"
    (root / "docs" / "architecture.md").write_text(doc, encoding="utf-8")
    assert tool.problems(root) == []


def test_a_row_for_what_does_not_exist_names_two_modules_or_runs_long_is_found(tmp_path: Path) -> None:
    """A module moved or deleted leaves its row; a row naming two modules, or holding the
    module's whole story, is no index (issue 41)."""
    tool = load_tool("check_architecture")
    doc = (
        DOC
        + "| `run/ending.py` | a process group of its own |\n"
        + "| `run/session.py`, `core/text.py` | both |\n"
        + "| `core/` | "
        + " ".join(["word"] * 46)
        + " |\n"
    )
    assert tool.problems(_tree(tmp_path, FILES, doc)) == [
        "docs/architecture.md:8: a row for run/ending.py, which is not a module of memprobe/",
        "docs/architecture.md:9: one row names 2 modules (run/session.py, core/text.py): one row each",
        "docs/architecture.md:10: 46 words, over 45: the detail belongs in the module's docstring",
    ]


def test_a_function_over_80_lines_must_say_why_in_its_docstring(tmp_path: Path) -> None:
    tool = load_tool("check_architecture")
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    files = {
        **FILES,
        "run/session.py": '"""Sessions."""\n\n\ndef run():\n    """Runs."""\n' + body,
        "core/text.py": '"""Text."""\n\n\ndef table():\n    """A table.\n\n    Long because it is one table."""\n'
        + body,
    }
    found = tool.problems(_tree(tmp_path, files, DOC))
    assert found == [
        (
            "memprobe/run/session.py:4: run() is 81 lines, over 80, and its docstring has no paragraph "
            "starting 'Long because'"
        )
    ]
    files["run/session.py"] = (
        '"""Sessions."""\n\n\ndef run():\n' + body[: body.rindex("    x78")] + "    return 1\n"
    )  # 80 lines
    assert tool.problems(_tree(tmp_path / "exact", files, DOC)) == []


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
        "error: memprobe/run/runner.py:1: not named in docs/architecture.md (give it a row: `run/runner.py` | its job)",
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
    doc = DOC + "| `report/` | pages |\n| `report/page.py` | a page |\n| `probe/` | probe |\n"
    doc += "| `probe/tree.py` | a tree |\n| `core/words.py` | words |\n"
    tool = load_tool("check_architecture")
    assert tool.problems(_tree(tmp_path, files, doc)) == []
    # the words now come from the probe: the page reaches it through them, and so does the core
    (tmp_path / "memprobe" / "core" / "words.py").write_text(
        '"""Words."""\nfrom memprobe.probe.tree import x\n'
    )
    assert tool.problems(tmp_path) == [
        "memprobe/core/words.py:1: memprobe.core reaches memprobe.probe: memprobe.core.words -> memprobe.probe",
        (
            "memprobe/report/page.py:1: memprobe.report reaches memprobe.probe: "
            "memprobe.report.page -> memprobe.core.words -> memprobe.probe"
        ),
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


def _pipelines(extra: dict[str, str]) -> dict[str, str]:
    return {
        **FILES,
        "record/__init__.py": '"""Record."""\n',
        "record/command.py": '"""Command."""\n',
        "cli/__init__.py": '"""CLI."""\n',
        "cli/flags.py": '"""Flags."""\n',
        **extra,
    }


PIPELINE_DOC = (
    DOC
    + "| `record/` | record |\n| `record/command.py` | command |\n| `cli/` | cli |\n| `cli/flags.py` | flags |\n"
)


def test_an_import_circle_is_found_lazy_imports_too_type_checking_ones_not(tmp_path: Path) -> None:
    tool = load_tool("check_architecture")
    files = {
        **FILES,
        "core/text.py": '"""Text."""\n\n\ndef f():\n    from memprobe.core import words  # lazy: it counts\n',
        "core/words.py": '"""Words."""\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from memprobe.core import text\n',
    }
    doc = DOC + "| `core/words.py` | words |\n"
    assert tool.problems(_tree(tmp_path, files, doc)) == []  # an import for types only runs never
    (tmp_path / "memprobe" / "core" / "words.py").write_text('"""Words."""\nfrom memprobe.core import text\n')
    assert tool.problems(tmp_path) == [
        (
            "memprobe/core/text.py:1: an import circle: memprobe.core.text -> memprobe.core.words (each imports the "
            "next, by some chain)"
        )
    ]


def test_a_pipeline_importing_the_other_or_the_command_line_is_found(tmp_path: Path) -> None:
    """Issue 41: record/ built on run/ (its supervisor, its session) and cli/ (a flag check)."""
    tool = load_tool("check_architecture")
    assert tool.problems(_tree(tmp_path, _pipelines({}), PIPELINE_DOC)) == []
    command = tmp_path / "memprobe" / "record" / "command.py"
    command.write_text('"""Command."""\nfrom memprobe.cli.flags import bounded\n')
    assert tool.problems(tmp_path) == [
        "memprobe/record/command.py:1: memprobe.record reaches memprobe.cli: memprobe.record.command -> memprobe.cli",
    ]
    command.write_text('"""Command."""\n\n\ndef f():\n    from memprobe.run import session\n')
    assert tool.problems(tmp_path) == [
        "memprobe/record/command.py:1: memprobe.record reaches memprobe.run: memprobe.record.command -> memprobe.run",
    ]


def test_one_import_that_crosses_is_one_line_not_one_per_module_of_the_layer_behind_it(
    tmp_path: Path,
) -> None:
    """A planted record->run import in record/marks.py, which record/command.py and
    record/watch.py import: the check named all three, each as if it crossed (eight lines for
    one import into report/ from results/files.py). The import that crosses is the one named."""
    tool = load_tool("check_architecture")
    files = _pipelines(
        {
            "record/marks.py": '"""Marks."""\nfrom memprobe.run import session\n',
            "record/command.py": '"""Command."""\nfrom memprobe.record import marks\n',
            "record/watch.py": '"""Watch."""\nfrom memprobe.record import command\n',
        }
    )
    doc = PIPELINE_DOC + "| `record/marks.py` | marks |\n| `record/watch.py` | watch |\n"
    assert tool.problems(_tree(tmp_path, files, doc)) == [
        "memprobe/record/marks.py:1: memprobe.record reaches memprobe.run: memprobe.record.marks -> memprobe.run",
    ]


def test_a_relative_import_is_found(tmp_path: Path) -> None:
    tool = load_tool("check_architecture")
    files = {**FILES, "core/text.py": '"""Text."""\nfrom . import words\n', "core/words.py": '"""Words."""\n'}
    assert tool.problems(_tree(tmp_path, files, DOC + "| `core/words.py` | words |\n")) == [
        "memprobe/core/text.py:2: a relative import (from .): name the module in full"
    ]


def test_the_checkout_itself_keeps_every_rule() -> None:
    """The whole of memprobe/ and docs/architecture.md: no circle, no crossing, every row true."""
    assert load_tool("check_architecture").problems(REPO) == []
