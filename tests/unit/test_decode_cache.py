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


def test_a_cache_folder_whose_name_is_not_utf8_is_written_and_read_back(tmp_path: Path) -> None:
    """A home or $XDG_CACHE_HOME whose name is not UTF-8: pyarrow (every release: 14, 24, 26)
    refuses a path string it cannot encode as UTF-8, so the file is opened by Python."""
    import os

    cache = Path(os.fsdecode(os.fsencode(tmp_path) + b"/c\xff"))
    first = cached_jpeg_table(4, width=64, height=48, cache_dir=cache)
    assert len(list(cache.glob("jpegs-v1-4-64x48-*.arrow"))) == 1
    again = cached_jpeg_table(4, width=64, height=48, cache_dir=cache)
    assert again.equals(first) and again.column("jpeg").num_chunks == 1
