"""Run a whole scenario: every run in turn, results saved as they come, then summary and report."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from memprobe.analysis import RunSummary, summarize_all
from memprobe.errors import UsageError
from memprobe.probe import procfs
from memprobe.report import write_report
from memprobe.results import (
    SCHEMA_VERSION,
    ResultSet,
    consolidate,
    read_json,
    run_dirs,
    write_json_atomic,
    write_json_exclusive,
)
from memprobe.runner import (
    ResultsFolderGone,
    RunState,
    StopSignals,
    environment,
    execute,
    folder_identity,
    signal_name,
)
from memprobe.scenario import RunSpec, Scenario

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


def default_out_dir(scenario: Scenario, base: Path = Path("reports")) -> Path:
    """A new, empty ``reports/<name>-<UTC time>``, created here: two memprobe runs started in the
    same second get ``...Z`` and ``...Z-2`` instead of refusing each other."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        out = base / f"{scenario.name}-{stamp}{'' if n == 1 else f'-{n}'}"
        try:
            base.mkdir(parents=True, exist_ok=True)
            out.mkdir()
            return out
        except FileExistsError:
            if not base.is_dir():
                raise UsageError(
                    f"{base}: exists and is not a folder; choose a results folder with -o"
                ) from None
        except OSError as exc:
            raise UsageError(
                f"{out}: cannot create the results folder: {exc.strerror}; choose one with -o"
            ) from None
    raise UsageError(f"{base}: 1,000 results folders named {scenario.name}-{stamp}*; choose one with -o")


class Console:
    """Where progress goes; the CLI prints, tests collect."""

    def run_started(self, spec: RunSpec, index: int, total: int) -> None: ...
    def run_progress(self, state: RunState) -> None: ...
    def run_finished(self, state: RunState) -> None: ...
    def signal_received(self, signum: int, count: int) -> None: ...


def check_output(out: Path) -> None:
    """``out`` can take a new session's results: it does not exist yet, or is an empty folder."""
    try:
        if out.is_dir():
            if (out / "manifest.json").exists():
                raise UsageError(
                    f"{out}: already holds results; choose another output folder (-o) or remove it"
                )
            if any(out.iterdir()):
                raise UsageError(
                    f"{out}: a folder that is not empty; allowed: a new or empty folder for the results"
                )
        elif out.exists() or out.is_symlink():
            raise UsageError(
                f"{out}: exists and is not a folder; allowed: a new or empty folder for the results"
            )
    except OSError as exc:
        raise UsageError(f"{out}: cannot use it for results: {exc.strerror}") from None


def make_output(out: Path) -> None:
    """Check ``out`` (:func:`check_output`) and create it."""
    check_output(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the results folder: {exc.strerror}") from None


def start_results(out: Path, scenario: Scenario, runs: list[RunSpec]) -> dict:
    """Create the results folder ``out`` with its manifest (status ``running``) and return the
    manifest. The manifest is created exclusively: of two sessions given one folder, one gets it
    and the other a clear error, never a mix of both."""
    make_output(out)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "scenario": scenario.name,
        "scenario_path": scenario.path,
        "description": scenario.description,
        "status": "running",
        "started": time.time(),
        "finished": None,
        "environment": environment(),
        "runs": [r.run_id for r in runs],
        "writer": writer_identity(),
    }
    if not write_json_exclusive(out / "manifest.json", manifest):
        raise UsageError(f"{out}: already holds results; choose another output folder (-o) or remove it")
    (out / "scenario.yaml").write_text(scenario.text, encoding="utf-8")
    return manifest


def writer_identity() -> dict:
    """Who writes a results folder: `memprobe report` tells a session still going from one whose
    memprobe was killed (pid numbers are reused; with the start time they are not)."""
    me = procfs.read_stat(os.getpid())
    return {
        "pid": os.getpid(),
        "start_ticks": me.start_ticks if me else None,
        "boot_id": (procfs._read("/proc/sys/kernel/random/boot_id") or "").strip() or None,
    }


def writer_alive(manifest: dict) -> bool:
    """Whether the memprobe process that wrote ``manifest`` is still running (on this machine)."""
    writer = manifest.get("writer") or {}
    pid, ticks, boot = writer.get("pid"), writer.get("start_ticks"), writer.get("boot_id")
    if not isinstance(pid, int) or boot != writer_identity()["boot_id"]:
        return False
    st = procfs.read_stat(pid)
    return st is not None and st.start_ticks == ticks and st.state not in ("Z", "X")


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
        manifest = start_results(out, scenario, runs)
        folder = folder_identity(out)
        interrupted = False
        try:
            for index, spec in enumerate(runs):
                if stop.received:
                    interrupted = True
                    break
                if folder_identity(out) != folder:
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
        manifest.update(
            status="interrupted" if interrupted else "complete",
            finished=time.time(),
            signals=[signal_name(s) for s in stop.received],
        )
        result = finalize(out, manifest, render=render, interrupted=interrupted)
        if len(stop.received) > len(manifest["signals"]):  # more came while saving: say so
            manifest["signals"] = [signal_name(s) for s in stop.received]
            write_json_atomic(out / "manifest.json", manifest)
    return replace(result, signals=tuple(stop.received))


def finish_abandoned(root: Path, manifest: dict) -> bool:
    """Mark a session whose memprobe was killed (SIGKILL, the OOM killer, a crash) as such:
    status ``interrupted``, the run it was in ``interrupted`` too, its rows gathered into Parquet.
    Its processes are gone already (each run's process ends its group when memprobe ends).
    False, and nothing changed, while that memprobe still runs."""
    if manifest.get("status") != "running" or writer_alive(manifest):
        return False
    ended = max((f.stat().st_mtime for f in root.rglob("*") if f.is_file()), default=time.time())
    finished = []
    for d in run_dirs(root):
        meta = read_json(d / "meta.json")
        if meta.get("status") == "running":
            meta.update(
                status="interrupted",
                error={
                    "type": "Interrupted",
                    "message": "memprobe ended while this run was going (killed?); what was "
                    "measured until then is kept",
                },
            )
            write_json_atomic(d / "meta.json", meta)
        else:
            finished.append(meta.get("run_id"))
    # Killed after its last run had ended, while saving: nothing was cut short.
    whole = finished == list(manifest.get("runs") or [None])
    manifest.update(
        status="complete" if whole else "interrupted",
        finished=manifest.get("finished") or ended,
        ended="memprobe ended before finishing this session (killed?); 'memprobe report' finished "
        "the folder from what was saved",
    )
    write_json_atomic(root / "manifest.json", manifest)
    consolidate(root)
    return True


def finalize(out: Path, manifest: dict, *, render: bool, interrupted: bool) -> SessionResult:
    """Consolidate the tables, write summary.json and the report; safe to call after Ctrl-C."""
    write_json_atomic(out / "manifest.json", manifest)
    consolidate(out)
    results = ResultSet.load(out)
    summaries = summarize_all(results)
    write_summary(out, manifest, summaries)
    report = None
    if render:
        report = write_report(out)
    else:  # a snapshot `memprobe report` took while the session ran no longer says what happened
        (out / "report.html").unlink(missing_ok=True)
    return SessionResult(out, summaries, interrupted, report)


def write_summary(out: Path, manifest: dict, summaries: list[RunSummary]) -> None:
    write_json_atomic(
        out / "summary.json",
        {
            "schema_version": SCHEMA_VERSION,
            "scenario": manifest.get("scenario"),
            "status": manifest.get("status"),
            "started": manifest.get("started"),
            "finished": manifest.get("finished"),
            "environment": manifest.get("environment"),
            "runs": [s.to_dict() for s in summaries],
        },
    )
