"""What every export format reads of a results folder, taken once from the loaded folder
(:class:`memprobe.results.folder.ResultSet`) and its analysis (:class:`memprobe.analysis.runs.Analysed`):
per run, its summary, its samples (a recorded job's with each process's final role, as its page
draws them), the total PSS per round and the items/s the page draws
(:mod:`memprobe.core.series`), the milestones, the OOM kills the analysis found, and when the
run's clock started on the wall (its meta's ``started``). The formats only write these down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from memprobe.core import series
from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import MAIN, is_worker_role, role_order

if TYPE_CHECKING:  # the analysis ran before: its results are read here, never computed
    from memprobe.analysis.runs import Analysed
    from memprobe.results.folder import ResultSet

# A scenario run's events shown as milestones; "progress" (every few batches) and "factory" (a
# user's factory being imported) are left out: they mark no moment a reader looks for.
SCENARIO_MILESTONES = (
    "started",
    "dataset_built",
    "iter_start",
    "epoch_start",
    "first_batch",
    "warm",
    "epoch_warm",
    "epoch_end",
    "done",
    "finished",
    "error",
)
# A recorded job's milestones in words (meta.json ``milestones``).
RECORDED_MILESTONES = {
    "warm": "warm (first exact reading of a worker)",
    "first_mark": "first memprobe.mark()",
    "done": "done",
}


@dataclass(frozen=True)
class Process:
    """One process of a run: its pid, its role at the end, the name it is shown by (its role,
    with its pid where another process of the run held that role too) and its command line
    where the folder holds one (a recorded job's)."""

    pid: int
    role: str
    name: str
    command: str | None


@dataclass(frozen=True)
class Moment:
    """A point in a run's time (seconds since its clock started) and what happened then."""

    t: float
    what: str
    oom: bool = False


@dataclass(frozen=True)
class RunView:
    """One run of a results folder as the export formats read it (:func:`runs_of`)."""

    run_id: str
    meta: dict
    summary: RunSummary
    samples: pd.DataFrame
    progress: pd.DataFrame
    events: pd.DataFrame
    total_pss: pd.Series
    started: float | None
    recorded: bool

    def processes(self) -> list[Process]:
        """Every process sampled, in role order (main, ranks and workers, then the rest)."""
        if self.samples.empty or "pid" not in self.samples:
            return []
        roles = self.samples.sort_values("t", kind="stable").groupby("pid")["role"].last().astype(str)
        order = role_order(list(roles))
        dup = roles.duplicated(keep=False)
        commands = {
            int(p["pid"]): str(p["command"])
            for p in self.meta.get("processes") or []
            if isinstance(p, dict) and p.get("pid") is not None and p.get("command")
        }
        return [
            Process(
                int(pid),
                roles[pid],
                f"{roles[pid]} (pid {pid})" if dup[pid] else roles[pid],
                commands.get(int(pid)),
            )
            for pid in sorted(roles.index, key=lambda pid: (order.index(roles[pid]), pid))
        ]

    def main_pid(self) -> int | None:
        """The job's first process: a recorded job's root, a scenario run's main process."""
        root = self.meta.get("root_pid")
        if isinstance(root, int) and not isinstance(root, bool):
            return root
        procs = self.processes()
        main = [p.pid for p in procs if p.role == MAIN]
        return main[0] if main else (procs[0].pid if procs else None)

    def milestones(self) -> list[Moment]:
        """The run's milestones in time order: a scenario run's events (each epoch's too), or a
        recorded job's marks and the start of each generation of its workers."""
        out: list[Moment] = []
        if self.recorded:
            for key, t in (self.meta.get("milestones") or {}).items():
                if _finite(t):
                    out.append(Moment(float(t), RECORDED_MILESTONES.get(key, str(key))))
            out += _generations(self.meta.get("processes") or [])
        elif not self.events.empty and "event" in self.events:
            for row in self.events.to_dict("records"):
                if row.get("event") not in SCENARIO_MILESTONES or not _finite(row.get("t")):
                    continue
                epoch = row.get("epoch")
                said = f"{row['event']} (epoch {int(epoch)})" if _finite(epoch) else str(row["event"])
                out.append(Moment(float(row["t"]), said))
        else:  # an older folder without its events: each milestone's first time
            for key, t in (self.meta.get("milestones") or {}).items():
                if _finite(t):
                    out.append(Moment(float(t), str(key)))
        return sorted(out, key=lambda m: m.t)

    def oom_kills(self) -> list[Moment]:
        """The OOM kills the analysis found (its cgroup's, and the machine's where a process of
        the job vanished right after that counter rose), with their victims."""
        limit = self.summary.memory_limit or {}
        out = []
        for key, where in (("oom_killed", "cgroup"), ("machine_oom_killed", "machine")):
            for kill in limit.get(key) or []:
                if isinstance(kill, dict) and _finite(kill.get("t")):
                    victims = ", ".join(str(v) for v in kill.get("victims") or []) or "victim not seen"
                    out.append(Moment(float(kill["t"]), f"OOM kill ({where}): {victims}", oom=True))
        return sorted(out, key=lambda m: m.t)

    def items_rate(self) -> tuple[np.ndarray, np.ndarray]:
        """Items/s over time as the report's chart draws it (:func:`memprobe.core.series.item_rate`)."""
        return series.item_rate(self.progress, (self.meta.get("milestones") or {}).get("iter_start"))

    def wall(self, t: float) -> float | None:
        """Run time ``t`` as Unix time, where the run says when its clock started."""
        return None if self.started is None else self.started + t


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _generations(processes: list[dict]) -> list[Moment]:
    """When each generation of worker processes started (its first worker's start, else its
    first reading), as the meta's process list says."""
    starts: dict[int, list[float]] = {}
    for r in processes:
        if not isinstance(r, dict) or not is_worker_role(str(r.get("role"))):
            continue
        t = r.get("start_t") if _finite(r.get("start_t")) else r.get("first_t")
        if _finite(t):
            gen = r.get("generation")
            starts.setdefault(int(gen) if _finite(gen) else 0, []).append(float(t))  # type: ignore[arg-type]
    return [
        Moment(min(ts), f"workers started (generation {gen}, {len(ts)} worker{'s' if len(ts) != 1 else ''})")
        for gen, ts in sorted(starts.items())
    ]


def runs_of(results: ResultSet, analysed: Sequence[Analysed]) -> list[RunView]:
    """Each run of ``results`` with what its analysis (``analysed``, in run order) computed."""
    out = []
    for meta, a in zip(results.metas, analysed, strict=True):
        run_id = str(meta["run_id"])
        rec = a.recorded
        samples = rec.samples if rec is not None else results.run_table("samples", run_id)
        totals = series.total_of(rec.pss_by_role) if rec is not None else series.total_pss(samples)
        started = meta.get("started")
        out.append(
            RunView(
                run_id=run_id,
                meta=meta,
                summary=a.summary,
                samples=samples,
                progress=results.run_table("progress", run_id),
                events=results.run_table("events", run_id),
                total_pss=totals.dropna(),
                started=float(started) if isinstance(started, (int, float)) and _finite(started) else None,
                recorded=rec is not None,
            )
        )
    return out
