"""Typical user datasets get the right verdict under fork (scenarios/user_datasets.py).

Measured on the 2-core dev machine (worker USS growth, mean of 2 fork workers):
coco_style 200k/200k items: +80..166 MB; pandas object strings 400k rows/200k items: +67 MB;
the same frame with arrow strings: +4 MB; packed buffers: +1 MB. A forked worker may also copy
~36 MB of the interpreter's own objects once (cyclic GC), whatever the dataset.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memprobe

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SCENARIOS))


# A dataset that must grow is read for 60k random items: by then each worker has touched nearly
# every page of the records (measured, 2 fork workers: coco_style 160k images +112 MB at 60k items
# against +132 MB at 160k; pandas object strings over 400k rows +65 MB against +67 MB). One that
# must stay flat needs no size to show it, so it is read for 40k.
GROW_ITEMS, FLAT_ITEMS = 60_000, 40_000


def _profile(ref: str, tmp_path: Path, items: int = GROW_ITEMS, **kwargs: object) -> memprobe.ProfileResult:
    result = memprobe.profile(
        f"user_datasets:{ref}",
        kwargs=kwargs,
        mode="fork",
        workers=2,
        items=items,
        batch_size=256,
        out=tmp_path / ref,
    )
    result.assert_ok()
    return result


def test_pandas_object_strings_grow_and_arrow_strings_stay_flat(tmp_path: Path) -> None:
    obj = _profile("pandas_rows", tmp_path, rows=400_000, string_dtype="object")
    arrow = _profile("pandas_rows", tmp_path / "a", FLAT_ITEMS, rows=400_000, string_dtype="string[pyarrow]")
    assert obj.worker_growth_mb > 35, obj.summary.explanation
    assert arrow.worker_growth_mb < 15, arrow.summary.explanation
    arrow.assert_flat(max_worker_growth_mb=15)


def test_coco_list_of_dicts_grows_and_packed_buffers_stay_flat(tmp_path: Path) -> None:
    coco = _profile("coco_style", tmp_path, images=160_000)
    packed = _profile("packed_buffers", tmp_path / "p", FLAT_ITEMS, images=FLAT_ITEMS)
    assert coco.verdict == "growing", coco.summary.explanation
    assert packed.verdict == "flat", packed.summary.explanation
    with pytest.raises(AssertionError, match="copy-on-access"):
        coco.assert_flat()


@pytest.mark.parametrize("mode", ["fork", "thread"])
def test_an_iterable_dataset_runs_with_the_default_shuffle_and_is_split_between_workers(
    tmp_path: Path, mode: str
) -> None:
    """torch refuses shuffle=True for an IterableDataset; memprobe does not pass it one. Every
    record arrives once: the workers split the stream (per thread, in thread mode)."""
    result = memprobe.profile(
        "user_datasets:coco_stream",
        kwargs={"images": 10_000},
        mode=mode,
        workers=2,
        batch_size=256,
        out=tmp_path / mode,
    )
    result.assert_ok()
    assert result.summary.items == 10_000
