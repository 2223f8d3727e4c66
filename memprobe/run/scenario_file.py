"""Reading a scenario file safely, whatever the path is: a folder, a FIFO, a device, a huge or
binary file, or YAML whose aliases expand to gigabytes. What comes out is text and plain data,
or a :class:`~memprobe.core.errors.UsageError` that names the file, the line and what is allowed;
:mod:`memprobe.run.scenario` validates what the data means.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from memprobe.core.errors import UsageError
from memprobe.core.safe_read import MAX_SCENARIO_CHARS, display_path, read_regular

MAX_DEPTH = 50  # nesting levels; a scenario needs 4


def shown(value: Any, *, limit: int = 80, quote: bool = True) -> str:
    """``repr(value)`` (or the text itself), cut to ``limit`` characters: an error message names
    the bad value without repeating a megabyte of it."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


def read_scenario_text(path: str | Path) -> tuple[str, str]:
    """The text of the scenario file at ``path`` and its name as messages show it.

    Whatever ``path`` is (a folder, a FIFO, a device, a huge or binary file), the answer is a
    text or a :class:`UsageError` naming it; nothing is read past the size limit and
    nothing blocks (a FIFO is opened without waiting for a writer): see
    :func:`memprobe.core.safe_read.open_regular`."""
    name = display_path(path)
    try:
        data = read_regular(
            path,
            limit=MAX_SCENARIO_CHARS,
            allowed="a scenario YAML file (e.g. scenarios/quick.yaml; see README, Limits)",
        )
    except FileNotFoundError:
        raise UsageError(f"{name}: no such scenario file") from None
    return decode_text(data, name, "a YAML scenario in UTF-8"), name


def decode_text(data: bytes, name: str, allowed: str) -> str:
    """``data`` as UTF-8 text (a byte-order mark is dropped), or a :class:`UsageError` naming
    the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{name}: not a text file (byte 0x{data[exc.start]:02x} at offset {exc.start} is not "
            f"UTF-8); allowed: {allowed}"
        ) from None


def load_yaml(text: str, path: str) -> Any:
    """``yaml.safe_load(text)``, refusing what safe_load lets through: aliases that expand to
    more than :data:`MAX_SCENARIO_CHARS` (an "alias bomb"), recursive aliases, nesting deeper than
    :data:`MAX_DEPTH`, and a key given twice in one mapping (safe_load keeps the last silently)."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise UsageError(_yaml_error(path, exc)) from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply; allowed: at most {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_nodes(root: yaml.Node, path: str) -> None:
    sizes: dict[int, int] = {}
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            where = key.value if isinstance(key, yaml.ScalarNode) else "?"
            if (
                _expanded(key, path, sizes, set(), 1, where) + _expanded(value, path, sizes, set(), 1, where)
                > MAX_SCENARIO_CHARS
            ):
                raise _too_big(path, f"key '{shown(where, quote=False)}': its")
    if _expanded(root, path, sizes, set(), 0, "") > MAX_SCENARIO_CHARS:
        raise _too_big(path, "the")


def _too_big(path: str, whose: str) -> UsageError:
    return UsageError(
        f"{path}: {whose} aliases expand to more than {MAX_SCENARIO_CHARS:,} characters; allowed: "
        f"at most {MAX_SCENARIO_CHARS:,} once expanded (a scenario is copied into its results)"
    )


def _expanded(
    node: yaml.Node, path: str, sizes: dict[int, int], open_: set[int], depth: int, where: str
) -> int:
    """Characters ``node`` stands for once every alias in it is expanded (capped just above
    the limit), computed once per node: an alias repeats a node, it does not copy it."""
    if id(node) in sizes:
        return sizes[id(node)]
    line = node.start_mark.line + 1
    if id(node) in open_:
        raise UsageError(
            f"{path}: line {line}: key '{shown(where, quote=False)}': an alias refers to a node "
            "that contains it (a recursive alias); allowed: aliases to complete nodes only"
        )
    if depth > MAX_DEPTH:
        raise UsageError(
            f"{path}: line {line}: nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH}"
        )
    open_.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        size = len(node.value) + 1
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(
            _expanded(item, path, sizes, open_, depth + 1, f"{where}[{i}]")
            for i, item in enumerate(node.value)
        )
    else:
        assert isinstance(node, yaml.MappingNode)  # the third and last kind of YAML node
        _no_duplicate_keys(node, path, where)
        size = 1
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            inner = f"{where}.{name}" if where else name
            size += _expanded(key, path, sizes, open_, depth + 1, inner)
            size += _expanded(value, path, sizes, open_, depth + 1, inner)
    open_.discard(id(node))
    sizes[id(node)] = min(size, MAX_SCENARIO_CHARS + 1)
    return sizes[id(node)]


def _no_duplicate_keys(node: yaml.MappingNode, path: str, where: str) -> None:
    seen: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue  # '<<' merges another mapping in; its keys may be overridden, by design
        line = key.start_mark.line + 1
        if (key.tag, key.value) in seen:
            full = shown(f"{where}.{key.value}" if where else key.value, quote=False)
            raise UsageError(
                f"{path}: line {line}: key '{full}' appears twice in one mapping (first on "
                f"line {seen[(key.tag, key.value)]}); allowed: each key once (YAML would keep "
                "the last one silently)"
            )
        seen[(key.tag, key.value)] = line


def _yaml_error(path: str, exc: yaml.YAMLError) -> str:
    """'file: line L, column C: not valid YAML: problem' (PyYAML's own text names no file)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow, e.g. NUL
        return (
            f"{path}: character {exc.position + 1}: not valid YAML: character "
            f"{shown(chr(exc.character) if isinstance(exc.character, int) else exc.character)} is not allowed"
        )
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{path}:{where} not valid YAML: {problem}"


# The scenarios that come with memprobe: the repository's scenarios/ folder, shipped in the wheel
# as memprobe/scenarios/ (in a checkout, memprobe/scenarios is a link to it).
SHIPPED_DIR = Path(__file__).parents[1] / "scenarios"  # memprobe/scenarios


def shown_path(path: str | Path) -> str:
    """``path`` for a message: as it is when printable (see :func:`display_path`), quoted with
    its control characters escaped otherwise (a name from argv cannot clear the terminal)."""
    text = display_path(path)
    return text if text.isprintable() else shown(text)


def shipped_scenarios() -> dict[str, Path]:
    """The shipped scenario files by name (the file name without ``.yaml``), sorted by name."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.yaml"))}


def shipped_scenario(name: str, *, also: str = "") -> Path:
    """The shipped scenario file called ``name``, or a :class:`UsageError` that lists the shipped
    names (``also``: what else ``name`` was tried as, e.g. "no such scenario file, and ")."""
    shipped = shipped_scenarios()
    if name in shipped:
        return shipped[name]
    raise UsageError(
        f"{shown_path(name)}: {also}not a shipped scenario; shipped: {', '.join(shipped) or 'none'} "
        "(memprobe scenarios describes them)"
    )


def find_scenario(arg: str | Path) -> Path:
    """The scenario file that ``memprobe run ARG`` means: the path ``arg`` when anything exists
    there (whatever it is: :func:`read_scenario_text` then names what is wrong with it), else the
    shipped scenario named ``arg`` (``memprobe run quick``), else a :class:`UsageError` that lists
    the shipped names."""
    if os.path.lexists(arg):
        return Path(arg)
    return shipped_scenario(str(arg), also="no such scenario file, and ")
