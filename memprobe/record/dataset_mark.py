"""``memprobe.mark_dataset(dataset)``: tell ``memprobe record`` where the dataset's objects lie, so
its recording can name which of them the job's forked workers copied (docs/attribution.md).

One line in the training script, after the dataset is built and before the DataLoader starts its
workers::

    dataset = build_dataset(...)
    memprobe.mark_dataset(dataset)
    loader = DataLoader(dataset, num_workers=4)

When memprobe is not recording (no ``MEMPROBE_MARK_FILE``, as :func:`memprobe.mark`), it does
nothing. When it is, it walks the dataset once, in the calling process
(:func:`memprobe.probe.object_map.walk`: ~1 M objects per CPU-second, its memory let go when it
returns; docs/performance.md), and saves the map beside the marks file as
``<marks file>.dataset-<pid>.npz``; the recorder reads the workers' pages from outside while they
run and joins them with it (:mod:`memprobe.record.copies`). Walked before the workers fork, the
walk's own writes to reference counts are in the pages they inherit, not copies. It never raises:
a dataset it cannot walk is said on stderr, once, and the job goes on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from memprobe.record.marks import ENV

SUFFIX = ".dataset-"


def map_path(marks_file: str | Path, pid: int) -> Path:
    """Where the process ``pid`` saves its dataset's map, beside ``marks_file``."""
    return Path(f"{marks_file}{SUFFIX}{pid}.npz")


def mark_dataset(dataset: Any, name: str = "dataset") -> None:
    """Tell ``memprobe record`` where ``dataset``'s objects lie (``name``: how its paths start);
    a no-op unless ``memprobe record`` is recording."""
    marks = os.environ.get(ENV)
    if not marks:
        return
    try:
        from memprobe.probe.object_map import walk

        walk(dataset, name).save(map_path(marks, os.getpid()))
    except Exception as exc:  # noqa: BLE001  (the user's job goes on whatever the walk meets)
        print(f"memprobe.mark_dataset: not marked ({type(exc).__name__}: {exc})"[:300], file=sys.stderr)
