"""Strings from outside shown as text: the one escaping of foreign strings for the terminal.

A command line, a process or thread name, a path or an environment value is data someone else
chose: anyone can set their own argv (``exec -a $'\\e]0;title\\a\\e[2J' sleep 20``), and root
watches other users' jobs. Shown raw, its control characters would retitle or clear the
terminal, move the cursor, or forge lines of memprobe's output. :func:`printable` escapes them
(and the bytes that were not UTF-8, decoded with ``surrogateescape``) the way Python writes them
in a string literal; everything printable, accented letters and other scripts included, stays.

A terminal shows a character in zero, one or two columns: a combining accent joins the letter
before it, a CJK character or most emoji take two. The live views (``memprobe top``, ``record
--live``) fit their lines to the terminal's width by :func:`clip` and align their tables by
:func:`pad`, both counting the columns a terminal shows (:func:`columns`), never characters: a
line cut at 80 characters of CJK is 160 columns wide, wraps, and the screen scrolls away its
first line. Standard library only: the CLI uses it before its heavy imports.
"""

from __future__ import annotations

import unicodedata

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


def columns(text: str) -> int:
    """The terminal columns ``text`` takes: two for a wide or full-width character (CJK, most
    emoji: East Asian width W or F), none for a combining mark or a Hangul vowel or final
    consonant joining the syllable before it, none for a format character (zero-width space,
    soft hyphen), one for the rest. Control characters are none of memprobe's business here:
    :func:`printable` text has none (what it shows for one, ``\\x1b``, is counted as shown)."""
    if text.isascii():
        return len(text)
    return sum(_width(c) for c in text)


def clip(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` terminal columns (:func:`columns`): a wide character
    that would straddle the edge is left out whole, the marks that join the last character kept
    with it."""
    if len(text) <= width and (text.isascii() or columns(text) <= width):
        return text
    used = 0
    for i, c in enumerate(text):
        used += _width(c)
        if used > width:
            return text[:i]
    return text


def pad(text: str, width: int, *, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` terminal columns (left-aligned, or ``right``):
    a table's column of foreign strings lines up whatever their scripts."""
    fill = " " * max(width - columns(text), 0)
    return fill + text if right else text + fill


def _width(c: str) -> int:
    if c < "\u0300":  # Latin and its accents precomposed: one column (C0/C1 escaped already)
        return 1
    if unicodedata.east_asian_width(c) in ("W", "F"):
        return 2
    if (
        unicodedata.category(c) in ("Mn", "Me", "Cf")
        or "\u1160" <= c <= "\u11ff"
        or "\ud7b0" <= c <= "\ud7ff"
    ):
        return 0
    return 1
