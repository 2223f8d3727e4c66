"""memprobe's PSS and USS of each process equal an independent reading of the same processes at
the same moment (psutil's ``memory_full_info``), within 5%: per process and in total.

The tree (trees/pss_tree.py) holds still while it is read: a main process with a ~100 MB list of
dicts and 3 forked children that copied a quarter, a half and three quarters of it, all waiting
on stdin. Their private memory differs (~25, 25, 50 and 75 MB of the list), so a reading
attributed to the wrong process, or in the wrong unit, cannot pass.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psutil
import pytest

from memprobe.probe import procfs
from memprobe.probe.census import PagePanel

TREE = Path(__file__).parent / "trees" / "pss_tree.py"
MB = 1024 * 1024
REL = 0.05


@pytest.fixture
def still_tree() -> Iterator[list[int]]:
    """The pids of the waiting tree, main first; the tree ends when the test does."""
    proc = subprocess.Popen(
        [sys.executable, str(TREE), "100"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline().split()
        assert line[:1] == ["READY"], line
        yield [int(p) for p in line[1:]]
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0


def _psutil(pids: list[int]) -> dict[int, tuple[float, float]]:
    """(PSS, USS) in bytes per pid, read by psutil."""
    out = {}
    for pid in pids:
        m = psutil.Process(pid).memory_full_info()
        out[pid] = (float(m.pss), float(m.uss))
    return out


def _compare(mine: dict[int, tuple[float, float]], theirs: dict[int, tuple[float, float]]) -> None:
    assert mine.keys() == theirs.keys()
    table = "\n".join(
        f"pid {pid}: memprobe PSS {mine[pid][0] / MB:.1f} USS {mine[pid][1] / MB:.1f}  "
        f"psutil PSS {theirs[pid][0] / MB:.1f} USS {theirs[pid][1] / MB:.1f} MB"
        for pid in mine
    )
    for pid in mine:
        assert mine[pid][0] == pytest.approx(theirs[pid][0], rel=REL), table
        assert mine[pid][1] == pytest.approx(theirs[pid][1], rel=REL), table
    for i in (0, 1):
        assert sum(v[i] for v in mine.values()) == pytest.approx(
            sum(v[i] for v in theirs.values()), rel=REL
        ), table
    # The tree is what it is meant to be: children with their own, different amounts copied.
    uss = [theirs[pid][1] / MB for pid in theirs]
    assert uss[1] + 15 < uss[2] and uss[2] + 15 < uss[3], table


def test_read_pss_equals_psutil_per_process_and_in_total(still_tree: list[int]) -> None:
    mine = {pid: (float(s.pss), float(s.uss)) for pid in still_tree if (s := procfs.read_pss(pid))}
    theirs = _psutil(still_tree)
    _compare(mine, theirs)


@pytest.mark.slow
def test_watch_records_the_same_pss_and_uss_as_psutil(still_tree: list[int], tmp_path: Path) -> None:
    """What a user reads from `memprobe watch` (samples.parquet, summary.json), not only the
    parser: every process of the tree is found and its exact readings match psutil's."""
    theirs = _psutil(still_tree)
    out = tmp_path / "watch"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memprobe",
            "watch",
            str(still_tree[0]),
            "--duration",
            "3",
            "--no-report",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    after = _psutil(still_tree)
    _compare(after, theirs)  # still: the moment lasted through the watch
    samples = pd.read_parquet(out / "samples.parquet")
    exact = samples[(samples["tier"] == "pss") & ~samples["missing"].astype(bool)]
    last = exact.sort_values("t").groupby("pid").last()
    assert set(still_tree) <= set(last.index), last
    mine = {
        pid: (float(last.at[pid, "pss_mb"]) * MB, float(last.at[pid, "uss_mb"]) * MB) for pid in still_tree
    }
    _compare(mine, theirs)
    run = json.loads((out / "summary.json").read_text())["runs"][0]
    listed = {p["pid"]: p for p in run["processes"]}
    assert set(still_tree) <= listed.keys(), run["processes"]
    for pid in still_tree:
        assert listed[pid]["uss_end_mb"] * MB == pytest.approx(theirs[pid][1], rel=REL), run["processes"]


def test_a_page_census_counts_each_process_s_private_pages_as_smaps_does(still_tree: list[int]) -> None:
    """The sampled census between exact readings (memprobe.probe.census): the pages it finds
    mapped by each process alone, scaled up from ~3,000 of them, match the USS psutil reads
    (the children's copies and the parent's pages all three copied): within 5 % on the mean of
    a few panels (each drawn from its own random start), and each panel within three of its own
    standard errors."""
    theirs = _psutil(still_tree)
    rng = random.Random(7)
    for pid in still_tree:
        counts = []
        for _ in range(6):
            panel = PagePanel.draw(pid, rng)
            assert panel is not None
            census = panel.read()
            panel.close()
            assert census is not None
            uss = theirs[pid][1]
            assert abs(census.exclusive - uss) <= 3 * census.level_error + 3 * MB, (pid, census, uss / MB)
            counts.append(census.exclusive)
        assert sum(counts) / len(counts) == pytest.approx(theirs[pid][1], rel=REL, abs=2 * MB), (pid, counts)
