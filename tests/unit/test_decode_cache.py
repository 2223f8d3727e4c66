"""The decode workload's JPEG table is generated once and read back identically."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("skimage")

from memprobe.decode.images import cached_jpeg_table


def test_cached_table_equals_the_generated_one(tmp_path: Path) -> None:
    first = cached_jpeg_table(8, width=64, height=48, cache_dir=tmp_path)
    files = list(tmp_path.glob("jpegs-v1-8-64x48-*.arrow"))
    assert len(files) == 1
    again = cached_jpeg_table(8, width=64, height=48, cache_dir=tmp_path)
    assert again.equals(first)
    assert again.column("jpeg").num_chunks == 1


def test_a_torn_cache_file_is_regenerated(tmp_path: Path) -> None:
    good = cached_jpeg_table(4, width=64, height=48, cache_dir=tmp_path)
    path = next(tmp_path.glob("*.arrow"))
    path.write_bytes(path.read_bytes()[:100])
    assert cached_jpeg_table(4, width=64, height=48, cache_dir=tmp_path).equals(good)
