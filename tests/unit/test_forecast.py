"""The time to the limit (memprobe/record/forecast.py) on made-up series with known answers: made
of the job's own memory, from the trend that persists (the peaks of worker generations, the main
process's own rise), with its spread, and none where nothing persists; the cgroup's other
processes and whether the job was alone (their reading: tests/unit/test_cgroup.py); and the same rule in
the live view (memprobe/live/model.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from treejobs import cgroup_meta

from memprobe.analysis import forecast
from memprobe.analysis.limit import against_limit, charge_rate
from memprobe.core import forecast_words
from memprobe.core.units import mb
from memprobe.report.record_tables import cgroup_facts

EPOCH_S = 30.0


def epochs_job(
    n: int, rise_per_epoch: float, ramp_mb: float = 400.0, noise: tuple[float, ...] = (0.0,)
) -> tuple[pd.Series, list[tuple[int, float, float, float]]]:
    """``n`` epochs of EPOCH_S: 4 workers each epoch, forked at its start and ended 2 s before its
    end; total PSS read every second: 1,000 MB plus ``rise_per_epoch`` a generation, plus the
    workers' copies ramping up to ``ramp_mb`` within the epoch and gone when they end (the peaks'
    own scatter: ``noise``, a generation's in turn)."""
    t = np.arange(0.0, n * EPOCH_S, 1.0)
    gen = (t // EPOCH_S).astype(int)
    within = t - gen * EPOCH_S
    alive = within < EPOCH_S - 2
    ramp = np.where(alive, ramp_mb * np.minimum(within / 25.0, 1.0), 0.0)
    shift = np.array([noise[g % len(noise)] for g in gen])
    total = pd.Series(1000.0 + rise_per_epoch * gen + ramp + shift, index=t)
    workers = [
        (g, g * EPOCH_S + 0.5, g * EPOCH_S + EPOCH_S - 2, 100.0 + 3.0 * g) for g in range(n) for _ in range(4)
    ]
    return total, workers


def test_a_within_epoch_ramp_that_resets_each_epoch_gives_no_kill_forecast() -> None:
    """Workers copying 400 MB in each epoch and ending with it (+960 MB/min while they copy): the
    peaks do not rise, so no time to the limit, though the charge's own rate (what memprobe used
    before) rose steeply to its peak."""
    total, workers = epochs_job(12, 0.0, noise=(0.0, 2.0, -1.0))
    gens = forecast.generations(workers, float(total.index[-1]), total)
    assert [g.ended for g in gens] == [True] * 12
    f = forecast.forecast(gens, None, forecast.Room(4096.0, True, total + 200.0), total)
    assert f.basis is None and f.why_none == "not_rising"
    assert f.minutes_to_limit is None and f.limit_at_t is None
    assert f.per_generation_low_mb is not None and f.per_generation_low_mb < 0 < f.per_generation_high_mb  # type: ignore[operator]
    # What the last generation's four workers grew (133 MB each), over the 24.5 s to its peak.
    assert f.ramp_mb == pytest.approx(4 * 133.0) and f.ramp_mb_per_min == pytest.approx(4 * 133.0 / 24.5 * 60)
    # The charge's own rate up to its peak (what memprobe used before) said it was rising.
    assert charge_rate(total + 200.0) > forecast.RISING_MB_PER_MIN  # type: ignore[operator]
    words = forecast_words.words(f.to_dict(), 4096.0)
    assert words.startswith("none: nothing of the job's own memory rises in a way that persists")
    assert (
        "within an epoch its workers add +532 MB (+1,303 MB/min) and free it as they end: no trend" in words
    )


def test_generation_peaks_rising_linearly_give_the_epoch_and_time_of_the_limit_with_a_spread() -> None:
    """Peaks +20 MB an epoch (scattered +-3 MB), epochs of 30 s, the charge 200 MB above total
    PSS (memprobe, page cache), limit 4,096 MB: the last generation (the tenth) peaks at 1,577 MB, the
    charge then 1,777 MB: 2,319 MB of room, about 116 epochs after the tenth at 20 MB an epoch."""
    total, workers = epochs_job(10, 20.0, ramp_mb=400.0, noise=(3.0, -3.0))
    gens = forecast.generations(workers, float(total.index[-1]), total)
    room = forecast.Room(4096.0, True, total + 200.0)
    f = forecast.forecast(gens, None, room, total)
    assert f.basis == "generations" and f.fitted_from == 4  # the latest half, at least 6
    assert f.per_generation_mb == pytest.approx(20.0, abs=1.0)
    assert f.per_generation_low_mb < 20.0 < f.per_generation_high_mb  # type: ignore[operator]
    assert f.seconds_per_generation == pytest.approx(EPOCH_S)
    assert f.rate_mb_per_min == pytest.approx(f.per_generation_mb * 2)  # type: ignore[operator]
    last_peak = 1000.0 + 20 * 9 + 400 - 3.0  # generation 9 (the tenth) scatters -3
    assert f.level_of == "charge" and f.level_mb == pytest.approx(last_peak + 200.0)
    assert f.room_mb == pytest.approx(4096.0 - last_peak - 200.0)
    epochs = f.room_mb / f.per_generation_mb  # type: ignore[operator]
    assert f.generation_at_limit == pytest.approx(10 + epochs)
    assert f.minutes_to_limit == pytest.approx(epochs * EPOCH_S / 60)
    assert f.limit_at_t == pytest.approx(f.from_t + epochs * EPOCH_S)  # type: ignore[operator]
    assert f.minutes_soonest < f.minutes_to_limit < f.minutes_latest  # type: ignore[operator]
    assert f.generation_at_limit_soonest < f.generation_at_limit < f.generation_at_limit_latest  # type: ignore[operator]
    assert f.worker_growth_per_generation_mb == pytest.approx(3.0)
    words = forecast_words.words(f.to_dict(), 4096.0)
    slope = mb(f.per_generation_mb, sign=True, true_minus=False)  # +19 MB: the scatter tilts the line
    assert words.startswith(
        f"each epoch's workers grow +3.0 MB more; the job's peak total PSS {slope} per epoch ("
    )
    assert f"; 4 GB at about epoch {f.generation_at_limit:.0f} (" in words
    assert f"about {forecast_words.duration(f.minutes_to_limit)} (" in words  # type: ignore[arg-type]
    assert (
        "after its last peak (2,319 MB left: the cgroup's charge then, less its file cache (reclaimed before a kill), was 1,777 MB"
        in words
    )


def test_a_generation_still_running_as_the_record_ends_has_no_peak_in_the_line() -> None:
    total, workers = epochs_job(6, 20.0)
    cut = total[total.index <= 4 * EPOCH_S + 10]  # in the fifth epoch
    alive = [
        (g, s, e if e <= cut.index[-1] else None, grown) for g, s, e, grown in workers if s <= cut.index[-1]
    ]
    gens = forecast.generations(alive, float(cut.index[-1]), cut)
    assert [g.ended for g in gens] == [True, True, True, True, False]
    f = forecast.forecast(gens, None, forecast.Room(4096.0, True, cut + 200.0), cut)
    assert f.basis == "generations" and f.per_generation_mb == pytest.approx(20.0)
    assert f.from_t == pytest.approx(3 * EPOCH_S + 25)  # the fourth's peak


def test_too_few_generations_and_a_flat_main_process_give_no_forecast() -> None:
    total, workers = epochs_job(2, 50.0)
    gens = forecast.generations(workers, float(total.index[-1]), total)
    flat = pd.Series(300.0, index=np.arange(0.0, 60.0, 1.0))
    f = forecast.forecast(gens, flat, forecast.Room(4096.0, True, total + 200.0), total)
    assert f.basis is None and f.why_none == "not_rising"  # the main process's own memory is flat
    assert forecast.forecast(gens, flat.iloc[:4], forecast.Room(4096.0, True), total).why_none == "too_short"
    assert forecast.forecast(gens, flat, forecast.Room(None, False), total).why_none == "no_limit"


def test_a_main_process_rising_steadily_is_forecast_from_its_own_rise() -> None:
    """No workers: the main process's anonymous memory +2 MB a second for 60 s (120 MB/min),
    the charge 50 MB above it; limit 1,000 MB: 1,000 - 468 = 532 MB of room at the end,
    4.4 minutes; the spread is the rise over the two halves of the latest half (the same)."""
    t = np.arange(0.0, 60.0, 1.0)
    main = pd.Series(300.0 + 2.0 * t, index=t)
    f = forecast.forecast([], main, forecast.Room(1000.0, True, main + 50.0), main)
    assert f.basis == "parents"
    assert f.rate_mb_per_min == pytest.approx(120.0)
    assert f.rate_low_mb_per_min == pytest.approx(120.0) and f.rate_high_mb_per_min == pytest.approx(120.0)
    assert f.room_mb == pytest.approx(1000.0 - (300.0 + 118.0 + 50.0))
    assert f.minutes_to_limit == pytest.approx(f.room_mb / 120.0)  # type: ignore[operator]
    assert f.limit_at_t == pytest.approx(59.0 + 60 * f.minutes_to_limit)  # type: ignore[operator]
    assert forecast_words.words(f.to_dict(), 1000.0).startswith(
        "the main process's own memory +120 MB/min; 1,000 MB in about 4 min (532 MB left"
    )
    # Building its dataset then flat: the latest half's second half is not rising.
    built = pd.Series(np.where(t < 40, 300.0 + 5.0 * t, 500.0), index=t)
    assert (
        forecast.forecast([], built, forecast.Room(1000.0, True, built + 50.0), built).why_none
        == "not_rising"
    )


def test_the_room_is_the_least_of_the_limit_less_the_charge_and_memavailable() -> None:
    t = np.arange(0.0, 10.0, 1.0)
    charge = pd.Series(1000.0, index=t)
    available = pd.Series(np.linspace(5000.0, 2000.0, len(t)), index=t)
    assert forecast.Room(4096.0, True, charge, available).at(0.0, 2.0, 100.0) == (3096.0, 1000.0, "charge")
    # The machine runs short first: MemAvailable at its least, a second either side.
    assert forecast.Room(4096.0, True, charge, available).at(8.0, 8.5, 100.0) == (2000.0, 2096.0, "available")
    # The machine's memory is the limit (no cgroup limit): MemAvailable alone.
    assert forecast.Room(24_000.0, False, charge, available).at(0.0, 1.0, 100.0)[2] == "available"  # type: ignore[index]
    # Neither read (an older folder): the limit less the job's total PSS.
    assert forecast.Room(4096.0, True).at(0.0, 1.0, 1000.0) == (3096.0, 1000.0, "total_pss")


# -- a shared cgroup: a bystander allocating beside a flat job ------------------------------------


def shared_cgroup(others_mb: float) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """A flat 50 MB job (one main process, read each second for 120 s) in a 2,048 MB cgroup
    where another process allocates 900 MB over those two minutes (+450 MB/min)."""
    t = np.arange(0.0, 120.0, 1.0)
    samples = pd.DataFrame(
        {
            "t": t,
            "pid": 10,
            "role": "main",
            "missing": False,
            "rss_anon_mb": 40.0,
            "rss_file_mb": 10.0,
            "rss_shmem_mb": 0.0,
        }
    )
    system = pd.DataFrame(
        {
            "t": t,
            "cgroup_mb": 60.0 + 300.0 + 7.5 * t,  # the job, and the bystander's 300 MB rising
            "cgroup_oom_kills": 0,
            "cgroup_file_cache_mb": 0.0,
            "mem_available_mb": 20_000.0,
        }
    )
    meta = {"cgroup": cgroup_meta("/runner", 2048.0, 1250.0, 360.0, others_mb, "Runner.Worker")}
    return meta, samples, system


def test_a_shared_cgroup_s_charge_is_not_the_job_s_the_forecast_is_made_of_the_job_s_own_memory() -> None:
    meta, samples, system = shared_cgroup(1200.0)
    total = pd.Series(50.0, index=samples["t"].to_numpy(float))
    main = forecast.parents_memory(samples, [(10, 0.0, 119.0)])
    limit = against_limit(meta, samples, system, 24_000.0, total=total, parents=main)
    assert limit is not None
    assert limit["cgroup_alone"] is False
    assert limit["charge_rate_mb_per_min"] == pytest.approx(
        450.0
    )  # the whole cgroup's: a fact, not the job's
    f = limit["forecast"]
    assert f["basis"] is None and f["why_none"] == "not_rising" and limit["minutes_to_limit"] is None
    facts = dict(cgroup_facts(limit, 24_000.0))
    assert (
        "the whole cgroup's: 1 other process in it held 1,200 MB of RSS at their most, the largest "
        "Runner.Worker (pid 77, 1,200 MB); the time to the limit is made of the job's own memory"
        in facts["cgroup charge"]
    )
    assert facts["time to the limit"].startswith("none: nothing of the job's own memory rises")


def test_in_a_shared_cgroup_a_rising_job_has_the_room_the_others_left() -> None:
    meta, samples, system = shared_cgroup(1200.0)
    samples["rss_anon_mb"] = 40.0 + 1.0 * samples["t"]  # the job's own +60 MB/min
    total = pd.Series(50.0 + samples["t"].to_numpy(float), index=samples["t"].to_numpy(float))
    main = forecast.parents_memory(samples, [(10, 0.0, 119.0)])
    limit = against_limit(meta, samples, system, 24_000.0, total=total, parents=main)
    f = limit["forecast"]  # type: ignore[index]
    assert f["basis"] == "parents" and f["rate_mb_per_min"] == pytest.approx(60.0)
    charge_then = 60.0 + 300.0 + 7.5 * 119.0
    assert f["level_of"] == "charge" and f["room_mb"] == pytest.approx(2048.0 - charge_then)
    assert f["minutes_to_limit"] == pytest.approx((2048.0 - charge_then) / 60.0)


def test_a_cgroup_whose_others_are_small_holds_the_job_alone() -> None:
    assert forecast.alone({"processes": 2, "rss_mb": 6.5, "largest": []}) is True
    assert forecast.alone({"processes": 1, "rss_mb": 400.0, "largest": []}) is False
    assert forecast.alone(None) is None  # not read: an older folder
    meta, samples, system = shared_cgroup(5.0)
    limit = against_limit(meta, samples, system, 24_000.0)
    assert limit is not None and limit["cgroup_alone"] is True
    assert "the cgroup held the job alone" in dict(cgroup_facts(limit, 24_000.0))["cgroup charge"]


def test_total_pss_above_the_charge_says_why() -> None:
    """The job entered its cgroup 2 s after it started, and maps 10 MB of files: its 500 MB total
    PSS peak is 140 MB above the charge's 360 MB."""
    meta, samples, system = shared_cgroup(5.0)
    meta["cgroup"]["since_t"] = 2.0
    system["cgroup_mb"] = 360.0
    total = pd.Series(500.0, index=samples["t"].to_numpy(float))
    limit = against_limit(meta, samples, system, 24_000.0, total=total, estimated=3)
    assert limit is not None and limit["pss_above_charge_mb"] == pytest.approx(140.0)
    assert limit["pss_above_charge_why"] == {"entered_t": 2.0, "files_mb": 10.0, "estimated": 3}
    said = dict(cgroup_facts(limit, 24_000.0))["total PSS above the charge"]
    assert said.startswith("+140 MB at its peak: pages the job maps are charged to other cgroups")
    assert (
        "before it entered this cgroup, 2.00 s after its start, stays charged to the cgroup it started in"
        in said
    )
    assert "(10 MB of files and shared memory resident in its processes then)" in said
    assert said.endswith("; and total PSS counts 3 processes never read exactly with an estimate")
    system["cgroup_mb"] = 600.0
    assert against_limit(meta, samples, system, 24_000.0, total=total)["pss_above_charge_mb"] is None  # type: ignore[index]


def test_where_the_cgroup_holds_the_job_alone_each_epoch_s_peak_is_its_charge_s() -> None:
    """Eight epochs of 30 s, the charge (less its 100 MB of file cache) peaking +20 MB an
    epoch; total PSS, read exactly only now and then, missed every other epoch's peak by 150 MB.
    Alone in its cgroup, the job's peaks are the charge's: +20 MB an epoch, exactly; shared with a
    400 MB process, they are total PSS's, scattered."""
    total, workers = epochs_job(8, 20.0, ramp_mb=300.0)
    gen = (total.index.to_numpy(float) // EPOCH_S).astype(int)
    t = total.index.to_numpy(float)
    system = pd.DataFrame(
        {
            "t": t,
            "cgroup_mb": total.to_numpy(float) + 100.0,
            "cgroup_oom_kills": 0,
            "cgroup_file_cache_mb": 100.0,
        }
    )
    missed = pd.Series(
        np.where(gen % 2 == 1, np.minimum(total.to_numpy(float), 1000.0 + 20.0 * gen + 150.0), total), index=t
    )
    samples = pd.DataFrame({"t": t, "pid": 10, "role": "main", "missing": False})
    lives = [(g, s, e, grown) for g, s, e, grown in workers]
    for others, of in ((4.0, "charge"), (400.0, "total_pss")):
        meta = {
            "cgroup": {
                "version": 2,
                "path": "/job",
                "limit_mb": 4096.0,
                "usage_mb": 900.0,
                "since_t": 0.0,
                "others": {"processes": 1, "rss_mb": others, "largest": []},
            }
        }
        limit = against_limit(meta, samples, system, 24_000.0, total=missed, workers=lives)
        f = limit["forecast"]  # type: ignore[index]
        assert f["peaks_of"] == of
        if of == "charge":
            assert f["per_generation_mb"] == pytest.approx(20.0) and f[
                "per_generation_low_mb"
            ] == pytest.approx(20.0)
            assert [g["peak_mb"] for g in f["generations"][:2]] == [
                1300.0,
                1320.0,
            ]  # the charge less its cache
            assert f["limit_in_peaks_mb"] == pytest.approx(4096.0)
            assert (
                "the job's peak (its cgroup's charge less its file cache: the cgroup holds the job alone) +20 MB per epoch"
                in forecast_words.words(f, 4096.0)
            )
        else:
            assert [g["peak_mb"] for g in f["generations"][:2]] == [
                1300.0,
                1170.0,
            ]  # the second's peak missed
            assert f["per_generation_high_mb"] - f["per_generation_low_mb"] > 20.0


def test_the_main_process_s_rate_lies_within_its_spread_where_its_memory_stepped() -> None:
    """+60 MB/min in each half of the latest half, and a 100 MB step between them: the line over
    the whole half (+285 MB/min) is the spread's top, not outside it."""
    t = np.arange(0.0, 80.0, 1.0)
    main = pd.Series(300.0 + 1.0 * t + np.where(t >= 60.0, 100.0, 0.0), index=t)
    f = forecast.forecast([], main, forecast.Room(4000.0, True, main + 50.0), main)
    assert f.rate_low_mb_per_min == pytest.approx(60.0)
    assert f.rate_low_mb_per_min <= f.rate_mb_per_min == f.rate_high_mb_per_min  # type: ignore[operator]
    assert f.minutes_soonest == f.minutes_to_limit < f.minutes_latest  # type: ignore[operator]


def test_a_peak_missed_between_exact_readings_is_left_out_of_the_line() -> None:
    """Peaks +20 MB an epoch, three of the latest twelve 600 MB short (total PSS held the workers
    at their last exact reading: a shared cgroup's job had a third of its peaks at 700 MB among
    1,500 to 1,800, and its line fell): left out, the line is +20 MB an epoch again."""
    total, workers = epochs_job(24, 20.0, noise=(3.0, -3.0))
    gen = (total.index.to_numpy(float) // EPOCH_S).astype(int)
    short = np.isin(gen, [14, 18, 21])
    total = pd.Series(
        np.where(short, total.to_numpy(float) - 600.0, total.to_numpy(float)), index=total.index
    )
    gens = forecast.generations(workers, float(total.index[-1]), total)
    f = forecast.forecast(gens, None, forecast.Room(8000.0, True, total + 200.0), total)
    assert f.basis == "generations" and f.missed == [14, 18, 21]
    assert f.per_generation_mb == pytest.approx(20.0, abs=1.0)
    assert "3 of whose peaks were missed between exact readings and left out" in forecast_words.words(
        f.to_dict(), 8000.0
    )
