"""Foreign strings shown as text: memprobe.core.text.printable, the one escaping for the terminal."""

from __future__ import annotations

import os

from memprobe.core.text import printable, printable_lines


def test_control_characters_are_escaped_and_printable_text_kept() -> None:
    hostile = "\x1b]0;HACKED\x07\x1b[2J\nforged\r\t\x7f\x9b\u202e"
    assert printable(hostile) == "\\x1b]0;HACKED\\x07\\x1b[2J\\nforged\\r\\t\\x7f\\x9b\\u202e"
    assert printable("python train.py --lr 0.1 é 中文 ✓") == "python train.py --lr 0.1 é 中文 ✓"
    assert printable("") == ""


def test_bytes_that_were_not_utf8_are_shown_as_the_bytes_they_were() -> None:
    assert printable(os.fsdecode(b"run\xff\xfe.py")) == "run\\xff\\xfe.py"


def test_printable_lines_keeps_memprobe_s_own_newlines() -> None:
    assert printable_lines("a\x1b[2J\nb") == "a\\x1b[2J\nb"
