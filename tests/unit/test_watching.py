"""memprobe.integrations.watching: the scalars a training loop logs, from a live view (no sampler,
no trainer: the view is made by hand as the live model would make it)."""

from __future__ import annotations

from memprobe.integrations.watching import PREFIX, line, rank_from_environment, scalars, tag
from memprobe.live.model import LiveRow, LiveTotals, LiveView


def _row(pid: int, role: str, kind: str | None, *, rank: int = -1, uss=None, pss=None, rate=None, grown=None):
    worker = int(role.split()[-1]) if "worker" in role else -1
    return LiveRow(pid, role, kind, rank, worker, 0, uss, pss is not None, pss, 100.0, rate, grown)


def _view(rows: list[LiveRow]) -> LiveView:
    totals = LiveTotals(len(rows), None, 0, 0.0, None, None, None, "")
    return LiveView(10.0, rows, totals, "flat so far", "memory limit: not known")


def test_each_process_gets_its_own_uss_and_pss_named_by_its_role() -> None:
    view = _view(
        [
            _row(10, "main", "main", uss=200.0, pss=300.0, rate=0.5),
            _row(11, "worker 0", "dataloader", uss=60.0, pss=150.0, rate=30.0, grown=60.0),
            _row(12, "worker 1", "dataloader", uss=40.0, pss=None, rate=None, grown=40.0),
        ]
    )
    got = scalars(view, 10, 50.0)
    assert got[PREFIX + "main/uss_mb"] == 200.0 and got[PREFIX + "main/pss_mb"] == 300.0
    assert got[PREFIX + "worker0/uss_mb"] == 60.0 and got[PREFIX + "worker0/pss_mb"] == 150.0
    assert got[PREFIX + "worker1/uss_mb"] == 40.0 and PREFIX + "worker1/pss_mb" not in got
    # Total PSS of the processes read exactly; the one never read counted apart, never as zero.
    assert got[PREFIX + "total_pss_mb"] == 450.0 and got[PREFIX + "unread"] == 1.0
    assert got[PREFIX + "growth_mb_per_min"] == 30.5
    assert got[PREFIX + "workers"] == 2.0
    # The live model's rule for the verdict so far: the workers' mean growth against the threshold.
    assert got[PREFIX + "workers_grown_mb"] == 50.0 and got[PREFIX + "growing"] == 0.0
    assert scalars(view, 10, 45.0)[PREFIX + "growing"] == 1.0


def test_a_program_run_beside_the_workers_is_logged_but_not_averaged_with_them() -> None:
    """W&B's WandbLogger runs wandb-core, a program, as a child of the training process: logged
    as memprobe/worker0, its flat 30 MB halved the workers' mean growth (135 MB logged as 67).
    The tree names it a program (tests/unit/test_tree_roles.py)."""
    view = _view(
        [
            _row(10, "main", "main", uss=200.0, pss=300.0),
            _row(11, "program 0", "program", uss=30.0, pss=35.0),
            _row(12, "worker 0", "dataloader", uss=135.0, pss=150.0, grown=135.0),
            _row(13, "worker 1", "dataloader", uss=135.0, pss=150.0, grown=135.0),
        ]
    )
    got = scalars(view, 10, 50.0)
    assert got[PREFIX + "program0/uss_mb"] == 30.0  # still logged, by its name
    assert got[PREFIX + "worker0/uss_mb"] == got[PREFIX + "worker1/uss_mb"] == 135.0
    assert got[PREFIX + "workers"] == 2.0 and got[PREFIX + "workers_grown_mb"] == 135.0
    assert got[PREFIX + "growing"] == 1.0


def test_only_this_processs_rank_is_counted() -> None:
    """Lightning's ddp launcher starts ranks 1.. as children of rank 0: they log their own."""
    view = _view(
        [
            _row(10, "rank 0", "rank", rank=0, uss=200.0, pss=300.0),
            _row(11, "rank 0 worker 0", "dataloader", rank=0, uss=60.0, pss=100.0, grown=60.0),
            _row(20, "rank 1", "rank", rank=1, uss=200.0, pss=300.0),
            _row(21, "rank 1 worker 0", "dataloader", rank=1, uss=90.0, pss=100.0, grown=90.0),
        ]
    )
    got = scalars(view, 10, 50.0)
    assert got[PREFIX + "total_pss_mb"] == 400.0 and got[PREFIX + "workers"] == 1.0
    # The names every rank logs: the process itself main, its workers worker0, ...
    assert got[PREFIX + "main/uss_mb"] == 200.0 and got[PREFIX + "worker0/uss_mb"] == 60.0
    assert not [k for k in got if k.startswith(PREFIX + "rank")], got


def test_a_view_without_workers_has_no_verdict_scalar() -> None:
    got = scalars(_view([_row(10, "main", "main", uss=100.0, pss=None)]), 10, 50.0)
    assert got[PREFIX + "workers"] == 0.0 and PREFIX + "growing" not in got
    assert PREFIX + "total_pss_mb" not in got and got[PREFIX + "unread"] == 1.0


def test_roles_become_tag_parts_and_foreign_characters_are_dropped() -> None:
    assert tag("worker 0") == "worker0"
    assert tag("worker 1.2") == "worker1.2"
    assert tag("resource tracker") == "resourcetracker"
    assert tag("\x1b[31m") == "31m"
    assert tag(" ") == "process"


def test_the_plain_loops_line_says_the_total_rate_and_verdict() -> None:
    values = {PREFIX + "total_pss_mb": 1234.4, PREFIX + "growth_mb_per_min": 12.34, PREFIX + "workers": 2.0}
    assert line(values, "flat so far") == (
        "memprobe: total PSS 1,234 MB, growing +12.3 MB/min, 2 worker(s); flat so far"
    )
    values[PREFIX + "unread"] = 1.0
    assert "1 process(es) not read yet" in line(values, "x")


def test_the_rank_is_the_launchers() -> None:
    assert rank_from_environment({"RANK": "3", "LOCAL_RANK": "1"}) == 3
    assert rank_from_environment({"LOCAL_RANK": "1"}) == 1
    assert rank_from_environment({"RANK": "x"}) is None
    assert rank_from_environment({}) is None
