"""Run a scenario: every backend x mode x worker count in a fresh process, sampled from outside.

Shows progress per run, then a summary table, and writes the results and report.html to
reports/<scenario>-<UTC timestamp>/ (or -o DIR). Exit codes: 0 all runs ok, 1 a run failed or
timed out (or, with --strict, an expectation was not met), 2 bad input, 130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

NAME = "run"
HELP = "run a scenario file and write results + report"
EPILOG = """examples:
  memprobe run scenarios/lists_vs_arrays.yaml
  memprobe run scenarios/quick.yaml -o /tmp/look
  memprobe run scenarios/lists_vs_arrays.yaml --quick --strict
"""
QUICK_RECORDS = 100_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario YAML file (see scenarios/)")
    p.add_argument("-o", "--output", metavar="DIR", help="results folder (default: reports/<name>-<UTC time>)")
    p.add_argument("--quick", action="store_true",
                   help=f"same matrix on a small dataset (at most {QUICK_RECORDS:,} records): a fast look")
    p.add_argument("--strict", action="store_true", help="exit 1 when a run does not meet the scenario's expectation")
    p.add_argument("--no-report", action="store_true", help="save results and summary only; skip report.html")
    p.add_argument("--timeout", type=float, metavar="S", help="per-run timeout in seconds (overrides the scenario)")


def main(args: argparse.Namespace) -> int:
    from memprobe.cli.console import TerminalConsole, summary_table
    from memprobe.scenario import load_scenario, with_overrides
    from memprobe.session import EXIT_FAILED, default_out_dir, run_scenario

    scenario = load_scenario(args.scenario)
    if args.quick:
        scenario = with_overrides(scenario, dataset=replace(
            scenario.dataset, records=min(scenario.dataset.records, QUICK_RECORDS)))
    if args.timeout:
        scenario = with_overrides(scenario, timeout_s=args.timeout)
    out = Path(args.output) if args.output else default_out_dir(scenario)
    runs = scenario.runs()
    print(f"memprobe: {scenario.name}: {len(runs)} runs -> {out}", file=sys.stderr)
    result = run_scenario(scenario, out, console=TerminalConsole(), render=not args.no_report)
    print(summary_table(result.summaries))
    _print_explanations(result.summaries)
    if result.interrupted:
        print("memprobe: interrupted: completed runs and partial samples were saved", file=sys.stderr)
    print(f"\nresults: {out}" + (f"\nreport:  {result.report}" if result.report else ""))
    code = result.exit_code
    unmet = [s.run_id for s in result.summaries if s.expectation_met is False]
    if unmet:
        print(f"memprobe: expectation not met: {', '.join(unmet)}", file=sys.stderr)
        if args.strict and code == 0:
            code = EXIT_FAILED
    return code


def _print_explanations(summaries: list) -> None:
    failed = [s for s in summaries if s.status != "ok"]
    for s in failed:
        print(f"\n{s.run_id}: {s.status}: {s.error}")
