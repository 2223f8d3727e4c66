"""A results folder's summary as OpenMetrics text, which Prometheus reads too (a text-file
collector, a Pushgateway): per run, labelled ``run`` with its id, the figures summary.json holds
(:class:`memprobe.core.summary.RunSummary`, as the analysis computed them), in base units
(bytes, seconds) as Prometheus names them:

* ``memprobe_run_info`` (1, labelled with the folder's kind and name, the run's mode, backend
  and status), ``memprobe_verdict`` (1 for the run's verdict, 0 for the others: ``flat``,
  ``growing``, ``none`` where the analysis gave none);
* ``memprobe_total_pss_peak_bytes``, ``memprobe_worker_uss_growth_bytes`` (mean over workers)
  and ``..._max_bytes``, ``memprobe_main_uss_growth_bytes``, ``memprobe_growth_threshold_bytes``,
  ``memprobe_items_per_second``;
* a recorded job's ``memprobe_memory_limit_bytes``, ``memprobe_time_to_limit_seconds`` (the
  forecast's, where it has one) and ``memprobe_oom_kills``.

A job of several nodes (one results folder per node) is labelled ``node`` too (its label:
``node 1 (gpu-07)``). A figure the run has not (None) is left out, never written as 0. Label values are the folder's
text, escaped by the format's rules (backslash, double quote, newline).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memprobe.core.summary import RunSummary
from memprobe.export.source import RunView

MB = 2**20  # memprobe's MB are MiB (the kernel's kB / 1024)
VERDICTS = ("flat", "growing", "none")


@dataclass(frozen=True)
class Gauge:
    name: str
    help: str
    unit: str | None
    value: Callable[[RunSummary], float | None]


def _mb(field: str) -> Callable[[RunSummary], float | None]:
    def value(s: RunSummary) -> float | None:
        v = getattr(s, field)
        return None if v is None else float(v) * MB

    return value


def _limit(key: str, scale: float) -> Callable[[RunSummary], float | None]:
    def value(s: RunSummary) -> float | None:
        v = (s.memory_limit or {}).get(key)
        return None if v is None or isinstance(v, bool) else float(v) * scale

    return value


GAUGES = (
    Gauge(
        "memprobe_total_pss_peak_bytes", "The job's total PSS at its peak", "bytes", _mb("total_pss_peak_mb")
    ),
    Gauge(
        "memprobe_worker_uss_growth_bytes",
        "Worker processes' USS growth over their window, mean over workers",
        "bytes",
        _mb("worker_uss_growth_mb"),
    ),
    Gauge(
        "memprobe_worker_uss_growth_max_bytes",
        "The largest worker process's USS growth over its window",
        "bytes",
        _mb("worker_uss_growth_max_mb"),
    ),
    Gauge(
        "memprobe_main_uss_growth_bytes", "The main process's USS growth", "bytes", _mb("main_uss_growth_mb")
    ),
    Gauge(
        "memprobe_growth_threshold_bytes",
        "The growth above which the verdict is growing",
        "bytes",
        _mb("growth_threshold_mb"),
    ),
    Gauge("memprobe_items_per_second", "Items loaded per second", None, lambda s: s.items_per_s),
    Gauge("memprobe_memory_limit_bytes", "The memory the job must fit in", "bytes", _limit("limit_mb", MB)),
    Gauge(
        "memprobe_time_to_limit_seconds",
        "The forecast time to the memory limit, from the forecast's reference time",
        "seconds",
        _limit("minutes_to_limit", 60.0),
    ),
    Gauge("memprobe_oom_kills", "OOM kills in the job's cgroup while it ran", None, _limit("oom_kills", 1.0)),
)


def label_value(text: object) -> str:
    """``text`` as a label value: backslash, double quote and newline escaped (OpenMetrics and
    Prometheus text alike)."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: dict[str, object]) -> str:
    return "{" + ",".join(f'{k}="{label_value(v)}"' for k, v in pairs.items()) + "}"


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def openmetrics(runs: list[RunView], manifest: dict, node: str | None = None) -> str:
    """The text of one folder's ``runs`` (its ``manifest``); ``node``: the node of a job that
    wrote it (:func:`text`)."""
    return text([(run, manifest, node) for run in runs])


def text(items: Sequence[tuple[RunView, dict, str | None]]) -> str:
    """The text of runs, each with its folder's manifest and the node that wrote it (None: a
    folder of its own; else every sample is labelled ``node`` too): every family once (its
    ``# TYPE``, ``# UNIT``, ``# HELP``), a sample per run that has the figure, ``# EOF`` last."""
    lines: list[str] = []

    def family(name: str, help: str, unit: str | None) -> None:
        lines.append(f"# TYPE {name} gauge")
        if unit:
            lines.append(f"# UNIT {name} {unit}")
        lines.append(f"# HELP {name} {help}.")

    def run_labels(run: RunView, node: str | None, **more: object) -> dict[str, object]:
        return {"run": run.run_id, **({"node": node} if node is not None else {}), **more}

    family(
        "memprobe_run_info", "A run of a results folder: what wrote it, its mode, backend and status", None
    )
    for r, manifest, node in items:
        s = r.summary
        info = run_labels(
            r,
            node,
            # A folder of schema version 1 has no kind in its manifest: its runs' own.
            kind=manifest.get("kind") or r.meta.get("kind") or ("" if r.recorded else "scenario"),
            name=manifest.get("scenario") or "",
            mode=s.mode,
            backend=s.backend,
            status=s.status,
        )
        lines.append(f"memprobe_run_info{_labels(info)} 1")
    family("memprobe_verdict", "The run's verdict: 1 for the one it got, 0 for the others", None)
    for r, _, node in items:
        got = r.summary.verdict or "none"
        for v in dict.fromkeys((*VERDICTS, got)):
            lines.append(f"memprobe_verdict{_labels(run_labels(r, node, verdict=v))} {1 if v == got else 0}")
    for g in GAUGES:
        figures = [(run_labels(r, node), g.value(r.summary)) for r, _, node in items]
        if all(f is None for _, f in figures):
            continue
        family(g.name, g.help, g.unit)
        for labels, f in figures:
            if f is not None:
                lines.append(f"{g.name}{_labels(labels)} {_number(f)}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
