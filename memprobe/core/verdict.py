"""How a run's growth is judged, whichever pipeline wrote it: :class:`VerdictSpec` (a scenario's
``verdict:``, ``record --threshold``). Standard library only: a scenario file and the commands'
flags are checked against it before pandas, pyarrow or torch load, so a refusal is quick."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VerdictSpec:
    """How a run's growth is judged, whichever pipeline wrote it (a scenario's ``verdict:``,
    ``record --threshold``)."""

    # Worker USS growth above this (MB, mean per worker) reads as "growing". Chosen from
    # measurement (docs/performance.md): a forked worker copies ~36 MB of the interpreter's own
    # objects (torch imported) once, when the cyclic GC first walks them, whatever the dataset;
    # numpy/arrow workers grow by that much and no more, list workers by a share of the data.
    growth_threshold_mb: float = 50.0
