"""The page census's parts that need no tree: which mappings it samples, where its runs lie, and
what a census that skips the file mappings reads."""

from __future__ import annotations

import os

import pytest

from memprobe.core.system import PAGE_SIZE
from memprobe.probe import census
from memprobe.probe.census import PagePanel, mappings, systematic_runs

MAPS = """\
55d0c0000000-55d0c0021000 r--p 00000000 08:01 1234   /usr/bin/python3.11
55d0c0400000-55d0c0800000 rw-p 00000000 00:00 0      [heap]
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
7f0000400000-7f0000401000 ---p 00000000 00:00 0
7f0000600000-7f0000800000 r-xp 00000000 08:01 99     /usr/lib/libtorch_cpu.so
7f0000800000-7f0000810000 rw-s 00000000 00:05 77     /dev/shm/torch_1_2 (deleted)
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0      [stack]
7ffc00100000-7ffc00102000 r--p 00000000 00:00 0      [vvar]
"""


def test_the_anonymous_stratum_is_the_heap_and_private_writable_memory_the_file_one_every_file() -> None:
    anon, files = mappings(MAPS)
    assert anon == [
        (0x55D0C0400000 // PAGE_SIZE, 0x400000 // PAGE_SIZE),
        (0x7F0000000000 // PAGE_SIZE, 0x400000 // PAGE_SIZE),
    ]
    # the binary, a library, a shared-memory batch; not the guard page, the stack or [vvar]
    assert [first for first, _ in files] == [
        a // PAGE_SIZE for a in (0x55D0C0000000, 0x7F0000600000, 0x7F0000800000)
    ]


def test_runs_are_evenly_spaced_and_each_lies_within_one_mapping() -> None:
    maps = [(1000, 5000), (20000, 3000), (40000, 8000)]
    runs = systematic_runs(maps, runs=16, run_pages=32, start=0.25)
    assert len(runs) == 16 and all(n == 32 for _, n in runs)
    assert all(any(a <= first and first + n <= a + size for a, size in maps) for first, n in runs)
    small = [(1000, 100), (5000, 50)]  # no more than twice the sample: every page
    assert systematic_runs(small, runs=16, run_pages=32) == small


def test_a_census_without_the_file_mappings_reads_only_the_anonymous_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buffers = [bytearray(8 * 2**20) for _ in range(4)]  # anonymous memory of our own, touched
    for b in buffers:
        b[:: PAGE_SIZE // 2] = b"x" * len(b[:: PAGE_SIZE // 2])
    panel = PagePanel.draw(os.getpid())
    assert panel is not None
    try:
        full = panel.read()
        calls = []
        real = os.pread
        monkeypatch.setattr(census.os, "pread", lambda *a: calls.append(a) or real(*a))
        part = panel.read(files=False)
        assert full is not None and part is not None
        assert len(calls) == len(panel.strata[0].runs)  # the anonymous runs alone
        assert part.exclusive == pytest.approx(full.exclusive, rel=0.05)  # the file part as it was
    finally:
        panel.close()
