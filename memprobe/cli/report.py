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
    p.add_argument("results", help="a results folder written by 'memprobe run'")


def main(args: argparse.Namespace) -> int:
    from memprobe.cli.console import summary_table
    from memprobe.errors import UsageError
    from memprobe.report import write_report
    from memprobe.results import ResultSet, write_json_atomic
    from memprobe.analysis import summarize_all
    from memprobe.session import write_summary

    root = Path(args.results)
    if not root.is_dir():
        raise UsageError(f"{root}: no such results folder")
    results = ResultSet.load(root)
    summaries = summarize_all(results)
    write_summary(root, results.manifest, summaries)
    print(summary_table(summaries))
    print(f"\nreport: {write_report(root)}")
    return 0
