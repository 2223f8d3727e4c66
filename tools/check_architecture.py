"""The code and docs/architecture.md agree (`make check-code` runs this).

The rules, read statically (the modules are parsed, never imported: no torch):

* docs/architecture.md's module table has one row per module: its first cell names the module
  in backticks by its path under ``memprobe/`` (``record/command.py``; a package by its folder,
  ``report/``, whose ``__init__.py`` holds the package's docstring), its second says its job in
  at most :data:`ROW_WORDS` words (the detail belongs in the module's docstring); a module with
  no row, a row naming a module that does not exist, or a row naming two is found.
* a module over 500 lines says why in its docstring: a paragraph that starts with
  ``Over 500 lines because``; a function over :data:`FUNCTION_LINES` lines likewise, with a
  paragraph that starts with ``Long because`` (the code's median function is 8 lines).
* every name a docstring (module, class, function) or a comment refers to exists: the targets of Sphinx
  roles (:func:`x`, :class:`x`, :mod:`x`, :meth:`x`, :data:`x`, :attr:`x`, :exc:`x`, ...) and
  dotted ``memprobe.a.b`` names in backticks. A role's target without ``memprobe.`` is looked
  up in the enclosing classes, then the module; names imported from outside memprobe, builtins
  and what a class inherits from outside memprobe are taken on trust.
* the import rules (tools/import_rules.py): no import circle, no layer reaching what it must not
  (neither pipeline the other, nothing below ``cli/`` reaching it, the report neither /proc nor
  the analysis' computing), no relative import; and no private name used across modules.

Exit 1 and one line per finding (``file:line: what``), 0 when there is none.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling tools/import_rules.py

import import_rules

REPO = Path(__file__).resolve().parents[1]
LIMIT = 500
REASON = "Over 500 lines because"
FUNCTION_LINES = 80  # a function longer than this says why ("Long because"); the median is 8
FUNCTION_REASON = "Long because"
ROW_WORDS = 45  # a module's row says its job; what it does in detail is its docstring's
SPAN = re.compile(r"``?([^`\n]+?)``?")
ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|data|attr|obj|exc|const):`([^`\n]+)`")
DOTTED = re.compile(r"^(memprobe(?:\.\w+)+)(?:\(\))?$")


@dataclass
class Module:
    name: str  # memprobe.a.b (a package: its name)
    path: Path
    rel: str  # its path under memprobe/: a/b.py, a/__init__.py
    tree: ast.Module
    lines: int
    is_package: bool
    scope: dict[str, ast.AST] = field(default_factory=dict)  # top-level name -> its definition
    exported: frozenset[str] = frozenset()  # __all__


def load(package: Path) -> dict[str, Module]:
    """Every module under ``package`` (the memprobe/ folder), by dotted name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        is_package = rel.name == "__init__.py"
        parts = [package.name, *rel.parent.parts] + ([] if is_package else [rel.stem])
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        module = Module(".".join(parts), path, rel.as_posix(), tree, len(text.splitlines()), is_package)
        module.scope, module.exported = _scope(tree.body)
        found[module.name] = module
    return found


def _scope(body: list[ast.stmt]) -> tuple[dict[str, ast.AST], frozenset[str]]:
    """Names defined at the top of a module or class body (defs, classes, assignments, imports,
    also inside if/try blocks), and the module's ``__all__``."""
    names: dict[str, ast.AST] = {}
    exported: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = node
                        if leaf.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                            exported |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                inner, more = _scope(block)
                names.update(inner)
                exported |= more
    return names, frozenset(exported)


class Resolver:
    """Whether a dotted name exists, looked up in the parsed modules."""

    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules
        self.root = next(iter(modules)).split(".")[0] if modules else "memprobe"

    def absolute(self, parts: list[str]) -> bool:
        """``memprobe.a.b.c``: the longest module prefix, then names inside it."""
        for cut in range(len(parts), 0, -1):
            module = self.modules.get(".".join(parts[:cut]))
            if module is not None:
                return self.in_module(module, parts[cut:])
        return False

    def in_module(self, module: Module, rest: list[str], seen: frozenset[str] = frozenset()) -> bool:
        if not rest:
            return True
        name, more = rest[0], rest[1:]
        if module.is_package and f"{module.name}.{name}" in self.modules:
            return self.in_module(self.modules[f"{module.name}.{name}"], more, seen)
        node = module.scope.get(name)
        if node is None:
            return name in module.exported and not more
        return self.in_node(module, node, name, more, seen)

    def in_node(
        self, module: Module, node: ast.AST, name: str, more: list[str], seen: frozenset[str]
    ) -> bool:
        if isinstance(node, ast.ClassDef):
            return self.in_class(module, node, more, seen)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return self.imported(module, node, name, more, seen)
        return True  # a function or a value: what lies inside it is not a name to check

    def imported(
        self,
        module: Module,
        node: ast.Import | ast.ImportFrom,
        name: str,
        more: list[str],
        seen: frozenset[str],
    ) -> bool:
        key = f"{module.name}:{name}"
        if key in seen:
            return True
        seen = seen | {key}
        if isinstance(node, ast.Import):
            alias = next(a for a in node.names if (a.asname or a.name).split(".")[0] == name)
            full = alias.name.split(".") if alias.asname else [name]
            if full[0] != self.root:
                return True  # from outside memprobe: taken on trust
            return self.absolute(full + more)
        source = self.source(module, node)
        if source.split(".")[0] != self.root:
            return True
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        if f"{source}.{alias.name}" in self.modules:
            return self.in_module(self.modules[f"{source}.{alias.name}"], more, seen)
        target = self.modules.get(source)
        return target is not None and self.in_module(target, [alias.name, *more], seen)

    def source(self, module: Module, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = module.name.split(".")
        base = base if module.is_package else base[:-1]
        base = base[: len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def in_class(
        self,
        module: Module,
        cls: ast.ClassDef,
        rest: list[str],
        seen: frozenset[str],
        *,
        strict: bool = False,
    ) -> bool:
        """Whether ``rest`` is found in ``cls`` or the classes it inherits from; what a base from outside
        memprobe holds is taken on trust unless ``strict``."""
        if not rest:
            return True
        names, _ = _scope(cls.body)
        for item in cls.body:  # self.x = ... in its methods
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for leaf in ast.walk(item):
                    if (
                        isinstance(leaf, ast.Attribute)
                        and isinstance(leaf.ctx, ast.Store)
                        and isinstance(leaf.value, ast.Name)
                        and leaf.value.id == "self"
                    ):
                        names.setdefault(leaf.attr, leaf)
        node = names.get(rest[0])
        if node is not None:
            if isinstance(node, ast.ClassDef):
                return self.in_class(module, node, rest[1:], seen, strict=strict)
            return True
        # Inherited: through a base class memprobe defines; one from outside is taken on trust.
        for base in cls.bases:
            dotted = _dotted(base)
            defined = module.scope.get(dotted[0]) if dotted else None
            if isinstance(defined, ast.ClassDef) and dotted is not None and len(dotted) == 1:
                if self.in_class(module, defined, rest, seen, strict=strict):
                    return True
                continue
            origin = None
            if isinstance(defined, (ast.Import, ast.ImportFrom)) and dotted is not None:
                origin = self.origin(module, defined, dotted)
            if origin is None:  # from outside memprobe (or not a name memprobe defines)
                if not strict:
                    return True
                continue
            target, path = origin
            inner = self._lookup(target, path)
            if isinstance(inner, ast.ClassDef):
                if self.in_class(target, inner, rest, seen, strict=strict):
                    return True
            elif self.in_module(target, [*path, *rest], seen):
                return True
        return False

    def _lookup(self, module: Module, path: list[str]) -> ast.AST | None:
        """A class defined at the top of ``module`` by a one-name path, else None."""
        return module.scope.get(path[0]) if len(path) == 1 else None

    def origin(
        self, module: Module, node: ast.Import | ast.ImportFrom, dotted: list[str]
    ) -> tuple[Module, list[str]] | None:
        """Where an imported name (``Base`` / ``pkg.Base``) is defined: its module and the path in
        it, or None when it comes from outside memprobe."""
        if isinstance(node, ast.Import):
            full = dotted
        else:
            alias = next(a for a in node.names if (a.asname or a.name) == dotted[0])
            full = [*self.source(module, node).split("."), alias.name, *dotted[1:]]
        if full[0] != self.root:
            return None
        for cut in range(len(full), 0, -1):
            target = self.modules.get(".".join(full[:cut]))
            if target is not None:
                return target, full[cut:]
        return None

    def relative(self, module: Module, classes: list[ast.ClassDef], parts: list[str]) -> bool:
        """A role's target as written inside ``module`` (and ``classes``, innermost last): a name
        of those classes (or what they inherit), of the module, a builtin; a single name is taken
        on trust inside a class with a base from outside memprobe (it may be inherited)."""
        if parts[0] == self.root:
            return self.absolute(parts)
        for cls in reversed(classes):
            if self.in_class(module, cls, parts, frozenset(), strict=True):
                return True
        if parts[0] in module.scope or parts[0] in module.exported:
            return self.in_module(module, parts)
        if parts[0] in vars(builtins):
            return True
        return len(parts) == 1 and any(self.in_class(module, c, parts, frozenset()) for c in classes)


def _dotted(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else [*inner, node.attr]
    if isinstance(node, ast.Subscript):  # Generic[T]
        return _dotted(node.value)
    return None


# -- the three rules -------------------------------------------------------------------------


def table_rows(doc: str) -> list[tuple[int, list[str], str]]:
    """(line number, the paths the first cell names, the second cell) of each row of the doc's
    tables that names something in backticks in its first cell."""
    rows = []
    for number, line in enumerate(doc.splitlines(), 1):
        cells = (
            [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        )
        if len(cells) < 2:
            continue
        named = [span.strip().removeprefix("memprobe/") for span in SPAN.findall(cells[0])]
        if named:
            rows.append((number, named, " | ".join(cells[1:])))
    return rows


def _key(module: Module) -> str:
    """How the table names a module: its path under memprobe/, a package by its folder."""
    return module.rel.rsplit("/", 1)[0] + "/" if module.is_package and "/" in module.rel else module.rel


def unnamed(modules: dict[str, Module], doc: str, doc_rel: str) -> list[str]:
    """Each module without a row of its own, each row naming no module that exists or two of
    them, each row longer than :data:`ROW_WORDS` words."""
    keys = {_key(m): m for m in modules.values()}
    rows = table_rows(doc)
    named = {p for _, paths, _ in rows for p in paths}
    found = [
        f"memprobe/{m.rel}:1: not named in {doc_rel} (give it a row: `{key}` | its job)"
        for key, m in keys.items()
        if key not in named
    ]
    for number, paths, text in rows:
        missing = [p for p in paths if p not in keys]
        if missing:
            found.append(
                f"{doc_rel}:{number}: a row for {', '.join(missing)}, which is not a module of memprobe/"
            )
        elif len(paths) > 1:
            found.append(
                f"{doc_rel}:{number}: one row names {len(paths)} modules ({', '.join(paths)}): one row each"
            )
        if len(text.split()) > ROW_WORDS:
            found.append(
                f"{doc_rel}:{number}: {len(text.split())} words, over {ROW_WORDS}: the detail belongs in the "
                "module's docstring"
            )
    return found


def too_long(modules: dict[str, Module]) -> list[str]:
    found = []
    for module in modules.values():
        if module.lines <= LIMIT:
            continue
        docstring = ast.get_docstring(module.tree) or ""
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", docstring)]
        if not any(p.startswith(REASON) for p in paragraphs):
            found.append(
                f"memprobe/{module.rel}:1: {module.lines} lines, over {LIMIT}, and its docstring has no "
                f"paragraph starting {REASON!r}"
            )
    return found


def long_functions(modules: dict[str, Module]) -> list[str]:
    """A function over :data:`FUNCTION_LINES` lines whose docstring does not say why."""
    found = []
    for module in modules.values():
        for node in ast.walk(module.tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length <= FUNCTION_LINES:
                continue
            docstring = ast.get_docstring(node) or ""
            paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", docstring)]
            if not any(p.startswith(FUNCTION_REASON) for p in paragraphs):
                found.append(
                    f"memprobe/{module.rel}:{node.lineno}: {node.name}() is {length} lines, over "
                    f"{FUNCTION_LINES}, and its docstring has no paragraph starting {FUNCTION_REASON!r}"
                )
    return found


def docstrings(tree: ast.Module):
    """(docstring node, enclosing classes) for the module and every class and function."""

    def walk(node: ast.AST, classes: list[ast.ClassDef]):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
            and isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ):
            yield body[0].value, [*classes, node] if isinstance(node, ast.ClassDef) else classes
        for child in ast.iter_child_nodes(node):
            inner = [*classes, node] if isinstance(node, ast.ClassDef) else classes
            yield from walk(child, inner)

    yield from walk(tree, [])


def references(text: str):
    """(line offset, name as written, dotted parts) of each name the text refers to."""
    for number, line in enumerate(text.split("\n")):
        for target in ROLE.findall(line):
            inner = re.search(r"<([^>]+)>\s*$", target)  # :func:`title <target>`
            name = (inner[1] if inner else target).strip().lstrip("~!").removesuffix("()")
            yield number, target, name.split(".")
        for span in SPAN.findall(ROLE.sub("", line)):
            m = DOTTED.match(span.strip())
            if m:
                yield number, span.strip(), m[1].split(".")


def comments(module: Module):
    """(line, text) of each comment of the module."""
    with open(module.path, "rb") as f:
        for token in tokenize.tokenize(f.readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string


def dangling(modules: dict[str, Module]) -> list[str]:
    resolver = Resolver(modules)
    found = []
    for module in modules.values():
        texts = [(node.lineno, node.value, classes) for node, classes in docstrings(module.tree)]
        every_class = [n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)]
        texts += [(line, text, None) for line, text in comments(module)]
        for line, text, classes in texts:
            for offset, written, parts in references(text):
                if not all(p.isidentifier() for p in parts):
                    continue
                # A comment's name may be of any class of its module.
                scopes = [classes] if classes is not None else [[], *([c] for c in every_class)]
                if not any(resolver.relative(module, inner, parts) for inner in scopes):
                    found.append(
                        f"memprobe/{module.rel}:{line + offset}: `{written}` names nothing that exists"
                    )
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(modules: dict[str, Module]) -> list[str]:
    """A private name (``_x``: a module, or a name in one) imported, or read as an attribute of an
    imported module, by another module."""
    found = []
    for module in modules.values():
        aliases: dict[str, str] = {}  # local name -> the memprobe module it is
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "memprobe":
                if any(map(_private, node.module.split("."))):
                    found.append(
                        f"memprobe/{module.rel}:{node.lineno}: imports the private module {node.module}"
                    )
                for a in node.names:
                    if _private(a.name):
                        found.append(
                            f"memprobe/{module.rel}:{node.lineno}: imports {a.name} from {node.module}"
                        )
                    elif f"{node.module}.{a.name}" in modules:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                aliases.update((a.asname or a.name, a.name) for a in node.names if a.name in modules)
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and aliases[node.value.id] != module.name
                and _private(node.attr)
            ):
                found.append(
                    f"memprobe/{module.rel}:{node.lineno}: uses {node.attr}, private to {aliases[node.value.id]}"
                )
    return found


def problems(repo: Path = REPO) -> list[str]:
    modules = load(repo / "memprobe")
    doc_path = repo / "docs" / "architecture.md"
    doc = doc_path.read_text(encoding="utf-8") if doc_path.is_file() else ""
    return (
        unnamed(modules, doc, "docs/architecture.md")
        + too_long(modules)
        + long_functions(modules)
        + dangling(modules)
        + import_rules.circles(modules)
        + import_rules.crossings(modules)
        + import_rules.relative(modules)
        + private_uses(modules)
    )


def main(argv: list[str]) -> int:
    repo = Path(argv[0]).resolve() if argv else REPO
    found = problems(repo)
    for p in found:
        print(f"error: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
