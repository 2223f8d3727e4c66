"""The import rules of memprobe/ (`tools/check_architecture.py` runs them; the modules are parsed,
never imported). Data flows one way: the pipelines write results folders, the analysis computes
from them, the report and the terminal format what it computed; so

* no import circle among the modules (lazy imports inside functions count; imports under
  ``if TYPE_CHECKING:`` do not run and do not count; a package's ``__init__`` is its door and
  is left out of circles);
* a layer never reaches, by any chain of imports, a package it must not (:data:`NEVER_REACHES`):
  neither pipeline the other, nothing below the command line ``cli/``, the report neither /proc
  nor the analysis' computing (it formats what the analysis left);
* no relative import (``from . import x``): every module names what it imports in full.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Protocol

PIPELINES = ("memprobe.run", "memprobe.record")
EVERYTHING_ABOVE = ("memprobe.cli", "memprobe.pages", "memprobe.pytest_plugin", "memprobe.integrations")
# A module of the package on the left never reaches one on the right. The core serves everyone;
# the probe reads processes; results/ knows files; the analysis computes from a folder alone; the
# report and the exports format (their imports of the analysis are for types only); the session machinery serves
# both pipelines and neither owns it; each pipeline reaches the other never; the live view is
# fed rows and knows no pipeline; the trainers' callbacks (integrations/) are above the record
# pipeline, beside the command line.
NEVER_REACHES: dict[str, tuple[str, ...]] = {
    # The trainers' callbacks record the training process as `record` does, from inside it: the
    # record pipeline and the live view, never the scenario pipeline or the command line.
    "memprobe.integrations": ("memprobe.run", "memprobe.cli", "memprobe.pages", "memprobe.pytest_plugin"),
    "memprobe.core": (
        "memprobe.probe",
        "memprobe.results",
        "memprobe.analysis",
        "memprobe.report",
        "memprobe.session",
        "memprobe.live",
        *PIPELINES,
        *EVERYTHING_ABOVE,
    ),
    "memprobe.probe": (
        "memprobe.results",
        "memprobe.analysis",
        "memprobe.report",
        "memprobe.session",
        "memprobe.live",
        *PIPELINES,
        *EVERYTHING_ABOVE,
    ),
    "memprobe.results": (
        "memprobe.probe",
        "memprobe.analysis",
        "memprobe.report",
        "memprobe.session",
        "memprobe.live",
        *PIPELINES,
        *EVERYTHING_ABOVE,
    ),
    "memprobe.analysis": (
        "memprobe.probe",
        "memprobe.report",
        "memprobe.session",
        "memprobe.live",
        *PIPELINES,
        *EVERYTHING_ABOVE,
    ),
    "memprobe.report": (
        "memprobe.probe",
        "memprobe.analysis",
        "memprobe.session",
        "memprobe.live",
        *PIPELINES,
        *EVERYTHING_ABOVE,
    ),
    "memprobe.export": (
        "memprobe.probe",
        "memprobe.analysis",
        "memprobe.session",
        "memprobe.live",
        *PIPELINES,
        *EVERYTHING_ABOVE,
    ),
    "memprobe.live": ("memprobe.session", *PIPELINES, *EVERYTHING_ABOVE),
    "memprobe.session": (*PIPELINES, "memprobe.live", *EVERYTHING_ABOVE),
    "memprobe.run": ("memprobe.record", "memprobe.live", *EVERYTHING_ABOVE),
    "memprobe.record": ("memprobe.run", "memprobe.live", *EVERYTHING_ABOVE),
}


class Parsed(Protocol):
    name: str
    rel: str
    tree: ast.Module
    is_package: bool


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that runs, wherever it is written (module level, in a function),
    but those under ``if TYPE_CHECKING:`` (its ``else:`` runs, and counts)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _type_checking(child):
            for inner in child.orelse:
                yield from import_nodes(ast.Module(body=[inner], type_ignores=[]))
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from import_nodes(child)


def imports(module: Parsed, modules: dict[str, Parsed]) -> set[str]:
    """The memprobe modules ``module`` imports (``from a import b``: ``a.b`` where it is a module;
    a module imports its packages' ``__init__`` too)."""
    out: set[str] = set()
    for node in import_nodes(module.tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            out.update(
                ".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules
            )
    out.discard(module.name)
    return out


def graph(modules: dict[str, Parsed]) -> dict[str, set[str]]:
    return {name: imports(m, modules) for name, m in modules.items()}


def circles(modules: dict[str, Parsed]) -> list[str]:
    """Each import circle (a strongly connected set of modules, packages' ``__init__`` left out)."""
    edges = graph(modules)
    nodes = [n for n, m in modules.items() if not m.is_package]
    inside = {n: sorted(t for t in edges[n] if t in nodes) for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan's, iterative over each node's edges
        work = [(v, iter(inside[v]))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        while work:
            here, edges_left = work[-1]
            nxt = next(edges_left, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[here])
                if low[here] == index[here]:
                    part = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        part.append(w)
                        if w == here:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
                continue
            if nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(inside[nxt])))
            elif nxt in on:
                low[here] = min(low[here], index[nxt])

    for v in nodes:
        if v not in index:
            strong(v)
    return [
        f"memprobe/{modules[part[0]].rel}:1: an import circle: {' -> '.join(part)} (each imports the next, "
        "by some chain)"
        for part in found
    ]


def crossings(modules: dict[str, Parsed]) -> list[str]:
    """A module that reaches a package its layer must not (:data:`NEVER_REACHES`), with the chain."""
    edges = graph(modules)
    found = []
    for layer, banned in NEVER_REACHES.items():
        for name in sorted(n for n in modules if n == layer or n.startswith(layer + ".")):
            seen, stack = {name: [name]}, [name]
            while stack:
                here = stack.pop()
                for nxt in sorted(edges[here]):
                    if nxt in seen or nxt == "memprobe":
                        continue
                    seen[nxt] = [*seen[here], nxt]
                    if any(nxt == b or nxt.startswith(b + ".") for b in banned):
                        # Through another module of the layer: that one is named, with the import
                        # that crosses; one planted import is one line, not one per importer.
                        if not any(m.startswith(layer + ".") for m in seen[nxt][1:-1]):
                            found.append(
                                f"memprobe/{modules[name].rel}:1: {layer} reaches {nxt}: "
                                + " -> ".join(seen[nxt])
                            )
                        stack.clear()
                        break
                    stack.append(nxt)
    return found


def relative(modules: dict[str, Parsed]) -> list[str]:
    """Every relative import (``from . import x``, ``from .a import b``)."""
    return [
        f"memprobe/{m.rel}:{node.lineno}: a relative import (from {'.' * node.level}{node.module or ''}): "
        "name the module in full"
        for m in modules.values()
        for node in ast.walk(m.tree)
        if isinstance(node, ast.ImportFrom) and node.level
    ]
