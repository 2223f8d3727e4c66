"""The shape of a parent's own growth (memprobe.analysis.shape): a steady rise while its loop runs
against steps as its worker generations begin, from its anonymous RSS at every tick; on
hand-made ticks whose answer is known by construction."""

from __future__ import annotations

import pandas as pd
import pytest

from memprobe.analysis.process import Proc
from memprobe.analysis.shape import EPOCH_STEPS, STEADY, growth_shape


def _proc(
    pid: int, kind: str, start: float, last: float, generation: int | None = None, ppid: int | None = 1
) -> Proc:
    return Proc(
        pid=pid,
        ppid=ppid if kind != "main" else None,
        role="main" if kind == "main" else f"worker {pid % 10}",
        kind=kind,
        forked=kind != "main",
        start_method="fork" if kind != "main" else None,
        rank=-1,
        worker=-1 if kind == "main" else pid % 10,
        generation=generation,
        start_t=start,
        first_t=start,
        last_t=last,
        end_t=None,
    )


def _main_ticks(anon: list[tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame({"pid": 1, "t": [t for t, _ in anon], "rss_anon_mb": [a for _, a in anon]})


def _epochs(*spans: tuple[float, float]) -> list[Proc]:
    """main and two fork workers per generation, alive over each span."""
    procs = [_proc(1, "main", 0.0, 100.0)]
    for gen, (a, b) in enumerate(spans):
        procs += [_proc(10 * (gen + 1) + w, "fork", a, b, generation=gen) for w in (0, 1)]
    return procs


def _ticks(t0: float, t1: float, step: float = 0.2) -> list[float]:
    n = round((t1 - t0) / step)
    return [round(t0 + k * step, 6) for k in range(n + 1)]


def test_a_loop_that_keeps_something_every_step_rises_steadily() -> None:
    procs = _epochs((5.0, 35.0))
    ticks = [(t, 300 + 2.0 * (t - 5.0)) for t in _ticks(4.0, 35.0) if t >= 5.0] + [(4.0, 300.0)]
    assert growth_shape(procs[0], _main_ticks(sorted(ticks)), procs, 5.0, 35.0) == STEADY


def test_a_rise_as_each_generation_begins_is_epoch_steps() -> None:
    """Two epochs, each with its sampler's list built as its workers start (+40 MB each), flat
    between; the first step's memory freed at the epoch's end is taken again by the second."""
    procs = _epochs((5.0, 20.0), (20.5, 35.0))
    anon = []
    for t in _ticks(4.0, 35.0):
        level = 300 + (40 if t >= 5.6 else 0) + (40 if t >= 21.0 else 0)
        anon.append((t, level))
    assert growth_shape(procs[0], _main_ticks(anon), procs, 5.0, 35.0) == EPOCH_STEPS


def test_what_the_parent_built_before_its_window_is_no_step() -> None:
    """Its build ends just before its first worker: the ticks before the window's start are not
    its growth, however close to a generation's start (a 300 MB build once made a 6 MB steady
    rise 'epoch steps')."""
    procs = _epochs((5.0, 35.0))
    anon = [(t, 0.0 + 300 * min(t / 4.9, 1.0)) for t in _ticks(0.0, 5.0)]
    anon += [(t, 300 + 0.3 * (t - 5.0)) for t in _ticks(5.2, 35.0)]
    assert growth_shape(procs[0], _main_ticks(anon), procs, 5.0, 35.0) == STEADY


@pytest.mark.parametrize(
    "levels, why",
    [
        ([300.0] * 60 + [300.5] * 96, "flat: too small a rise to have a shape"),
        ([300.0] * 10 + [330.0] * 110 + [360.0] * 36, "two jumps mid-epoch: neither"),
    ],
)
def test_neither_shape(levels: list[float], why: str) -> None:
    procs = _epochs((5.0, 35.0))
    ticks = _ticks(4.0, 35.0)
    assert (
        growth_shape(
            procs[0], _main_ticks(list(zip(ticks, levels[: len(ticks)], strict=True))), procs, 5.0, 35.0
        )
        is None
    ), why


def test_what_it_builds_while_no_worker_lives_is_not_its_shape() -> None:
    """A steady loop in each epoch (+10 MB each) and +200 MB built between them (validation,
    a new dataset): the gap is not growth, so the shape is the loop's."""
    procs = _epochs((5.0, 20.0), (25.0, 40.0))
    anon = []
    for t in _ticks(4.0, 40.0):
        loop = 10 * min(max(t - 5.0, 0) / 15, 1) + 10 * min(max(t - 25.0, 0) / 15, 1)
        anon.append((t, 300 + loop + (200 if t >= 23.0 else 0)))
    assert growth_shape(procs[0], _main_ticks(anon), procs, 5.0, 40.0) == STEADY
