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


def test_columns_count_what_a_terminal_shows() -> None:
    from memprobe.core.text import columns

    assert columns("python train.py") == 15
    assert columns("训练 train") == 10  # a CJK character takes two columns
    assert columns("e\u0301") == 1  # a combining accent joins the letter before it
    assert columns("\U0001f600") == 2  # most emoji: two
    assert columns("\ud55c\u1161") == 2  # a Hangul vowel joining the syllable before it
    assert columns(printable("\x1b[2J")) == 7  # an escaped control character: as shown, \x1b[2J


def test_clip_cuts_by_columns_never_halving_a_wide_character() -> None:
    from memprobe.core.text import clip, columns

    assert clip("训练训练", 5) == "训练"  # the third would straddle the edge: left out whole
    assert clip("ab训练", 3) == "ab"
    assert clip("cafe\u0301 au lait", 4) == "cafe\u0301"  # the accent kept with its letter
    assert clip("abc", 0) == "" and clip("abc", 10) == "abc"
    line = "memprobe top  pid 1 (" + "数据加载" * 40 + ")"
    assert columns(clip(line, 80)) <= 80 and clip(line, 80).startswith("memprobe top  pid 1 (")


def test_pad_aligns_by_columns() -> None:
    from memprobe.core.text import columns, pad

    assert pad("训练", 6) == "训练  " and pad("ab", 4, right=True) == "  ab"
    assert {columns(pad(t, 8)) for t in ("worker 0", "工人 0", "e\u0301")} == {8}
