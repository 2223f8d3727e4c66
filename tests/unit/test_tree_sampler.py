"""The record/watch sampler (memprobe.probe.tree_sampler) without a process of its own: how its
ticks are spaced, and when a spawned worker's start-up ends (memprobe.probe.tree). The
estimator's tests are in test_estimator*.py, the sampler's on real trees in
tests/integration/test_tree_sampler_processes.py."""

from __future__ import annotations

import os
import time

import pytest

from memprobe.probe.sampler import SamplerSettings
from memprobe.probe.tree_sampler import TreeSampler


def test_ticks_of_a_costly_tree_are_spaced_within_the_cheap_share() -> None:
    from memprobe.probe import tree_sampler

    sampler = TreeSampler(
        os.getpid(),
        lambda table, rows: None,
        SamplerSettings(interval_s=0.2, pss_cpu_budget=0.01),
        t0=time.monotonic(),
    )
    assert sampler.interval() == 0.2
    sampler.tick_cost = 0.0012  # 1.2 ms a tick: 0.2 s would take 60 % of the budget
    assert sampler.interval() == pytest.approx(0.0012 / (tree_sampler.CHEAP_SHARE * 0.01))
    sampler.tick_cost = 0.004  # 4 ms (a torchrun tree of 11 processes: 2-3): 2 points a second
    assert sampler.interval() == tree_sampler.POINTS_INTERVAL_S
    # 200 forked children cost 8.4 ms a tick: at a tick every 0.45 s the cheap tier alone took
    # 1.9 % of a core against a 1 % budget. Spaced, it keeps within the budget.
    sampler.tick_cost = 0.0084
    assert sampler.tick_cost / sampler.interval() == pytest.approx(0.01)
    sampler.tick_cost = 0.03  # 300 processes on a loaded machine: a point every 2 s still
    assert sampler.interval() == tree_sampler.MAX_INTERVAL_S
    assert tree_sampler.compact({"a": 1, "b": None, "c": False}) == {"a": 1, "c": False}


def test_a_spawned_worker_s_start_up_ends_when_its_rss_holds_still_while_it_runs() -> None:
    from memprobe.probe.tree import settled_at, startup_end

    t = [0.2 * k for k in range(1, 31)]
    # Unpickling (60 MB per CPU second) until 3 s, then reading its copy (RSS still).
    rss = [100 + 60 * min(x, 3.0) for x in t]
    assert startup_end(t, rss, t) == pytest.approx(3.6)  # half a second still, running all along
    # Waiting for a CPU at 1.0-2.0 s (no CPU, no RSS move) is not the end of its start-up.
    cpu = [min(x, 1.0) + max(x - 2.0, 0.0) for x in t]
    rss = [100 + 60 * min(c, 2.0) for c in cpu]
    assert not any(settled_at(t, rss, cpu, i) for i in range(t.index(2.0) + 1))
    # A 1 GB process whose allocator creeps 20 MB per CPU second (2 %) has settled.
    assert startup_end(t, [1000 + 20 * x for x in t], t) == pytest.approx(0.8)  # its first half second


def test_the_tree_sampler_changes_the_base_sampler_through_its_public_hooks_only() -> None:
    """Sampler's loop is changed by a subclass through the hooks its module doc lists (run_round,
    discover, children, read_cheap, interval): no private method of Sampler is overridden."""
    from memprobe.probe.sampler import Sampler

    private = {name for name in vars(Sampler) if name.startswith("_") and not name.startswith("__")}
    assert private, "the base sampler has private helpers of its own"
    assert not private & set(vars(TreeSampler))
    hooks = {"run_round", "discover", "children", "read_cheap", "interval"}
    assert hooks <= set(vars(TreeSampler)) and hooks <= set(vars(Sampler))
