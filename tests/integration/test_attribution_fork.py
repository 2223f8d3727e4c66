"""The attribution on a real fork: a worker that reads one attribute of a dataset and never another
copies the pages of the first; memprobe.probe.attribution names it, by the kernel's pages."""

from __future__ import annotations

import os
import signal
import time

import pytest

from memprobe.probe.attribution import attribute_workers

pytestmark = pytest.mark.slow


class FolderLike:
    """torchvision's DatasetFolder's shape: (path, class) tuples; targets never read here."""

    def __init__(self, n: int) -> None:
        self.samples = [
            (f"/data/train/class{i % 1000:04d}/img_{i:08d}.JPEG", 1000 + i % 1000) for i in range(n)
        ]
        self.targets = [1000 + i % 1000 for i in range(n)]
        self.classes = [f"class{i:04d}" for i in range(1000)]


def _reader(ds: FolderLike) -> int:
    """Fork a worker that reads every sample's path (as __getitem__ would), then waits."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the worker)
        total = 0
        for path, _ in ds.samples:
            total += len(path)
        os.write(w, b"r")
        time.sleep(60)
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"r"
    os.close(r)
    return pid


@pytest.mark.parametrize("frames", [True, False], ids=["frames", "exclusive-bit"])
def test_the_worker_s_copied_pages_land_on_the_attribute_it_read(frames: bool) -> None:
    ds = FolderLike(150_000)
    pid = _reader(ds)
    try:
        got = attribute_workers(ds, os.getpid(), [pid], frames=frames)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    worker = got["workers"][0]
    # frames need CAP_SYS_ADMIN (root here); without it, bit 56 tells the same pages
    assert worker["method"] == ("frames" if frames and os.geteuid() == 0 else "exclusive")
    copied = dict(zip(got["paths"], worker["paths_mb"], strict=True))
    held = dict(zip(got["paths"], got["held_mb"], strict=True))
    # Every tuple and path string read: their pages copied; the list's item array only read.
    assert copied["dataset.samples"] >= 0.8 * held["dataset.samples"]
    assert copied["dataset.targets"] <= 0.05 * held["dataset.targets"]
    parts = sum(worker["paths_mb"]) + worker["other_paths_mb"]
    parts += worker["outside_on_dataset_pages_mb"] + worker["outside_elsewhere_mb"]
    # each figure is rounded to 1 kB
    assert parts == pytest.approx(worker["copied_mb"], abs=0.001 * (len(worker["paths_mb"]) + 4))
    assert got["walk"]["stopped"] is None


def test_a_worker_gone_before_its_pages_are_read_is_named_and_the_others_stand() -> None:
    ds = FolderLike(1_000)
    gone = os.fork()
    if gone == 0:  # pragma: no cover  (a worker that ends at once)
        os._exit(0)
    os.waitpid(gone, 0)
    pid = _reader(ds)
    try:
        got = attribute_workers(ds, os.getpid(), [gone, pid])
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert got["unread_workers"] == [gone]
    assert [w["pid"] for w in got["workers"]] == [pid]
