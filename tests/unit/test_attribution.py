"""The attribution's core without a fork: the object map of datasets whose structure is known by
construction (memprobe.probe.object_map), and copied pages given as page sets joined with it
(memprobe.probe.attribution). A real fork's pages: tests/integration/test_attribution_fork.py."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memprobe.core.system import PAGE_SIZE
from memprobe.probe.attribution import attribute
from memprobe.probe.object_map import ObjectMap, walk

MB = 1e6


def _omap(ranges: list[tuple[int, int, int]], paths: list[str]) -> ObjectMap:
    starts, ends, ids = zip(*ranges, strict=True)
    return ObjectMap(
        paths=paths,
        starts=np.array(starts, dtype=np.uint64),
        ends=np.array(ends, dtype=np.uint64),
        path_ids=np.array(ids, dtype=np.int64),
        objects=len(ranges),
        seconds=0.0,
    )


def test_an_object_counts_its_bytes_on_each_copied_page_and_the_rest_is_outside() -> None:
    ps = 4096
    omap = _omap(
        [
            (10 * ps + 100, 10 * ps + 200, 0),  # 100 B inside page 10
            (10 * ps + 4000, 13 * ps + 50, 1),  # 96 B on page 10, pages 11 and 12 whole, 50 B on 13
            (20 * ps, 20 * ps + 64, 1),  # on page 20, not copied
        ],
        ["dataset.a", "dataset.b"],
    )
    pages = np.array([10, 12, 13, 30], dtype=np.uint64)  # page 11 kept, 30 holds no object
    a = attribute(omap, pages, ps)
    assert a.per_path.tolist() == [100, 96 + ps + 50]
    assert a.copied == 4 * ps
    # pages 10, 12 and 13 hold the dataset's bytes; page 30 holds none of them
    assert a.outside_elsewhere == ps
    assert a.outside_on_dataset_pages == 3 * ps - (100 + 96 + ps + 50)
    assert a.per_path.sum() + a.outside == a.copied


def test_no_copied_pages_no_bytes_anywhere() -> None:
    omap = _omap([(4096, 8192, 0)], ["dataset"])
    a = attribute(omap, np.zeros(0, dtype=np.uint64), 4096)
    assert a.per_path.tolist() == [0.0] and a.copied == 0 and a.outside == 0


class Known:
    """A dataset of known parts: ``read`` (what its workers read), ``unread`` (never read),
    ``index.entries`` (nested), ``shared`` (the same objects as ``read``'s first ten)."""

    def __init__(self, n: int) -> None:
        self.read = [bytes(2000) + i.to_bytes(4, "little") for i in range(n)]
        self.unread = [bytes(1000) + i.to_bytes(4, "little") for i in range(n)]
        self.index = type("Index", (), {})()
        self.index.entries = [{"id": i, "name": f"entry-{i:06d}" * 4} for i in range(n // 4)]
        self.shared = self.read[:10]

    def __len__(self) -> int:
        return len(self.read)


def _paths(omap: ObjectMap) -> dict[str, float]:
    return dict(zip(omap.paths, omap.bytes_per_path(), strict=True))


def test_the_walk_names_the_paths_a_user_types_and_counts_what_each_holds() -> None:
    ds = Known(2000)
    omap = walk(ds)
    held = _paths(omap)
    assert {"dataset", "dataset.read", "dataset.unread", "dataset.index", "dataset.index.entries"} <= set(
        held
    )
    # the items: 2,004 bytes plus bytes' 33-byte header, rounded to 16; the list's item array
    assert held["dataset.read"] == pytest.approx(2000 * (2048 + 8), rel=0.02)
    assert held["dataset.unread"] == pytest.approx(2000 * (1040 + 8), rel=0.02)
    # 500 dicts with their key tables, their strings and ints: all under the nested path
    assert held["dataset.index.entries"] > 500 * (64 + 100)
    assert held["dataset.index"] < 1000  # the object itself, its entries counted to their own path


def test_objects_held_by_two_attributes_count_once_to_the_first() -> None:
    ds = Known(2000)
    ds.boxes = [{"bbox": [float(i), 1.0, 2.0, 3.0]} for i in range(500)]  # type: ignore[attr-defined]
    ds.by_id = dict(enumerate(ds.boxes))  # type: ignore[attr-defined]  # an index over the same dicts
    omap = walk(ds)
    held = _paths(omap)
    # the dicts (each holding a list: the collector tracks them) count to dataset.boxes, and the
    # index that holds them too is said to: the boxes' path holds at least each box's own objects
    # (their basic sizes: a free-threaded build's walk counts no buffer outside an object), the
    # index's far less
    box = ds.boxes[0]  # type: ignore[attr-defined]
    objects = sum(type(o).__basicsize__ for o in (box, box["bbox"], box["bbox"][0]))
    assert held["dataset.boxes"] >= 500 * objects > held["dataset.by_id"]
    assert omap.also_held == [("dataset.by_id", "dataset.boxes", 500)]
    # ``shared`` holds ten of ``read``'s items: only its own list counts to it
    assert held["dataset.shared"] < 300
    assert held["dataset.read"] == pytest.approx(2000 * (2048 + 8), rel=0.02)


def test_copied_pages_land_on_the_attribute_read_and_none_on_the_one_never_read() -> None:
    ds = Known(3000)
    omap = walk(ds)
    # The pages a worker that read every item of ``read`` copies: those its items lie on.
    pages = np.unique(np.array([id(x) // PAGE_SIZE for x in ds.read], dtype=np.uint64))
    a = attribute(omap, pages)
    got = dict(zip(omap.paths, a.per_path, strict=True))
    held = _paths(omap)
    assert got["dataset.read"] >= 0.95 * (held["dataset.read"] - 3000 * 8)  # all but its item array
    # ~0, not 0: the allocator puts a never-read object on a page of read ones where a freed slot
    # lies between them (2.2 % of dataset.unread in the full suite's worker, whose heap earlier
    # tests had used; 0 in a fresh process).
    assert got["dataset.unread"] <= 0.05 * held["dataset.unread"]
    assert got["dataset.index.entries"] <= 0.05 * held["dataset.index.entries"]
    assert a.per_path.sum() + a.outside == a.copied == len(pages) * PAGE_SIZE


def test_a_cycle_ends_and_counts_each_object_once() -> None:
    ds = Known(100)
    loop: list = [ds]
    loop.append(loop)
    ds.loop = loop  # type: ignore[attr-defined]
    omap = walk(ds)
    assert "dataset.loop" in omap.paths
    assert len(np.unique(omap.starts)) == len(omap.starts)


class Raising:
    """A dataset whose attribute lookups raise (a lazy proxy): its __dict__ is read without them."""

    def __init__(self) -> None:
        self.samples = [str(i) * 50 for i in range(100)]

    def __getattr__(self, name: str) -> None:
        raise RuntimeError(f"no {name}")

    def __getattribute__(self, name: str):  # type: ignore[no-untyped-def]
        if name == "__dict__":
            raise RuntimeError("lazy")
        return object.__getattribute__(self, name)


def test_a_dataset_whose_attribute_lookups_raise_is_named_from_its_dict_without_calling_them() -> None:
    omap = walk(Raising())
    held = _paths(omap)
    assert "dataset.samples" in held  # object.__getattribute__ reads __dict__ past both
    assert held["dataset.samples"] > 100 * 50


def test_a_huge_container_stops_the_walk_at_its_bound_and_says_so() -> None:
    ds = Known(20000)
    omap = walk(ds, max_objects=10_000)
    assert omap.stopped is not None and "10,000" in omap.stopped
    assert omap.objects == 10_000
    assert walk(Known(100)).stopped is None


def test_a_frame_s_object_and_arrow_columns_are_named_and_hold_their_values() -> None:
    class Table:
        def __init__(self) -> None:
            n = 2000
            self.df = pd.DataFrame(
                {
                    "text": pd.Series([f"caption number {i} " * 5 for i in range(n)], dtype=object),
                    "arrow": pd.Series([f"path/{i:08d}.jpg" for i in range(n)], dtype="string[pyarrow]"),
                    "label": np.arange(n, dtype=np.int64),
                }
            )

    table = Table()
    # as user_datasets.pandas_rows builds it: strings inferred as Arrow, then asked for as objects
    table.df = table.df.astype({"text": object})
    held = _paths(walk(table))
    assert held["dataset.df['text']"] == pytest.approx(2000 * (49 + 100 + 8), rel=0.1)
    assert held["dataset.df['arrow']"] >= 2000 * 17  # the Arrow buffers: offsets and characters
    assert held["dataset.df['label']"] >= 2000 * 8
    assert held["dataset.df"] < 50_000  # the frame's own parts, its columns counted to them


def test_a_concat_dataset_s_wrapped_datasets_and_a_subset_s_are_named() -> None:
    from torch.utils.data import ConcatDataset, Subset

    a, b = Known(200), Known(300)
    held = _paths(walk(Subset(ConcatDataset([a, b]), list(range(100)))))
    assert held["dataset.dataset.datasets[0].read"] == pytest.approx(200 * (2048 + 8), rel=0.05)
    assert held["dataset.dataset.datasets[1].read"] == pytest.approx(300 * (2048 + 8), rel=0.05)
    assert "dataset.indices" in held


def test_a_library_object_s_workings_are_not_named_but_counted_to_the_attribute_holding_it() -> None:
    from memprobe.datasets.shared_list import SharedList

    class Converted:
        def __init__(self) -> None:
            self.records = SharedList([{"id": i} for i in range(100)])

    omap = walk(Converted())
    assert [p for p in omap.paths if p.startswith("dataset.records")] == ["dataset.records"]


def test_mark_dataset_does_nothing_unless_recording_and_saves_a_map_the_recorder_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from memprobe.record.copies import CopiedStructures
    from memprobe.record.dataset_mark import map_path, mark_dataset
    from memprobe.record.marks import ENV

    marks = tmp_path / "marks.txt"
    monkeypatch.delenv(ENV, raising=False)
    mark_dataset(Known(100))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(ENV, str(marks))
    mark_dataset(Known(100))
    saved = ObjectMap.load(map_path(marks, os.getpid()))
    assert "dataset.index.entries" in saved.paths and len(saved.starts) > 100
    alone = CopiedStructures(marks)
    alone.poll()  # this process has no forked child: the table says why there is none
    assert "no forked worker of a process that marked its dataset" in alone.info()["attribution"]["error"]
    # A file there that is no map (the job's, or a truncated one): refused, said, never raised.
    map_path(marks, 1).write_bytes(b"not a map")
    copies = CopiedStructures(marks)
    copies.poll()
    assert set(copies.maps) == {os.getpid()}
    assert "error" in copies.info()["attribution"]  # no worker read yet: only the refusal to say
    copies.discard()
    assert not list(tmp_path.glob("*.npz"))


def test_a_map_saved_after_a_reading_is_read_at_the_next_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder reads the tree's forked workers spaced out (unmarked: to 1 % of the wall
    time); a map the job saves meanwhile is read at the next poll, not when that spacing ends
    (a 6 s job's map came after the first reading and it got no table)."""
    import os

    from memprobe.record.copies import CopiedStructures
    from memprobe.record.dataset_mark import mark_dataset
    from memprobe.record.marks import ENV

    marks = tmp_path / "marks.txt"
    copies = CopiedStructures(marks, root=os.getpid())
    copies.poll()  # nothing marked yet: the next reading is EVERY_S off at least
    assert copies.next_t > time.monotonic() and not copies.maps
    monkeypatch.setenv(ENV, str(marks))
    mark_dataset(Known(100))
    copies.poll()
    assert set(copies.maps) == {os.getpid()}
    assert "no forked worker of a process that marked its dataset" in copies.info()["attribution"]["error"]


def test_mark_dataset_never_raises_into_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memprobe.record.dataset_mark import mark_dataset
    from memprobe.record.marks import ENV

    monkeypatch.setenv(ENV, str(tmp_path / "gone" / "marks.txt"))  # its folder deleted: no map can be saved
    mark_dataset(Known(10))
    err = capsys.readouterr().err
    assert err.startswith("memprobe.mark_dataset: not marked (") and err.count("\n") == 1
