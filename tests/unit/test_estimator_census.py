"""The estimator's page census (memprobe.probe.estimator.census_plan): who keeps one, when it is
read, and what it makes the estimate. Numbers in, numbers out: no pagemap is read."""

from __future__ import annotations

import pytest

from memprobe.core.system import PAGE_SIZE
from memprobe.probe.estimator import ExactPlanner
from memprobe.probe.estimator.tuning import MiB

MB = MiB
PLENTY = 10.0  # CPU seconds: any reading fits


def _censused(rss: int = 500 * MB) -> ExactPlanner:
    """Main process 1 read at 0 (USS 430 MB), its census started right after: 420 MB of its
    sampled pages are its alone, so 10 MB of its private pages lie outside the census."""
    plan = ExactPlanner(hosts={1})
    plan.observe(0.0, {1: (0, rss)}, {1: 1})
    plan.exact(1, 0.0, 430 * MB, rss, 0.001)
    assert plan.wants_census(1)
    plan.census(1, 420 * MB, 490 * MB, start="reading")
    return plan


def test_a_process_whose_census_moved_and_then_held_still_is_read_before_one_still_moving() -> None:
    """A torchrun launcher moves no counter of its own when its ranks' torch import shares its
    file pages (its census sees them go); it then holds still. Its reading is the one that
    lasts: without the quiet boost it lost every reading to a rank still moving, and stood 9.5 %
    under its USS for the rest of the run."""
    plan = _censused()  # process 1: main, read at 0 (USS 430 MB), its census from then
    plan.observe(0.0, {1: (0, 500 * MB), 2: (0, 500 * MB)}, {1: 1, 2: 2})
    plan.exact(2, 0.0, 50 * MB, 500 * MB, 0.001)
    step = 10 * MB // PAGE_SIZE
    for k in range(1, 6):  # 2 moves 10 MB a tick; 1's file pages become shared at tick 2
        plan.observe(float(k), {1: (0, 500 * MB), 2: (k * step, 500 * MB)}, {1: 1, 2: 2})
        plan.census(1, (380 if k >= 2 else 420) * MB, 490 * MB)
    assert plan.tracks[1].went_quiet() and not plan.tracks[2].went_quiet()
    assert plan.needs_reading(1) and plan.needs_reading(2)
    assert plan.choose(5.0, plan.predicted_cost(1))[0] == 1
    # Before a forked child never read too (those come first among the rest): its estimate from
    # an exact start holds; the quiet one's, 10 % off or more, is what the target needs.
    counters = {1: (0, 500 * MB), 2: (5 * step, 500 * MB), 4: (0, 500 * MB)}
    groups = {1: 1, 2: 2, 4: 4}
    plan.observe(5.5, counters, groups)
    plan.exact(4, 5.5, 50 * MB, 500 * MB, 0.001)
    plan.observe(6.0, {**counters, 3: (0, 500 * MB)}, {**groups, 3: 4}, {3: 4})  # 4 forks 3
    plan.census(1, 380 * MB, 490 * MB)
    plan.tracks[4].reading.forced = False  # its reading at the fork aside: the order of the others
    assert not plan.tracks[3].reading.attempted and plan.tracks[3].reading.uss is not None
    assert plan.choose(6.0, 0.0, reserve_s=plan.predicted_cost(1))[:1] == [1]


def test_a_census_estimates_a_process_from_its_exclusive_pages_and_its_rss_outside_them() -> None:
    plan = _censused()
    assert plan.estimate(1) == pytest.approx(430 * MB)
    plan.observe(0.5, {1: (0, 520 * MB)}, {1: 1})  # 20 MB more, mapped outside the sampled pages
    plan.census(1, 420 * MB, 490 * MB)
    assert plan.estimate(1) == pytest.approx(450 * MB)
    plan.observe(1.0, {1: (0, 520 * MB)}, {1: 1})
    plan.census(1, 380 * MB, 490 * MB)  # 40 MB of them became shared (another process mapped them)
    assert plan.estimate(1) == pytest.approx(410 * MB)


def test_a_parent_s_census_counts_what_its_fork_shared_and_its_workers_copies_give_back() -> None:
    plan = _censused()
    groups = {1: 1, 5: 1, 6: 1}
    plan.observe(1.0, {1: (0, 500 * MB), 5: (0, 500 * MB), 6: (0, 500 * MB)}, groups, {5: 1, 6: 1})
    # A new panel at the fork, and the reading the fork asks for sets its level exactly.
    assert plan.census_new() == [1] and 1 in plan.choose(1.0, 0.0, reserve_s=PLENTY)
    plan.census(1, 4 * MB, 490 * MB, start="fork")
    assert plan.estimate(1) == pytest.approx(14 * MB)  # what it kept, and its pages outside the census
    plan.observe(1.2, {1: (0, 500 * MB), 5: (0, 500 * MB), 6: (0, 500 * MB)}, groups)
    assert plan.census_due() == []  # its family did not move
    two = (60 * MB // PAGE_SIZE, 500 * MB)
    plan.observe(2.0, {1: (0, 500 * MB), 5: two, 6: two}, groups)
    assert plan.census_due() == [1]  # it did: read it at this tick
    plan.census(1, 34 * MB, 490 * MB)  # pages both workers copied are the parent's alone again
    assert plan.estimate(1) == pytest.approx(44 * MB)
    plan.exact(1, 2.0, 46 * MB, 500 * MB, 0.001)
    assert plan.checks[-1].error_pct < 5


def test_a_worker_keeps_no_census() -> None:
    plan = ExactPlanner(hosts=set())
    plan.observe(0.0, {1: (0, 500 * MB)}, {1: 1})
    plan.exact(1, 0.0, 430 * MB, 500 * MB, 0.001)
    assert not plan.wants_census(1)  # its own faults count its pages


def test_a_census_that_no_longer_covers_what_a_process_maps_is_drawn_again() -> None:
    plan = _censused()
    plan.observe(1.0, {1: (0, 600 * MB)}, {1: 1})  # it built 100 MB in new mappings
    plan.census(1, 420 * MB, 490 * MB)
    assert plan.census_stale() == [1] and plan.estimate(1) == pytest.approx(530 * MB)
    plan.census(1, 500 * MB, 590 * MB, start="carry")  # a new panel counts them: 80 of 100 its own
    assert plan.census_stale() == [] and plan.estimate(1) == pytest.approx(510 * MB)


def test_a_census_is_read_once_a_second() -> None:
    plan = _censused()
    plan.observe(0.6, {1: (1000, 500 * MB)}, {1: 1})
    assert plan.census_due() == []  # it moved, but its RSS already counts what it maps
    plan.observe(1.0, {1: (1000, 500 * MB)}, {1: 1})
    assert plan.census_due() == [1]  # others may have mapped its libraries since


def test_every_census_is_read_when_the_tree_s_file_pages_grew() -> None:
    """Ranks importing torch make their launcher's private library pages shared: its own
    counters do not move, so its census is read whenever the tree's file pages grew."""
    plan = _censused()
    plan.observe(0.4, {1: (0, 500 * MB)}, {1: 1})
    assert plan.census_due() == []
    plan.files_moved = True
    assert plan.census_due() == [1]
    plan.census(1, 400 * MB, 490 * MB)
    assert plan.census_due() == []  # read at this tick already


def test_a_process_whose_pagemap_cannot_be_read_keeps_the_model() -> None:
    plan = _censused()
    plan.drop_census(1, unreadable=True)
    assert not plan.wants_census(1) and plan.estimate(1) == pytest.approx(430 * MB)


def test_a_fork_a_census_saw_before_the_children_were_seen_still_shares_what_main_held() -> None:
    """Children are seen a tick after their fork; a census read in between already finds main's
    pages shared. What the fork shared is what main's counters say it held, so its workers'
    copies give it pages back (taken from the census, it shared 0.4 MB and got nothing back)."""
    plan = _censused()
    plan.observe(0.5, {1: (0, 500 * MB)}, {1: 1})
    plan.census(1, 2 * MB, 490 * MB)  # forked just before: its pages are shared now
    assert plan.estimate(1) == pytest.approx(12 * MB)
    groups = {1: 1, 5: 1, 6: 1}
    plan.observe(1.0, {1: (0, 500 * MB), 5: (0, 500 * MB), 6: (0, 500 * MB)}, groups, {5: 1, 6: 1})
    assert plan.tracks[1].fork.pages == pytest.approx(430 * MB)
    copied = (100 * MB // PAGE_SIZE, 500 * MB)
    plan.observe(2.0, {1: (0, 500 * MB), 5: copied, 6: copied}, groups, {5: 1, 6: 1})
    assert plan.estimate(1) == pytest.approx(100 * MB, rel=0.05)  # both read the same pages


def test_a_census_that_counts_more_than_the_reading_is_set_to_the_reading() -> None:
    """A sample's count has an error of its own: one that finds more private pages than the
    reading right before it is set to the reading (and follows its changes), not above it."""
    plan = ExactPlanner(hosts={1})
    plan.observe(0.0, {1: (0, 220 * MB)}, {1: 1})
    plan.exact(1, 0.0, 145 * MB, 220 * MB, 0.001)
    plan.census(1, 151 * MB, 210 * MB, start="reading")
    assert plan.estimate(1) == pytest.approx(145 * MB)
    plan.observe(1.0, {1: (0, 220 * MB)}, {1: 1})
    plan.census(1, 141 * MB, 210 * MB)  # 10 MB became shared
    assert plan.estimate(1) == pytest.approx(135 * MB)
    plan.observe(1.5, {1: (0, 300 * MB)}, {1: 1})  # it maps 80 MB more: a new panel
    plan.census(1, 221 * MB, 290 * MB, start="carry")
    assert plan.estimate(1) == pytest.approx(221 * MB)  # the old sample's error is not carried


def test_a_process_whose_sure_estimate_moved_a_quarter_from_its_reading_is_read() -> None:
    """A loop that keeps its outputs: main rises 7 MB every 0.2 s, its census (and so its
    estimate) right at every reading, so sure that it never asked for one again (5 % of its USS,
    never reached at the uncertainty's floor): it grew 39 -> 112 MB unread at a 5 % budget half
    spent, exited, and was judged "flat", +37 MB. An estimate a quarter (8 MB at least) away from
    the last reading needs one: the analysis judges exact readings."""
    step = 7 * MB
    plan = ExactPlanner(hosts={1})
    plan.observe(0.0, {1: (0, 8 * MB)}, {1: 1})
    plan.exact(1, 0.0, 2 * MB, 8 * MB, 0.001)
    plan.census(1, 2 * MB, 8 * MB, start="reading")
    read = []
    for k in range(1, 16):
        uss, rss = 2 * MB + k * step, 8 * MB + k * step
        plan.observe(0.2 * k, {1: (k * step // PAGE_SIZE, rss)}, {1: 1})
        plan.census(1, uss, rss)
        if plan.choose(0.2 * k, PLENTY):
            read.append(k)
            plan.exact(1, 0.2 * k, uss, rss, 0.001)
            plan.census(1, uss, rss, start="reading")
    assert plan.estimate(1) == pytest.approx(2 * MB + 15 * step)  # sure all the way...
    gaps = [b - a for a, b in zip([0, *read], [*read, 15], strict=True)]
    assert read and max(gaps) <= 5, read  # ...and read each time it moved a quarter (at 37 MB: 2 ticks)


def test_a_drifted_estimate_is_read_from_the_reserve_when_ticks_spent_the_budget() -> None:
    """On this VM the first steps after a sleep took 1-9 ms: a tick of one process cost 15-40 ms
    and spent the whole 1 % budget, and a main process growing 10 MB/s was read once in 30 s
    ("no verdict", USS 1.7 MB shown for 300 MB). A drifted estimate is among the readings that
    cannot wait: it may spend the reserve; one that moved less waits for the budget."""
    plan = ExactPlanner(hosts={1})
    plan.observe(0.0, {1: (0, 20 * MB)}, {1: 1})
    plan.exact(1, 0.0, 12 * MB, 20 * MB, 0.001)
    plan.census(1, 12 * MB, 20 * MB, start="reading")
    grown = 6 * MB  # under DRIFT_BYTES: it waits
    plan.observe(1.0, {1: (grown // PAGE_SIZE, 20 * MB + grown)}, {1: 1})
    plan.census(1, 12 * MB + grown, 20 * MB + grown)
    assert plan.needs_reading(1) and not plan.drifted(1)
    assert plan.choose(1.0, -0.5, reserve_s=PLENTY) == []
    grown = 40 * MB
    plan.observe(2.0, {1: (grown // PAGE_SIZE, 20 * MB + grown)}, {1: 1})
    plan.census(1, 12 * MB + grown, 20 * MB + grown)
    assert plan.drifted(1)
    cost = plan.predicted_cost(1)
    assert plan.choose(2.0, -0.5, reserve_s=0.5 + cost * 1.5) == [1]
    assert plan.urgent_s == pytest.approx(cost)  # the caller keeps their account (TreeSampler)
    assert plan.choose(2.0, -0.5, reserve_s=0.5 + cost * 0.5) == []  # within the reserve only
