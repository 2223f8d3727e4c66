"""A session's end, whichever pipeline ran it (``run``, ``profile()``, ``record``, ``watch``): the
results folder finished (its status under the folder's lock), read back, analysed, summary.json
and the page written (:func:`finalize`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memprobe.analysis.runs import analyse_all
from memprobe.core.summary import RunSummary
from memprobe.results.folder import ResultsFolder

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class SessionResult:
    root: Path
    summaries: list[RunSummary]
    interrupted: bool
    report: Path | None
    signals: tuple[int, ...] = ()  # every stop signal received, in order (SIGINT, SIGTERM, SIGHUP)
    sweep: Any = None  # memprobe.analysis.workers.Sweep: repeats' medians, the worker-count frontier

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 128 + self.signals[0] if self.signals else EXIT_INTERRUPTED
        return EXIT_FAILED if any(s.status != "ok" for s in self.summaries) else EXIT_OK


def finalize(folder: ResultsFolder, status: str, *, render: bool, **fields: Any) -> SessionResult:
    """End the session in ``folder`` with ``status`` (``complete`` or ``interrupted``; ``fields``
    go into the manifest too), then write summary.json and the report; safe after Ctrl-C. For
    ``run``, ``record``/``watch`` and ``profile()`` alike."""
    folder.finish(status, **fields)
    results = folder.load()
    analysed = analyse_all(results)
    summaries = [a.summary for a in analysed]
    folder.write_summary(summaries, analysed.sweep.to_dict())
    report = None
    if render:
        # Imported here: jinja2 and the figures take ~0.5 s that profile() (no page) never needs.
        from memprobe.report import write_report

        report = write_report(folder.root, results, analysed)
    else:  # a snapshot `memprobe report` took while the session ran no longer says what happened
        (folder.root / "report.html").unlink(missing_ok=True)
    return SessionResult(folder.root, summaries, status == "interrupted", report, sweep=analysed.sweep)
