"""The scripts beside the package (benchmarks/, tools/) import only what memprobe has: a module
moved or renamed inside memprobe/ (issue 41 moved forty) left benchmarks/bench_forecast.py
importing ``limit`` from memprobe.core, which never held it; nothing ran it until a measurement
was wanted again. Read from their source, nothing of theirs is run."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for d in ("benchmarks", "tools") for p in (REPO / d).rglob("*.py"))


def _fallbacks(tree: ast.AST) -> set[int]:
    """Line numbers of imports in an ``except ImportError`` branch: a fallback for older trees."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                if isinstance(handler.type, ast.Name) and handler.type.id in (
                    "ImportError",
                    "ModuleNotFoundError",
                ):
                    lines |= {
                        n.lineno for n in ast.walk(handler) if isinstance(n, ast.ImportFrom | ast.Import)
                    }
    return lines


def missing(source: str) -> list[str]:
    """Each ``memprobe`` import of ``source`` that does not resolve: a module that does not
    exist, or a name the module lacks (neither an attribute nor a submodule)."""
    tree = ast.parse(source)
    skip = _fallbacks(tree)
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "memprobe"]
            found += [f"{node.lineno}: no module {n}" for n in names if importlib.util.find_spec(n) is None]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "memprobe"
        ):
            module = str(node.module)
            if importlib.util.find_spec(module) is None:
                found.append(f"{node.lineno}: no module {module}")
                continue
            loaded = importlib.import_module(module)
            for alias in node.names:
                if (
                    not hasattr(loaded, alias.name)
                    and importlib.util.find_spec(f"{module}.{alias.name}") is None
                ):
                    found.append(f"{node.lineno}: {module} has no {alias.name}")
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_memprobe_import_of_a_script_resolves(script: Path) -> None:
    assert missing(script.read_text()) == []


def test_a_name_a_module_lacks_is_found_and_a_fallback_for_older_trees_is_not() -> None:
    source = (
        "from memprobe.core import forecast_words, limit\n"
        "import memprobe.nowhere\n"
        "try:\n    from memprobe.probe.estimator import ExactPlanner\n"
        "except ImportError:\n    from memprobe.probe.exact import ExactPlanner\n"
    )
    assert missing(source) == ["1: memprobe.core has no limit", "2: no module memprobe.nowhere"]
