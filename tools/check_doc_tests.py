"""Every test the documentation names exists (`make check-code` runs this).

docs/reliability.md proves each claim with a test, and README.md and docs/**/*.md cite tests
too; a claim whose test was never written (or was renamed) reads as proven and is not. This
reads the names in backticks and checks each against the test files:

* ``tests/<path>.py`` - the file exists;
* ``tests/<path>.py::test_name[params]`` - the file defines ``test_name``;
* ``...::test_name`` - the module last named on the same line defines it (any test file when
  none was);
* ``test_name[params]`` alone - docs/reliability.md says its tests are in
  tests/integration/test_faults.py unless named otherwise, so there; elsewhere, any test file;
* ``test_file.py`` alone - some file of that name under tests/.

Parameters (``[...]``, ``...[case]``) are not checked: they are generated. Exit 1 and one line
per missing test (file:line: what), 0 when every one exists.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODULE = {"docs/reliability.md": "tests/integration/test_faults.py"}
SPAN = re.compile(r"`([^`\n]+)`")
NAMED = re.compile(
    r"^(?P<path>tests/[\w/.-]+\.py)?(?:(?P<dots>\.\.\.)?::)?(?P<name>test_\w+)?(?:\[.*\])?$|^(?P<file>test_\w+\.py)$"
)


@cache
def defined(path: Path) -> frozenset[str]:
    """The test functions a file defines (``def test_x`` / ``async def test_x``, any indentation)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return frozenset(re.findall(r"^\s*(?:async\s+)?def\s+(test_\w+)\s*\(", text, re.MULTILINE))


@cache
def test_files() -> tuple[Path, ...]:
    return tuple(sorted((REPO / "tests").rglob("test_*.py")))


def anywhere(name: str) -> bool:
    return any(name in defined(f) for f in test_files())


def problems(doc: Path) -> list[str]:
    rel = doc.relative_to(REPO).as_posix() if doc.is_relative_to(REPO) else doc.name
    found = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        module: str | None = None  # the test module last named on this line
        for span in SPAN.findall(line):
            m = NAMED.match(span.strip())
            if m is None or not (m["path"] or m["name"] or m["file"]):
                continue
            where = f"{rel}:{number}"
            if m["file"]:
                if not any(f.name == m["file"] for f in test_files()):
                    found.append(f"{where}: {span}: no such test file under tests/")
                continue
            if m["path"]:
                module = m["path"]
                if not (REPO / module).is_file():
                    found.append(f"{where}: {span}: no such file")
                    continue
                if m["name"] and m["name"] not in defined(REPO / module):
                    found.append(f"{where}: {span}: {module} defines no {m['name']}")
            elif m["name"]:
                home = module if m["dots"] else DEFAULT_MODULE.get(rel)
                if m["dots"] and home is None:
                    ok = anywhere(m["name"])
                else:
                    ok = m["name"] in defined(REPO / home) if home else anywhere(m["name"])
                if not ok:
                    found.append(f"{where}: {span}: no test {m['name']} in {home or 'tests/'}")
    return found


def main(argv: list[str]) -> int:
    docs = [Path(a).resolve() for a in argv] or [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = [p for doc in docs for p in problems(doc)]
    for p in found:
        print(f"error: a test the documentation names does not exist: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
