"""Run a whole scenario: every run in turn, results saved as they come, then summary and report
(:func:`memprobe.session.finish.finalize`, which ``record``/``watch`` and ``profile()`` share; the
folder itself is :class:`memprobe.results.folder.ResultsFolder`'s)."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from memprobe.core.errors import ResultsFolderGone
from memprobe.core.vocabulary import signal_name
from memprobe.results.files import folder_identity
from memprobe.results.folder import ResultsFolder
from memprobe.run.runner import RunState, execute
from memprobe.run.scenario import RunSpec, Scenario
from memprobe.session.finish import SessionResult, finalize
from memprobe.session.identity import environment, writer_identity
from memprobe.session.signals import StopSignals


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
