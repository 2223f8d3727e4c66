"""The attribution's table from a run's meta (memprobe.analysis.attribution), its check on load
(memprobe.results.schema) and its lines on the terminal (memprobe.cli.console)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memprobe.analysis.attribution import BETWEEN, ELSEWHERE, SHOWN, attribution
from memprobe.cli.console import attribution_lines
from memprobe.core.errors import MemprobeError
from memprobe.results.schema import ATTRIBUTION, check_meta


def _measured(paths: list[str], held: list[float], per_worker: list[list[float]]) -> dict:
    workers = []
    for k, per in enumerate(per_worker):
        workers.append(
            {
                "worker": k,
                "pid": 100 + k,
                "method": "frames",
                "copied_mb": sum(per) + 1.5 + 10.0,
                "new_mb": 0.1,
                "paths_mb": per,
                "other_paths_mb": 0.0,
                "outside_on_dataset_pages_mb": 1.5,
                "outside_elsewhere_mb": 10.0,
            }
        )
    return {
        "paths": paths,
        "held_mb": held,
        "workers": workers,
        "unread_workers": [],
        "other_paths": 0,
        "walk": {"objects": 10, "blocks": 10, "seconds": 0.1, "stopped": None},
        "pagemap_s": 0.01,
        "join_s": 0.01,
    }


def test_the_most_copied_path_comes_first_and_the_rows_add_up_to_the_copied_total() -> None:
    found = _measured(
        ["dataset", "dataset.targets", "dataset.samples"],
        [0.0, 2.6, 62.5],
        [[0.0, 0.0, 60.0], [0.0, 0.0, 58.0]],
    )
    a = attribution({"dataset_info": {"attribution": found}})
    assert a is not None
    paths = [r["path"] for r in a["rows"]]
    assert paths[0] == "dataset.samples" and paths[-2:] == [BETWEEN, ELSEWHERE]
    assert a["top_path"] == "dataset.samples"
    assert a["copied_together_mb"] == pytest.approx(60 + 58 + 2 * 11.5)
    assert sum(r["together_mb"] for r in a["rows"]) == pytest.approx(a["copied_together_mb"])
    assert sum(r["share"] for r in a["rows"]) == pytest.approx(1.0)
    assert a["sentence"] == "dataset.samples holds 118.0 MB of the 141.0 MB the 2 workers copied (84%)"
    found["walk"]["also_held"] = [{"path": "dataset.targets", "counted_to": "dataset.samples", "objects": 7}]
    a = attribution({"dataset_info": {"attribution": found}})
    assert a is not None and a["also_held"] == [
        "dataset.targets also holds 7 of the containers counted to dataset.samples (the first path to them)"
    ]


def test_paths_past_the_shown_ones_are_folded_into_one_row_that_keeps_their_mb() -> None:
    n = SHOWN + 5
    found = _measured([f"dataset.a{i}" for i in range(n)], [1.0] * n, [[float(i) for i in range(n)]])
    a = attribution({"dataset_info": {"attribution": found}})
    assert a is not None
    other = [r for r in a["rows"] if r["kind"] == "other"]
    assert len(other) == 1 and other[0]["together_mb"] == pytest.approx(sum(range(5)))
    assert sum(r["together_mb"] for r in a["rows"]) == pytest.approx(a["copied_together_mb"])


def test_a_run_without_it_has_none_and_one_that_failed_says_why() -> None:
    assert attribution({"dataset_info": {}}) is None
    assert attribution({"dataset_info": {"attribution": {"error": "OSError: gone"}}}) == {
        "error": "OSError: gone"
    }


def test_a_meta_whose_attribution_is_not_numbers_is_refused_naming_the_field(tmp_path: Path) -> None:
    found = _measured(["dataset.x"], [1.0], [[-3.0]])
    ATTRIBUTION(_measured(["dataset.x"], [1.0], [[3.0]]), "attribution")  # the good one passes
    meta = {
        "run_id": "r",
        "status": "ok",
        "dataset_info": {"attribution": found},
        "spec": {"backend": "b", "mode": "fork", "workers": 1, "verdict": {"growth_threshold_mb": 50}},
    }
    with pytest.raises(MemprobeError, match=r"attribution\.workers\[0\]\.paths_mb\[0\]"):
        check_meta(tmp_path / "meta.json", meta)


def test_the_terminal_escapes_a_dataset_s_own_names_and_lines_up_the_columns() -> None:
    from dataclasses import replace

    from tests.unit.test_console import _summary

    found = _measured(["dataset.df['te\x1b[2Jxt']", "dataset.samples"], [5.0, 62.5], [[4.0, 60.0]])
    s = replace(_summary(), attribution=attribution({"dataset_info": {"attribution": found}}))
    lines = attribution_lines(s)
    text = "\n".join(lines)
    assert "\x1b" not in text and "\\x1b[2J" in text
    table = [line for line in lines if line.endswith("%")]
    assert len({len(line) for line in table}) == 1  # every row as wide
    assert table[0].split()[0] == "dataset.samples"


def test_the_page_shows_the_table_next_to_the_verdict_with_the_dataset_s_names_escaped() -> None:
    from dataclasses import replace

    from memprobe.report.attribution import view
    from memprobe.report.render import environment
    from tests.unit.test_console import _summary

    found = _measured(["dataset.df['<script>x</script>']", "dataset.samples"], [5.0, 62.5], [[4.0, 60.0]])
    s = replace(_summary(), attribution=attribution({"dataset_info": {"attribution": found}}))
    v = view(s)
    assert v is not None and view(replace(s, attribution=None)) is None
    html = str(environment().get_template("macros.html").module.copied_table(v))  # type: ignore[attr-defined]
    assert "<script>x" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert html.index("dataset.samples") < html.index("dataset.df")  # the most copied first
    assert "75.5" in html  # the copied total: 60 + 4 + 1.5 between objects + 10 elsewhere


def test_a_run_whose_timeout_leaves_no_time_for_the_walk_says_so_instead_of_timing_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from memprobe.run import child

    sent: list[tuple[str, dict]] = []
    events = SimpleNamespace(send=lambda name, **fields: sent.append((name, fields)))
    spec = SimpleNamespace(sampling=SimpleNamespace(attribute=True), mode="fork", workers=2, timeout_s=60.0)
    monkeypatch.setattr(child, "_STARTED", child.time.monotonic() - 50.0)  # 10 s left, under the margin
    child.attribute_copies(spec, None, None, events)  # type: ignore[arg-type]
    assert sent == [("attribution", {"attribution": {"error": "no time left for it within timeout_s=60"}})]
    sent.clear()
    child.attribute_copies(replace_mode(spec, "spawn"), None, None, events)  # type: ignore[arg-type]
    assert sent == []  # spawn workers copy nothing of their parent's: no attribution


def replace_mode(spec: object, mode: str) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(**{**vars(spec), "mode": mode})


def test_each_rank_that_marked_its_dataset_is_named_with_the_path_its_workers_copied_most() -> None:
    from dataclasses import replace

    from tests.unit.test_console import _summary

    found = _measured(["dataset.records"], [60.0], [[50.0], [49.0]])
    found |= {
        "parent": 201,
        "marked_by": 2,
        "by_process": [
            {"parent": 101, "path": "dataset.records", "path_mb": 40.0, "copied_mb": 50.0},
            {"parent": 201, "path": "dataset.records", "path_mb": 99.0, "copied_mb": 122.0},
        ],
    }
    a = attribution({"dataset_info": {"attribution": found}, "ranks": {"0": 101, "1": 201}})
    assert a is not None
    assert [(p["rank"], round(p["share"], 2)) for p in a["by_process"]] == [(0, 0.8), (1, 0.81)]
    text = "\n".join(attribution_lines(replace(_summary(), attribution=a)))
    assert "rank 0 (pid 101): dataset.records holds 40.0 of the 50.0 MB its workers copied (80%)" in text
    from memprobe.report.attribution import view
    from memprobe.report.render import environment

    v = view(replace(_summary(), attribution=a))
    html = str(environment().get_template("macros.html").module.copied_table(v))  # type: ignore[attr-defined]
    assert "Rank 1 (pid 201): dataset.records holds 99.0 of the 122.0 MB its workers copied (81%)." in html


MAPS = """\
55d0c0000000-55d0c0021000 r--p 00000000 08:01 1234   /usr/bin/python3.11
55d0c0021000-55d0c0022000 rw-p 00021000 08:01 1234   /usr/bin/python3.11
55d0c0400000-55d0c0800000 rw-p 00000000 00:00 0      [heap]
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
7f0000800000-7f0000810000 rw-s 00000000 00:05 77     /dev/shm/torch_1_2 (deleted)
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0      [stack]
7ffc00100000-7ffc00102000 r--p 00000000 00:00 0      [vvar]
"""


def test_copied_pages_are_told_by_where_they_lie_and_shared_or_read_only_mappings_never_count() -> None:
    from memprobe.probe.copied_pages import regions

    kinds = [kind for _, _, kind in regions(MAPS)]
    assert kinds == ["file", "heap", "anonymous", "stack"]  # not the read-only text, /dev/shm, [vvar]


def test_a_recorded_job_s_copies_by_kind_come_most_first_per_parent_with_its_rank() -> None:
    from memprobe.analysis.attribution import copied_by_kind

    found = [
        {
            "parent": 201,
            "workers": [
                {"worker": 0, "pid": 1, "kinds_mb": {"heap": 2.0, "anonymous": 60.0, "file": 1.0}},
                {"worker": 1, "pid": 2, "kinds_mb": {"heap": 4.0, "anonymous": 62.0, "file": 1.0}},
            ],
        }
    ]
    (k,) = copied_by_kind({"dataset_info": {"copied_by_kind": found}, "ranks": {"1": 201}}) or []
    assert list(k["mean_mb"]) == ["anonymous", "heap", "file"] and k["total_mean_mb"] == pytest.approx(65.0)
    assert k["sentence"].startswith(
        "The 2 forked worker(s) of rank 1 (pid 201) copied, each (mean): "
        "anonymous mappings (Python's arenas, large buffers) 61.0 MB, the heap (malloc's brk) 3.0 MB"
    )
    assert copied_by_kind({"dataset_info": {}}) is None
