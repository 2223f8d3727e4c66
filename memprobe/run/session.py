"""Run a whole scenario: every run in turn, results saved as they come, then summary and report.

:func:`finalize` (summary.json and the report of a finished results folder) is shared with
``record``/``watch`` and ``profile()``; the folder itself is :class:`memprobe.results.folder.ResultsFolder`'s."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memprobe.analysis import analyse_all
from memprobe.core.summary import RunSummary
from memprobe.results.folder import ResultsFolder
from memprobe.run.runner import (
    ResultsFolderGone,
    RunState,
    StopSignals,
    environment,
    execute,
    folder_identity,
    signal_name,
    writer_identity,
)
from memprobe.run.scenario import RunSpec, Scenario

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class SessionResult:
    root: Path
    summaries: list[RunSummary]
    interrupted: bool
    report: Path | None
    signals: tuple[int, ...] = ()  # every stop signal received, in order (SIGINT, SIGTERM, SIGHUP)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 128 + self.signals[0] if self.signals else EXIT_INTERRUPTED
        return EXIT_FAILED if any(s.status != "ok" for s in self.summaries) else EXIT_OK


class Console:
    """Where progress goes; the CLI prints, tests collect."""

    def run_started(self, spec: RunSpec, index: int, total: int) -> None: ...
    def run_progress(self, state: RunState) -> None: ...
    def run_finished(self, state: RunState) -> None: ...
    def signal_received(self, signum: int, count: int) -> None: ...


def run_scenario(
    scenario: Scenario,
    out: Path,
    *,
    console: Console | None = None,
    runs: list[RunSpec] | None = None,
    render: bool = True,
    signals: Iterable[int] = (signal.SIGINT,),
) -> SessionResult:
    """Execute ``scenario``'s runs (or ``runs``) into the results folder ``out``.

    ``signals`` (from the main thread) end the session gracefully at any moment: the run going
    on is ended with its whole process group, completed runs and partial samples are saved, and
    the summary and report are written, marked interrupted. More signals meanwhile are noted and
    do not cut that short. A signal after the last run has ended changes nothing: the results
    are complete and say so."""
    console = console or Console()
    runs = scenario.runs() if runs is None else runs
    with StopSignals(signals, on_signal=console.signal_received) as stop:
        folder = ResultsFolder.create(
            out,
            kind="scenario",
            name=scenario.name,
            description=scenario.description,
            environment=environment(),
            runs=[r.run_id for r in runs],
            writer=writer_identity(),
            scenario_path=scenario.path,
            scenario_text=scenario.text,
        )
        identity = folder_identity(out)
        interrupted = False
        try:
            for index, spec in enumerate(runs):
                if stop.received:
                    interrupted = True
                    break
                if folder_identity(out) != identity:
                    raise ResultsFolderGone(out)
                console.run_started(spec, index, len(runs))
                state = execute(
                    spec,
                    out / "runs" / spec.run_id,
                    index=index,
                    total=len(runs),
                    on_progress=console.run_progress,
                    stop=stop,
                )
                console.run_finished(state)
                interrupted = state.status == "interrupted"
                if interrupted:
                    break
        except KeyboardInterrupt:  # outside the main thread, or a signal not in ``signals``
            interrupted = True
        result = finalize(
            folder,
            "interrupted" if interrupted else "complete",
            render=render,
            signals=[signal_name(s) for s in stop.received],
        )
        if len(stop.received) > len(folder.manifest["signals"]):  # more came while saving: say so
            folder.manifest["signals"] = [signal_name(s) for s in stop.received]
            folder.save()
    return replace(result, signals=tuple(stop.received))


def finalize(folder: ResultsFolder, status: str, *, render: bool, **fields: Any) -> SessionResult:
    """End the session in ``folder`` with ``status`` (``complete`` or ``interrupted``; ``fields``
    go into the manifest too), then write summary.json and the report; safe after Ctrl-C. For
    ``run``, ``record``/``watch`` and ``profile()`` alike."""
    folder.finish(status, **fields)
    results = folder.load()
    analysed = analyse_all(results)
    summaries = [a.summary for a in analysed]
    folder.write_summary(summaries)
    report = None
    if render:
        # Imported here: jinja2 and the figures take ~0.5 s that profile() (no page) never needs.
        from memprobe.report import write_report

        report = write_report(folder.root, results, analysed)
    else:  # a snapshot `memprobe report` took while the session ran no longer says what happened
        (folder.root / "report.html").unlink(missing_ok=True)
    return SessionResult(folder.root, summaries, status == "interrupted", report)
