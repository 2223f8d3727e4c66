"""Strings from outside shown as text: the one escaping of foreign strings for the terminal.

A command line, a process or thread name, a path or an environment value is data someone else
chose: anyone can set their own argv (``exec -a $'\\e]0;title\\a\\e[2J' sleep 20``), and root
watches other users' jobs. Shown raw, its control characters would retitle or clear the
terminal, move the cursor, or forge lines of memprobe's output. :func:`printable` escapes them
(and the bytes that were not UTF-8, decoded with ``surrogateescape``) the way Python writes them
in a string literal; everything printable, accented letters and other scripts included, stays.
Standard library only: the CLI uses it before its heavy imports.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every character that is not printable escaped (``\\x1b``, ``\\n``,
    ``\\u202e``); a byte that was not UTF-8 (a lone surrogate of ``surrogateescape``) as
    ``\\xNN``, the byte it was."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_lines(text: str) -> str:
    """:func:`printable` line by line: memprobe's own layout (its newlines) kept, whatever else
    the text holds escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


def escape_surrogates(text: str) -> str:
    """``text`` with only its lone surrogates escaped (``\\xff`` for a byte that was not UTF-8,
    ``\\udXXX`` for one a JSON file spelled out): what no UTF-8 file can hold. For the terminal,
    :func:`printable` escapes these and the control characters too."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return "".join(_escape(c) if "\ud800" <= c <= "\udfff" else c for c in text)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`printable` would escape (one a terminal would
    act on rather than show: C0, DEL, C1, bidirectional overrides, lone surrogates)."""
    return not text.isprintable()


def _escape(c: str) -> str:
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:  # os.fsdecode's stand-in for the byte o - 0xDC00
        return f"\\x{o - 0xDC00:02x}"
    if c in _NAMED:
        return _NAMED[c]
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"
