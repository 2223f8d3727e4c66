"""What a page says of the session as a whole, from its manifest: the environment it ran in (the
table at the foot of every page, and compare's side by side) and whether it finished (the banner
over a folder that is not a clean, complete session)."""

from __future__ import annotations

from memprobe.core.summary import RunSummary
from memprobe.report import format as fmt


def environment_rows(manifest: dict) -> list[tuple[str, str]]:
    env = manifest.get("environment") or {}
    gil = env.get("gil_enabled")
    started, finished = manifest.get("started"), manifest.get("finished")
    duration = finished - started if fmt.is_num(started) and fmt.is_num(finished) else None
    rows = [
        ("memprobe", env.get("memprobe")),
        ("torch", env.get("torch")),
        ("Python", env.get("python_build") or env.get("python")),
        ("GIL", None if gil is None else ("enabled" if gil else "disabled (free-threaded build)")),
        ("kernel", env.get("kernel")),
        ("machine", env.get("machine")),
        ("CPU", env.get("cpu_model")),
        ("CPU count", env.get("cpu_count")),
        ("total RAM", fmt.mb(env.get("mem_total_mb")) if env.get("mem_total_mb") is not None else None),
        ("host", env.get("hostname")),
        ("scenario file", manifest.get("scenario_path")),
        ("started", fmt.timestamp(started)),
        ("finished", fmt.timestamp(finished)),
        ("duration", fmt.seconds(duration)),
        ("session status", manifest.get("status")),
    ]
    return [(k, str(v)) for k, v in rows if v is not None]


def banner(manifest: dict, summaries: list[RunSummary]) -> tuple[str, str] | None:
    """(level, text) for a folder that is not a clean, complete session."""
    status = manifest.get("status")
    done, planned = len(summaries), len(manifest.get("runs") or [])
    if status == "interrupted":
        return "error", (
            f"This session was interrupted: {done} of {planned or done} runs have results, and the "
            f"last of them may have been cut short. Figures below are from what was saved."
        )
    seen = manifest.get("seen_running")  # `memprobe report` of a session its memprobe still writes
    if status == "running" and isinstance(seen, dict) and fmt.is_num(seen.get("as_of")):
        going = "recording" if manifest.get("kind") in ("record", "watch") else "running"
        return "warn", (
            f"Still {going}, as of {fmt.clock(seen['as_of'])} (memprobe pid {seen.get('writer_pid')} "
            f"writes this folder): this page shows what was sampled until then, and the recording "
            f"replaces it with its own when it ends. {done} of {planned or done} runs have results so far."
        )
    if status not in (None, "complete"):
        return "error", (
            f"This session did not finish (status '{status}'): it is still running or it crashed. "
            f"{done} of {planned or done} runs have results."
        )
    return None
