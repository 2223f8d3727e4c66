"""The USS estimator's readings and estimate (memprobe.probe.estimator): which processes get an
exact reading, within what budget, and how USS is estimated between readings. Numbers in,
numbers out: no process is read."""

from __future__ import annotations

import pytest

from memprobe.core.system import PAGE_SIZE
from memprobe.probe.estimator import ExactPlanner
from memprobe.probe.estimator.tuning import MiB

MB = MiB
PLENTY = 10.0  # CPU seconds: any reading fits


def _planner(*pids: int, rss: int = 100 * MB) -> ExactPlanner:
    """A planner that has read every ``pid`` once at t=0 (USS 50 MB, minflt 0)."""
    plan = ExactPlanner()
    plan.observe(0.0, dict.fromkeys(pids, (0, rss)), {p: p for p in pids})
    for p in pids:
        plan.exact(p, 0.0, 50 * MB, rss, 0.001)
    return plan


def test_a_new_process_is_read_at_first_sight_whatever_the_budget() -> None:
    plan = ExactPlanner()
    plan.observe(0.0, {1: (10, 100 * MB), 2: (10, 100 * MB)}, {1: 1, 2: 2})
    assert sorted(plan.choose(0.0, allowance_s=-1.0)) == [1, 2]


def test_quiet_processes_and_their_sharers_need_no_reading() -> None:
    plan = _planner(1, 2)
    plan.observe(1.0, {1: (100, 100 * MB), 2: (50, 100 * MB)}, {1: 1, 2: 1})  # < 1 MB of faults in all
    assert plan.choose(1.0, PLENTY) == []


def test_a_process_that_faulted_is_read_and_one_whose_sharer_faulted_too() -> None:
    plan = _planner(1, 2, 3)
    groups = {1: 1, 2: 1, 3: 3}  # 1 and 2 share pages through fork; 3 is exec'd
    plan.observe(1.0, {1: (0, 100 * MB), 2: (40 * MB // PAGE_SIZE, 100 * MB), 3: (0, 100 * MB)}, groups)
    chosen = plan.choose(1.0, PLENTY)
    assert chosen[0] == 2 and set(chosen) == {1, 2}  # the one that moved first; 3 shares nothing


def test_readings_stop_at_the_first_that_does_not_fit_the_budget() -> None:
    plan = _planner(1, 2, rss=400 * MB)
    plan.observe(
        1.0, {1: (200 * MB // PAGE_SIZE, 400 * MB), 2: (20 * MB // PAGE_SIZE, 400 * MB)}, {1: 1, 2: 2}
    )
    one = plan.predicted_cost(1)
    assert plan.choose(1.0, one * 1.5) == [1]
    assert plan.choose(1.0, one * 0.5) == []  # not the smaller-priority one in its place either


def test_the_longest_unread_comes_first_among_equally_moved() -> None:
    plan = _planner(1, 2)
    plan.observe(5.0, {1: (0, 100 * MB), 2: (0, 100 * MB)}, {1: 1, 2: 2})
    plan.exact(2, 5.0, 50 * MB, 100 * MB, 0.001)  # 2 was read at 5 s, 1 at 0 s
    plan.observe(
        6.0, {1: (20 * MB // PAGE_SIZE, 100 * MB), 2: (20 * MB // PAGE_SIZE, 100 * MB)}, {1: 1, 2: 2}
    )
    assert plan.choose(6.0, PLENTY)[0] == 1


def test_estimate_follows_faults_calibrated_on_the_previous_intervals() -> None:
    plan = _planner(1)
    faults = 100 * MB // PAGE_SIZE
    plan.observe(1.0, {1: (faults, 200 * MB)}, {1: 1})
    assert plan.estimate(1) == pytest.approx(150 * MB)  # beta starts at 1: every fault a private page
    plan.exact(1, 1.0, 100 * MB, 200 * MB, 0.001)  # only half of them were: beta halfway to 0.5
    assert plan.tracks[1].calib.beta == pytest.approx(0.75)
    plan.observe(2.0, {1: (2 * faults, 300 * MB)}, {1: 1})
    assert plan.estimate(1) == pytest.approx(175 * MB)
    check = plan.checks[-1]
    assert (check.estimate, check.exact, check.event) == (150 * MB, 100 * MB, False)
    assert check.error_pct == pytest.approx(50.0)


def test_beta_is_clamped_and_rss_falls_lower_the_estimate() -> None:
    plan = _planner(1)
    plan.observe(1.0, {1: (10 * MB // PAGE_SIZE, 100 * MB)}, {1: 1})
    plan.exact(1, 1.0, 90 * MB, 100 * MB, 0.001)  # +40 MB from 10 MB of faults: beta capped at 1
    assert plan.tracks[1].calib.beta == 1.0
    plan.observe(2.0, {1: (10 * MB // PAGE_SIZE, 70 * MB)}, {1: 1})  # freed 30 MB
    assert plan.estimate(1) == pytest.approx(60 * MB)


def test_a_process_alone_in_its_tree_gains_what_its_rss_gains() -> None:
    """The launcher importing torch: file pages mapped 16 a fault (fault-around), so its faults
    say a fifth of what its RSS gained, and no other process maps them yet. Once another
    process of the tree lives (a rank mapping the same libraries), its faults alone count."""
    plan = ExactPlanner()
    plan.observe(0.0, {1: (0, 8 * MB)}, {1: 1})
    plan.exact(1, 0.0, 2 * MB, 8 * MB, 0.001)
    plan.observe(0.8, {1: (20 * MB // PAGE_SIZE, 108 * MB)}, {1: 1})
    assert plan.estimate(1) == pytest.approx(102 * MB, rel=0.01)
    plan.observe(1.0, {1: (20 * MB // PAGE_SIZE, 108 * MB), 2: (0, 8 * MB)}, {1: 1, 2: 2})  # a rank
    assert plan.estimate(1) == pytest.approx(22 * MB, rel=0.01)


def test_gamma_learns_what_sharers_faults_make_private() -> None:
    plan = _planner(1, 2)
    groups = {1: 1, 2: 1}
    plan.observe(1.0, {1: (0, 100 * MB), 2: (80 * MB // PAGE_SIZE, 100 * MB)}, groups)
    plan.exact(1, 1.0, 70 * MB, 100 * MB, 0.001)  # +20 MB with no fault of its own: gamma 0.25
    assert plan.tracks[1].calib.gamma == pytest.approx(0.25)
    plan.observe(2.0, {1: (0, 100 * MB), 2: (160 * MB // PAGE_SIZE, 100 * MB)}, groups)
    assert plan.estimate(1) == pytest.approx(90 * MB)


def test_a_forked_child_is_estimated_from_its_fork_and_read_within_the_budget() -> None:
    plan = _planner(1, rss=300 * MB)
    faults = 20 * MB // PAGE_SIZE
    plan.observe(1.0, {1: (0, 300 * MB), 5: (faults, 300 * MB)}, {1: 1, 5: 1}, {5: 1})
    # USS 0 and minflt 0 at fork: the estimate needs no reading.
    assert plan.estimate(5) == pytest.approx(20 * MB)
    assert plan.choose(1.0, -1.0) == []  # not forced: it waits for the budget
    assert 5 in plan.choose(1.0, PLENTY)


def test_a_forked_child_never_read_does_not_count_the_faults_that_mapped_its_parent_s_files() -> None:
    """A forked Python child that wrote 256 KiB took 159 faults (636 KB) and held 488 KB of its
    own (smaps_rollup): ~33 of its faults mapped 2.1 MB of its parent's file pages back, 64 KiB
    a fault. Counted as its own, 200 such children stood 24 MB over their USS."""
    plan = _planner(1, rss=110 * MB)
    file_rss = 2.07 * MB
    plan.observe(1.0, {1: (0, 110 * MB), 5: (159, 108 * MB)}, {1: 1, 5: 1}, {5: 1}, files={5: file_rss})
    assert plan.estimate(5) == pytest.approx(159 * PAGE_SIZE - file_rss * PAGE_SIZE / (64 * 1024))
    assert plan.estimate(5) == pytest.approx(488 * 1024, rel=0.05)
    # Its RSS falls by 136 KB of file pages (unmapped, or reclaimed): none of them its own. 300
    # such children at once took 40 MB off a total of 246.
    before = plan.estimate(5)
    fell = 136 * 1024
    plan.observe(
        1.5, {1: (0, 110 * MB), 5: (159, 108 * MB - fell)}, {1: 1, 5: 1}, {5: 1}, files={5: file_rss - fell}
    )
    assert plan.estimate(5) == pytest.approx(before, abs=0.03 * MB)  # less the faults it maps back
    file_rss -= fell
    # Read once, its estimate runs from that reading on its faults alone.
    plan.exact(5, 1.0, 488 * 1024.0, 108 * MB, 1e-3)
    plan.observe(2.0, {1: (0, 110 * MB), 5: (159 + 256, 109 * MB)}, {1: 1, 5: 1}, {5: 1}, files={5: file_rss})
    assert plan.estimate(5) == pytest.approx(488 * 1024 + 256 * PAGE_SIZE)


def test_a_forked_child_never_read_comes_before_processes_that_moved_more() -> None:
    plan = _planner(1, 2, rss=300 * MB)
    groups = {1: 1, 2: 2, 5: 1}
    plan.observe(1.0, {1: (0, 300 * MB), 2: (0, 300 * MB)}, groups)
    plan.observe(
        2.0, {1: (0, 300 * MB), 2: (200 * MB // PAGE_SIZE, 300 * MB), 5: (0, 300 * MB)}, groups, {5: 1}
    )
    plan.exact(1, 2.0, 10 * MB, 300 * MB, 0.001)  # the parent's reading at its fork (see below)
    one = plan.predicted_cost(5)
    assert plan.choose(2.0, one * 1.5) == [5]  # its one reading measures its growth: first
    # ... from the reserve too, once the budget's share for moved processes is spent.
    assert plan.choose(2.0, 0.0, reserve_s=one * 1.5) == [5]
    assert plan.urgent_s == pytest.approx(one)  # the caller keeps their account (TreeSampler)


def test_a_parent_is_read_at_the_tick_its_children_appear_and_exit() -> None:
    plan = _planner(1, rss=300 * MB)
    groups = {1: 1, 5: 1, 6: 1}
    plan.observe(1.0, {1: (0, 300 * MB), 5: (0, 300 * MB), 6: (0, 300 * MB)}, groups, {5: 1, 6: 1})
    cost = plan.predicted_cost(1)
    assert plan.choose(1.0, 0.0, reserve_s=cost * 1.5) == [1]  # its estimate's structure changed
    plan.exact(1, 1.0, 5 * MB, 300 * MB, 0.001)
    for kid in (5, 6):
        plan.exact(kid, 1.0, 0.0, 300 * MB, 0.001)
    assert plan.choose(1.5, 0.0, reserve_s=PLENTY) == []  # nothing moved, nothing changed
    plan.observe(2.0, {1: (0, 300 * MB), 5: (0, 300 * MB)}, groups)  # 6 exited
    assert plan.choose(2.0, 0.0, reserve_s=cost * 1.5) == [1]
    assert plan.choose(2.0, 0.0, reserve_s=cost * 0.5) == []  # it waits for the budget all the same


def test_a_reading_asked_for_comes_first_within_the_budget() -> None:
    plan = _planner(1, 2)
    plan.observe(1.0, {1: (0, 100 * MB), 2: (80 * MB // PAGE_SIZE, 100 * MB)}, {1: 1, 2: 2})
    plan.want(1)  # a spawned worker at the end of its start-up: quiet, but its window starts here
    one = plan.predicted_cost(1)
    assert plan.choose(1.0, one * 1.5) == [1]
    plan.exact(1, 1.0, 50 * MB, 100 * MB, 0.001)
    assert plan.choose(1.0, one * 1.5) == [2]


def test_a_fork_makes_the_parents_pages_shared_and_its_next_check_is_an_event() -> None:
    plan = ExactPlanner()
    plan.observe(0.0, {1: (0, 300 * MB)}, {1: 1})
    plan.exact(1, 0.0, 250 * MB, 300 * MB, 0.001, clean=4 * MB)
    plan.observe(1.0, {1: (0, 300 * MB), 5: (10, 300 * MB)}, {1: 1, 5: 1}, {5: 1})
    assert plan.estimate(1) == pytest.approx(
        4 * MB, abs=64 * 1024
    )  # its private file pages (+ what the child copied)
    assert 1 in plan.choose(1.0, PLENTY)
    beta = plan.tracks[1].calib.beta
    plan.exact(1, 1.0, 3 * MB, 300 * MB, 0.001)
    assert plan.checks[-1].event and plan.tracks[1].calib.beta == beta  # not calibrated on it


def test_a_sharer_that_exits_leaves_its_pages_to_the_others() -> None:
    plan = _planner(1, 2)
    groups = {1: 1, 2: 1}
    plan.observe(1.0, {1: (0, 100 * MB)}, groups)  # 2 is gone
    assert 2 not in plan.tracks and plan.tracks[1].since.unseen == 100 * MB and plan.tracks[1].since.event
    assert plan.choose(1.0, PLENTY) == [1]


def test_everyone_gets_a_reading_in_a_full_round() -> None:
    plan = _planner(1, 2, 3)
    assert sorted(plan.choose(1.0, -1.0, everyone=True)) == [1, 2, 3]


def test_a_process_that_went_quiet_after_moving_is_read_before_one_still_moving() -> None:
    """Its USS has reached the value it will hold: the reading that lasts."""
    plan = _planner(1, 2)
    groups = {1: 1, 2: 2}
    step = 10 * MB // PAGE_SIZE
    for k in range(1, 6):  # both move 10 MB a tick
        plan.observe(float(k), {1: (k * step, 100 * MB), 2: (k * step, 100 * MB)}, groups)
    plan.observe(6.0, {1: (5 * step, 100 * MB), 2: (6 * step, 100 * MB)}, groups)  # 1 stopped
    assert plan.tracks[1].went_quiet() and not plan.tracks[2].went_quiet()
    assert plan.choose(6.0, PLENTY)[0] == 1


def test_a_process_that_fell_and_held_still_is_not_rushed_before_the_children_never_read() -> None:
    """A worker freeing its data as it ends falls, then holds still: a reading then is of its
    teardown (spawned workers so read had "start-up 97 MB" of 139 and growth -80 MB). It waits
    its turn among the moved; a forked child never read comes first."""
    plan = _planner(1, 4, rss=500 * MB)
    for k in range(1, 4):  # 1 frees 50 MB a tick, then holds still
        plan.observe(float(k), {1: (0, (500 - 50 * k) * MB), 4: (0, 500 * MB)}, {1: 1, 4: 4})
    plan.observe(4.0, {1: (0, 350 * MB), 4: (0, 500 * MB)}, {1: 1, 4: 4})
    assert plan.tracks[1].went_quiet() and not plan.quiet_and_off(1)
    plan.observe(5.0, {1: (0, 350 * MB), 4: (0, 500 * MB), 3: (0, 500 * MB)}, {1: 1, 4: 4, 3: 4}, {3: 4})
    plan.tracks[4].reading.forced = False  # its reading at the fork aside: the order of the others
    assert plan.choose(5.0, 0.0, reserve_s=plan.predicted_cost(3))[:1] == [3]


def test_the_cost_of_a_reading_is_learned_from_big_processes_only() -> None:
    plan = _planner(1, 2, rss=400 * MB)
    before = plan.s_per_byte
    plan.observe(1.0, {1: (0, 400 * MB), 2: (0, 16 * 1024)}, {1: 1, 2: 2})
    plan.exact(2, 1.0, 8 * 1024, 16 * 1024, 0.002)  # 2 ms for 16 KB: overhead, not page walk
    assert plan.s_per_byte == before
    plan.exact(1, 1.0, 50 * MB, 400 * MB, 1000.0)  # absurd: kept within bounds
    assert plan.predicted_cost(1) < 1.0


def test_a_forked_child_that_execs_is_a_new_process_read_at_once() -> None:
    """torchrun's ranks are first seen between their fork and their exec: forked, read when the
    budget allows. After the exec it is a new program: read at once, whatever the budget."""
    plan = ExactPlanner()
    plan.observe(0.0, {1: (0, 200 * MB)}, {1: 1})
    plan.exact(1, 0.0, 150 * MB, 200 * MB, 0.001)
    plan.observe(0.2, {1: (0, 200 * MB), 7: (0, 200 * MB)}, {1: 1, 7: 1}, {7: 1})
    assert 7 not in plan.choose(0.2, -1.0)  # forked: its start is known, it waits for the budget
    plan.observe(0.4, {1: (0, 200 * MB), 7: (500, 30 * MB)}, {1: 1, 7: 7}, {})  # it exec'd
    assert 7 in plan.choose(0.4, -1.0)
    assert 7 in plan.tracks[1].fork.kids_gone  # its parent's pages are its own again
