"""Whether a scenario fits this machine, checked before anything runs (README, Limits): worker
processes per CPU and per MB of memory, the memory the dataset's copies will take, and batches
enough for every worker to deliver one."""

from __future__ import annotations

import os
from dataclasses import dataclass

from memprobe.core.errors import UsageError
from memprobe.probe.cgroup import memory_limit_mb
from memprobe.run.scenario import Scenario

# Workers per run: beyond 8 per CPU a worker only waits for a core (torch warns above 1 per
# CPU); and each worker process holds its own interpreter with torch imported (177 MB of USS
# measured for a spawn worker of 2,000 arrow records) or, forked, can copy the whole dataset:
# 256 MB of memory each.
WORKERS_PER_CPU = 8
MB_PER_WORKER = 256
# Bytes a list-backed record holds (USS measured, 200k records): 646 with 4 floats, 2,986 with
# 64. The list backend is the largest of the three, and each process worker can end up with a
# full copy of it (copy-on-access under fork, its own unpickled copy under spawn/forkserver).
RECORD_BYTES, RECORD_FLOAT_BYTES = 500, 40
# Encoded JPEG bytes per pixel: 0.22 measured at quality 100 (640x408), 0.07 at quality 90.
JPEG_BYTES_PER_PIXEL = 0.25
MEMORY_SHARE = 0.8  # of the machine's memory a scenario may plan to use; the rest is everyone else's


@dataclass(frozen=True)
class Machine:
    """What a scenario's runs must fit in: CPUs this process may use and memory it may take."""

    cpus: int
    memory_mb: int

    @classmethod
    def here(cls) -> Machine:
        return cls(cpus=len(os.sched_getaffinity(0)), memory_mb=memory_limit_mb())

    @property
    def max_workers(self) -> int:
        return max(1, min(self.cpus * WORKERS_PER_CPU, self.memory_mb // MB_PER_WORKER))


def check_limits(scenario: Scenario, machine: Machine | None = None, *, lifted: bool = False) -> None:
    """Refuse a scenario this machine cannot hold, before anything runs (README, Limits).

    Workers and the dataset's memory are checked against ``machine`` unless ``lifted``
    (``--no-limits``); the batch size against the dataset always: with fewer batches than
    workers, some worker never delivers one and the growth window never opens."""
    if not lifted:
        _check_machine(scenario, machine or Machine.here())
    _check_batches(scenario)


def _check_machine(scenario: Scenario, machine: Machine) -> None:
    flag = "; --no-limits runs it anyway"
    most = max(scenario.workers)
    if most > machine.max_workers:
        raise UsageError(
            f"{scenario.path}: key 'workers': got {most}; allowed on this machine: at most "
            f"{machine.max_workers} ({WORKERS_PER_CPU} per CPU x {machine.cpus} CPUs, and "
            f"{MB_PER_WORKER} MB per worker of {machine.memory_mb:,} MB){flag}"
        )
    need = planned_memory_mb(scenario)
    budget = machine.memory_mb * MEMORY_SHARE
    if need is not None and need > budget:
        key, value = (
            ("decode.images", scenario.decode.images)
            if scenario.decode is not None  # set for the decode workload only
            else ("dataset.records", scenario.dataset.records)
        )
        raise UsageError(
            f"{scenario.path}: key '{key}': got {value:,}; allowed on this machine: a dataset whose "
            f"copies fit in {budget:,.0f} MB ({MEMORY_SHARE:.0%} of {machine.memory_mb:,} MB): "
            f"with {most} workers each holding a copy this scenario needs ~{need:,.0f} MB{flag}"
        )


def planned_memory_mb(scenario: Scenario) -> float | None:
    """Memory the largest run can reach: the dataset in the main process plus a full copy in
    each worker process, and for decode the decoded batches in flight. None for user datasets,
    whose size memprobe cannot know before running them."""
    copies = 1 + max(scenario.workers)
    if scenario.workload == "records":
        d = scenario.dataset
        return d.records * (RECORD_BYTES + RECORD_FLOAT_BYTES * d.floats) * copies / 2**20
    if scenario.workload == "decode":
        dec, lo = scenario.decode, scenario.loader
        assert dec is not None  # parse_scenario sets it for this workload
        pixels = dec.width * dec.height
        in_flight = lo.batch_size * pixels * 3 * lo.prefetch_factor * max(*scenario.workers, 1)
        return (dec.images * pixels * JPEG_BYTES_PER_PIXEL * copies + in_flight) / 2**20
    return None


def _check_batches(scenario: Scenario) -> None:
    if scenario.workload == "factory":
        return  # the dataset's length is known only once the factory ran
    # decode is set for the decode workload only
    per_epoch = scenario.decode.images if scenario.decode is not None else scenario.dataset.records
    items = min(per_epoch, scenario.loader.items or per_epoch)
    most = max(scenario.workers)
    batch = scenario.loader.batch_size
    if most > 1 and -(-items // batch) < most:
        largest = -(-items // (most - 1)) - 1  # the largest batch size that still makes ``most`` batches
        key = "dataset.records" if scenario.workload == "records" else "decode.images"
        raise UsageError(
            f"{scenario.path}: key 'loader.batch_size': got {batch:,} for {items:,} items "
            f"({key}{' / loader.items' if scenario.loader.items else ''}) and {most} workers; "
            f"allowed: at most {largest:,}, so that every worker delivers a batch "
            "(the growth window opens only then)"
        )
