"""A results folder as TensorBoard scalars, written with tensorboard's own event file writer
(``EventFileWriter``, the one torch's ``SummaryWriter`` writes through), each point a scalar
summary as ``SummaryWriter.add_scalar`` writes it (a ``simple_value``), without importing torch
(importing ``SummaryWriter`` took 7.3-10.3 s, this writer 1.0-1.9 s: 3 interleaved runs on the
shared 2-core build VM, loaded): one log directory per run (``OUT/<run id>``), and in it

* ``rss_mb/<process>`` at every reading, ``pss_mb/<process>`` and ``uss_mb/<process>`` at each
  exact reading, ``uss_est_mb/<process>`` where a recorded job's sampler estimated USS between
  them (a process named by its role, with its pid where two processes held that role);
* ``total_pss_mb``: the job's total PSS per round, as the report draws it;
* ``items_per_s``: items/s where the run counted items, as the report draws it.

Each point's wall time is when it was read (the run's ``started`` plus its time), so TensorBoard's
"Wall" axis puts them beside a training's own curves; its step is the milliseconds since the
run's clock started. Computes nothing: the values are the readings and the analysis' series
(:mod:`memprobe.export.source`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from memprobe.core.errors import UsageError
from memprobe.core.text import printable
from memprobe.export.source import RunView

NEEDS = "the tensorboard format needs the tensorboard package (pip install tensorboard)"


def run_dir_name(run_id: str) -> str:
    """A run's log directory's name: its id with anything but letters, digits, ``.``, ``_`` and
    ``-`` as ``_`` (an id is the folder's text: never a path of its own)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", run_id).strip(".")
    return name or "run"


def scalars(run: RunView) -> list[tuple[str, float, float]]:
    """Every scalar of ``run`` as (tag, run time in s, value), in time order per tag."""
    out: list[tuple[str, float, float]] = []
    samples = run.samples
    if not samples.empty and "pid" in samples:
        names = {p.pid: printable(p.name) for p in run.processes()}
        rows = samples.sort_values("t", kind="stable")
        readable = ~rows["missing"].fillna(False).astype(bool)
        exact = readable & (rows["tier"] == "pss")
        for column in ("rss_mb", "pss_mb", "uss_mb", "uss_est_mb"):
            if column not in rows:
                continue
            keep = rows[readable if column in ("rss_mb", "uss_est_mb") else exact]
            values = pd.to_numeric(keep[column], errors="coerce")
            for pid, t, v in zip(keep["pid"], keep["t"], values, strict=True):
                if math.isfinite(v):
                    out.append((f"{column}/{names.get(int(pid), pid)}", float(t), float(v)))
    out += [("total_pss_mb", float(t), float(v)) for t, v in run.total_pss.items()]
    t, rate = run.items_rate()
    out += [("items_per_s", float(a), float(b)) for a, b in zip(t, rate, strict=True) if math.isfinite(b)]
    return out


def write_tensorboard(runs: list[RunView], out: Path) -> list[Path]:
    """The event files of ``runs`` under ``out``, one log directory per run; their paths."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise UsageError(NEEDS) from None
    written = []
    taken: set[str] = set()
    for run in runs:
        name = run_dir_name(run.run_id)
        while name in taken:  # two ids that read alike once made safe
            name += "_"
        taken.add(name)
        writer = EventFileWriter(str(out / name), max_queue_size=1000, flush_secs=3600)
        try:
            for tag, t, value in scalars(run):
                writer.add_event(
                    Event(
                        wall_time=run.wall(t) or t,
                        step=round(t * 1000),
                        summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]),
                    )
                )
        finally:
            writer.close()
        written.append(out / name)
    return written
