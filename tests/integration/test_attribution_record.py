"""`memprobe record` of a training script with `memprobe.mark_dataset(dataset)`: the recording
names the attribute its fork workers read as the one they copied, read from outside while they
ran; the map the script saved is gone from the results folder at the end; and where the copied
pages lie, read from outside."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import torch
from torch.utils.data import DataLoader, Dataset

import memprobe


class FolderLike(Dataset):
    def __init__(self, n):
        self.samples = [(f"/data/train/c{i % 1000:04d}/img_{i:08d}.JPEG", i % 1000) for i in range(n)]
        self.targets = [1000 + i % 1000 for i in range(n)]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        return torch.tensor([len(path)]), target


ds = FolderLike(100_000)
memprobe.mark_dataset(ds)
loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=2, persistent_workers=True)
for epoch in range(6):  # workers alive long enough to be read after the map is saved, at load too
    for x, y in loader:
        memprobe.mark(len(y))
"""


def test_record_names_the_attribute_the_marked_dataset_s_workers_copied(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "rec"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "memprobe",
            "record",
            "--no-report",
            "-o",
            str(out),
            "--",
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    a = json.loads((out / "summary.json").read_text())["runs"][0]["attribution"]
    assert a is not None and "error" not in a, a
    rows = {row["path"]: row for row in a["rows"]}
    assert a["top_path"] == "dataset.samples"
    assert rows["dataset.samples"]["mean_mb"] >= 0.6 * rows["dataset.samples"]["held_mb"]
    assert rows["dataset.targets"]["together_mb"] <= 0.05 * rows["dataset.targets"]["held_mb"]
    assert "which structure the workers copied" in r.stderr  # record's own output: stdout is the job's
    assert not list(out.rglob("*.npz"))
    # Read from outside whether marked or not: where the copied pages lie, most in the anonymous
    # mappings that hold Python's arenas.
    (kinds,) = json.loads((out / "summary.json").read_text())["runs"][0]["copied_by_kind"]
    assert next(iter(kinds["mean_mb"])) == "anonymous"
    assert "where the forked workers' copied pages lie" in r.stderr
