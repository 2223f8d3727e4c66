"""Run a whole scenario: every run in turn, results saved as they come, then summary and report."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from memprobe.analysis import RunSummary, summarize_all
from memprobe.errors import UsageError
from memprobe.results import SCHEMA_VERSION, ResultSet, consolidate, write_json_atomic
from memprobe.runner import RunState, environment, execute
from memprobe.scenario import RunSpec, Scenario

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class SessionResult:
    root: Path
    summaries: list[RunSummary]
    interrupted: bool
    report: Path | None

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if any(s.status != "ok" for s in self.summaries) else EXIT_OK


def default_out_dir(scenario: Scenario, base: Path = Path("reports")) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return base / f"{scenario.name}-{stamp}"


class Console:
    """Where progress goes; the CLI prints, tests collect."""

    def run_started(self, spec: RunSpec, index: int, total: int) -> None: ...
    def run_progress(self, state: RunState) -> None: ...
    def run_finished(self, state: RunState) -> None: ...


def run_scenario(scenario: Scenario, out: Path, *, console: Console | None = None,
                 runs: list[RunSpec] | None = None, render: bool = True) -> SessionResult:
    """Execute ``scenario``'s runs (or ``runs``) into the results folder ``out``."""
    console = console or Console()
    runs = scenario.runs() if runs is None else runs
    if (out / "manifest.json").exists():
        raise UsageError(f"{out}: already holds results; choose another output folder (-o) or remove it")
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(scenario.text, encoding="utf-8")
    manifest = {"schema_version": SCHEMA_VERSION, "scenario": scenario.name, "scenario_path": scenario.path,
                "description": scenario.description, "status": "running", "started": time.time(),
                "finished": None, "environment": environment(), "runs": [r.run_id for r in runs]}
    write_json_atomic(out / "manifest.json", manifest)
    interrupted = False
    try:
        for index, spec in enumerate(runs):
            console.run_started(spec, index, len(runs))
            state = execute(spec, out / "runs" / spec.run_id, index=index, total=len(runs),
                            on_progress=console.run_progress)
            console.run_finished(state)
    except KeyboardInterrupt:
        interrupted = True
    manifest.update(status="interrupted" if interrupted else "complete", finished=time.time())
    return finalize(out, manifest, render=render, interrupted=interrupted)


def finalize(out: Path, manifest: dict, *, render: bool, interrupted: bool) -> SessionResult:
    """Consolidate the tables, write summary.json and the report; safe to call after Ctrl-C."""
    write_json_atomic(out / "manifest.json", manifest)
    consolidate(out)
    results = ResultSet.load(out)
    summaries = summarize_all(results)
    write_summary(out, manifest, summaries)
    report = None
    if render:
        from memprobe.report import write_report

        report = write_report(out)
    return SessionResult(out, summaries, interrupted, report)


def write_summary(out: Path, manifest: dict, summaries: list[RunSummary]) -> None:
    write_json_atomic(out / "summary.json", {
        "schema_version": SCHEMA_VERSION, "scenario": manifest.get("scenario"), "status": manifest.get("status"),
        "started": manifest.get("started"), "finished": manifest.get("finished"),
        "environment": manifest.get("environment"), "runs": [s.to_dict() for s in summaries]})
