"""Render report.html again from a results folder alone (no run is repeated)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "report"
HELP = "re-render report.html from a saved results folder"
EPILOG = """example:
  memprobe report reports/lists_vs_arrays-20261122T101500Z
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results", help="a results folder written by 'memprobe run', 'record', 'watch' or profile()"
    )


def main(args: argparse.Namespace) -> int:
    import sys

    from memprobe.analysis import analyse_all
    from memprobe.cli.console import say, summary_table
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.probe.procfs import still_running
    from memprobe.report import write_report
    from memprobe.results.files import check_run_records
    from memprobe.results.folder import ResultsFolder
    from memprobe.results.gather import consolidate, unconsolidated

    root = Path(args.results)
    name = display_path(root)
    if not root.is_dir():
        raise UsageError(f"{name}: no such results folder")
    folder = ResultsFolder.open(root)
    check_run_records(root)
    # The folder is finished first, then loaded once: a killed recording's JSON lines are read
    # once (gathered into Parquet), and no second copy of its tables is held.
    writer_running = still_running(folder.manifest.get("writer") or {})
    if folder.manifest.get("status") == "running" and writer_running:
        # Its rows are still being written: read them, move nothing.
        say(
            f"memprobe: {name} is still being written by memprobe (pid {folder.manifest['writer']['pid']}): "
            "this report shows what was saved so far",
            sys.stderr,
        )
    elif folder.finish_abandoned(writer_running=writer_running):
        say(
            f"memprobe: the memprobe that wrote {name} ended before finishing (killed?): marked interrupted",
            sys.stderr,
        )
    elif unconsolidated(root):  # gathering the rows failed last time (a full disk): finish it now
        consolidate(root)
    results = folder.load()
    analysed = analyse_all(results)  # once: the summary and the page draw from the same analysis
    summaries = [a.summary for a in analysed]
    folder.write_summary(summaries)
    say(summary_table(summaries))
    say(f"\nreport: {display_path(write_report(root, results, analysed))}")
    return 0
