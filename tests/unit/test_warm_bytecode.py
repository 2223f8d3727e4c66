"""tools/warm_bytecode.py: `make install` compiles what memprobe imports, and only that.

Its list of libraries is what memprobe imports inside functions (a module's top-level imports
come with the module itself, which the tool imports); a library added that way and not to the list
would be compiled again by every process that imports it where PYTHONDONTWRITEBYTECODE is set."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from inprocess import load_tool

REPO = Path(__file__).resolve().parents[2]
# Left to its first import on purpose (the tool's docstring says why).
NOT_WARMED = {"nvidia"}


def _imported_in_functions(tree: ast.Module) -> set[str]:
    """The top-level packages a module imports below its top level (in functions, methods or
    blocks), leaving out the standard library, memprobe itself and relative imports."""
    top = {id(node) for node in tree.body}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in top:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n != "memprobe" and n not in sys.stdlib_module_names}


def test_every_library_memprobe_imports_inside_a_function_is_warmed_by_make_install() -> None:
    warmed = {name.split(".")[0] for name in load_tool("warm_bytecode").RUNTIME}
    missing = {}
    for path in sorted((REPO / "memprobe").rglob("*.py")):
        for name in _imported_in_functions(ast.parse(path.read_text(encoding="utf-8"))) - warmed - NOT_WARMED:
            missing.setdefault(name, path.relative_to(REPO).as_posix())
    assert not missing, f"imported inside functions but not in warm_bytecode.RUNTIME: {missing}"


def test_the_rule_sees_an_import_in_a_function_and_not_one_at_the_top() -> None:
    tree = ast.parse(
        "import numpy\nimport os\n\ndef f():\n    import scipy.linalg\n    from PIL import Image\n"
        "    import json\n    from . import x\n    from memprobe.core import text\n"
    )
    assert _imported_in_functions(tree) == {"scipy", "PIL"}
