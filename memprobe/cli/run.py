"""Run a scenario: every backend x mode x worker count in a fresh process, sampled from outside.

Shows progress per run, then a summary table, and writes the results and report.html to
reports/<scenario>-<UTC timestamp>/ (or -o DIR). Exit codes: 0 all runs ok, 1 a run failed or
timed out (or, with --strict, an expectation was not met), 2 bad input, 130 interrupted by Ctrl-C
(143 by SIGTERM, 129 by SIGHUP: handled the same way, what was measured is saved and no process of
the run is left). A scenario above what this machine can hold (workers, dataset size) is refused
before anything runs; --no-limits runs it anyway.

Your dataset factories (--dataset, a scenario's dataset.factory) are never imported in memprobe's
own process. Before anything runs, each module is imported in a process of its own, within the
per-run timeout (--timeout, or the scenario's timeout_s, default 300 s): a name that is not
MODULE:CALLABLE, a module that cannot be imported (it raises, has a SyntaxError, calls sys.exit,
ends its process or does not return in time) or a name it does not hold stops memprobe with one
line naming it, exit 2, nothing written. Each run then imports it and calls the factory in the
run's own process, within that same timeout: a factory that raises, returns no dataset, ends the
process or does not return fails that run (named, the others go on: exit 1).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from memprobe.cli.flags import json_kwargs
from memprobe.core.errors import UsageError
from memprobe.core.numbers import bounded

NAME = "run"
HELP = "run a scenario (a shipped one by name, or a YAML file) and write results + report"
EPILOG = """examples:
  memprobe run lists_vs_arrays                 # a shipped scenario by name (memprobe scenarios lists them)
  memprobe run quick -o /tmp/look
  memprobe run lists_vs_arrays --quick --strict
  memprobe run my.yaml                         # a file of your own (memprobe scenarios copy NAME my.yaml)
  memprobe run --dataset mypkg.data:build_dataset --kwargs '{"split": "train"}' --modes fork,spawn,thread
  memprobe run --dataset mypkg.data:build_dataset --workers 0,1,2,4 --repeats 5   # how many workers?
  memprobe run num_workers --quick             # the course exercise: time per 100 batches per num_workers
"""
# 200k: at 100k, lists_vs_arrays' list x fork workers grew +29 MB, under its 50 MB threshold
# ("expectation not met"); quick.yaml's 200k grow ~+106 MB.
QUICK_RECORDS = 200_000
QUICK_IMAGES = 128
# A repeated scenario times its runs: --quick keeps fewer and shorter timings of the same matrix.
QUICK_REPEATS = 3
QUICK_BATCHES = 20
# Taken the Ctrl-C way: without it, SIGTERM (a cancelled CI job, `kill`) would end memprobe at
# once, and the run's process group, in a group of its own, would not be told.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


DATASET_MODES, DATASET_WORKERS, DATASET_BATCH = "fork,thread", "2", 64  # a one-off --dataset run's


def _scenario(args: argparse.Namespace) -> Any:
    """The scenario file, or one made from --dataset and its flags."""
    from memprobe.run.scenario import load_scenario, parse_scenario
    from memprobe.run.scenario_file import find_scenario

    if args.scenario and args.dataset:
        raise UsageError("give a scenario file or --dataset, not both")
    if args.scenario:
        given = [
            f"--{k.replace('_', '-')}"
            for k in ("kwargs", "items", "batch_size")
            if getattr(args, k) is not None
        ]
        if given:
            raise UsageError(
                f"{given[0]}: sets a one-off --dataset run; a scenario file sets it itself "
                "(dataset.kwargs, loader.items, loader.batch_size)"
            )
        return with_axes(load_scenario(find_scenario(args.scenario)), args)
    if not args.dataset:
        raise UsageError(
            "no scenario: give a shipped scenario's name (memprobe scenarios lists them), a scenario "
            "file, or --dataset MODULE:CALLABLE"
        )
    kwargs = json_kwargs("--kwargs", "{}" if args.kwargs is None else args.kwargs)
    loader: dict[str, Any] = {"batch_size": DATASET_BATCH if args.batch_size is None else args.batch_size}
    if args.items is not None:
        loader["items"] = args.items
    doc = {
        "name": args.dataset.rsplit(":", 1)[-1].split(".")[-1] or "dataset",
        "dataset": {"factory": args.dataset, "kwargs": kwargs},
        "modes": listed(DATASET_MODES if args.modes is None else args.modes),
        "workers": [
            _int("--workers", w) for w in listed(DATASET_WORKERS if args.workers is None else args.workers)
        ],
        "loader": loader,
    }
    return parse_scenario(yaml.safe_dump(doc, sort_keys=False), "--dataset", base_dir=os.getcwd())


def listed(text: str) -> list[str]:
    """A comma-separated flag's values."""
    return [w.strip() for w in text.split(",") if w.strip()]


def with_axes(scenario: Any, args: argparse.Namespace) -> Any:
    """A scenario file's matrix narrowed or widened by --modes and --workers, checked as the
    file's own ``modes:`` and ``workers:`` are (the results folder keeps the file as written)."""
    from memprobe.run.scenario import parse_scenario, with_overrides

    if args.modes is None and args.workers is None:
        return scenario
    axes: dict[str, Any] = {}
    if args.modes is not None:
        axes["modes"] = listed(args.modes)
    if args.workers is not None:
        axes["workers"] = [_int("--workers", w) for w in listed(args.workers)]
    flags = parse_scenario(yaml.safe_dump(axes), "--modes/--workers", base_dir=os.getcwd())
    return with_overrides(
        scenario,
        modes=flags.modes if args.modes is not None else None,
        workers=flags.workers if args.workers is not None else None,
    )


def with_repeats(scenario: Any, args: argparse.Namespace) -> Any:
    """The scenario (a file's or --dataset's) with --repeats N in place of its ``repeats``."""
    from memprobe.run.scenario import MAX_REPEATS, with_overrides

    if args.repeats is None:
        return scenario
    return with_overrides(scenario, repeats=int(bounded("--repeats", args.repeats, 1, MAX_REPEATS)))


def _preflight(scenario: Any) -> None:
    """Import every user factory now, in a process of its own within the per-run timeout
    (memprobe.run.import_check), so a wrong name or a module that cannot be imported stops before
    any run starts (exit 2); say up front which decoders cannot run here (their runs fail, the
    others go on)."""
    if scenario.workload == "decode":
        from memprobe.decode import available_decoders

        for name, reason in available_decoders().items():
            if reason and name in scenario.backends:
                print(
                    f"memprobe: decoder {name!r} is not available here; its runs will fail: {reason}",
                    file=sys.stderr,
                )

    if scenario.factories:
        from memprobe.run.import_check import check_imports

        check_imports(
            [f.factory for f in scenario.factories],
            scenario.sys_path,
            scenario.timeout_s,
            "the per-run timeout: --timeout, or the scenario's timeout_s",
        )


def _quick(scenario: Any) -> Any:
    """The same matrix on a small dataset: records capped for the built-in backends, images for
    decode (user factories take their size from their own kwargs); a repeated scenario (one that
    times its runs) at most :data:`QUICK_REPEATS` repeats of :data:`QUICK_BATCHES` batches each."""
    from memprobe.run.scenario import with_overrides

    if scenario.repeats > 1:
        batches = QUICK_BATCHES * scenario.loader.batch_size
        scenario = with_overrides(
            scenario,
            repeats=min(scenario.repeats, QUICK_REPEATS),
            loader=replace(scenario.loader, items=min(scenario.loader.items or batches, batches)),
        )
    if scenario.workload == "decode":
        return with_overrides(
            scenario, decode=replace(scenario.decode, images=min(scenario.decode.images, QUICK_IMAGES))
        )
    if scenario.workload == "records":
        return with_overrides(
            scenario, dataset=replace(scenario.dataset, records=min(scenario.dataset.records, QUICK_RECORDS))
        )
    return scenario


def _int(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not an integer") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "scenario",
        nargs="?",
        metavar="SCENARIO",
        help="a shipped scenario's name (memprobe scenarios lists them) or a scenario YAML file "
        "(a path wins when the file exists); or use --dataset",
    )
    one = p.add_argument_group("a one-off run of your own dataset, without a scenario file")
    one.add_argument(
        "--dataset",
        metavar="MODULE:CALLABLE",
        help="a factory returning a torch Dataset, imported by name (e.g. mypkg.data:build)",
    )
    one.add_argument("--kwargs", metavar="JSON", help="keyword arguments for the factory, as JSON")
    one.add_argument(
        "--modes",
        help=f"comma-separated modes (default: {DATASET_MODES}); with a scenario file, instead of its modes",
    )
    one.add_argument(
        "--workers",
        help=f"comma-separated worker counts (default: {DATASET_WORKERS}); with a scenario file, instead "
        "of its workers",
    )
    one.add_argument("--items", type=int, help="stop each run after this many items")
    one.add_argument("--batch-size", type=int, help=f"batch size (default: {DATASET_BATCH})")
    p.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help="run every run N times, in interleaved rounds (instead of the scenario's repeats, default 1); "
        "medians with their spread (std, min-max) are shown",
    )
    p.add_argument(
        "-o", "--output", metavar="DIR", help="results folder (default: reports/<name>-<UTC time>)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"same matrix on a small dataset (at most {QUICK_RECORDS:,} records, or "
        f"{QUICK_IMAGES} images for decode; a repeated scenario: at most {QUICK_REPEATS} repeats of "
        f"{QUICK_BATCHES} batches): a fast look",
    )
    p.add_argument(
        "--strict", action="store_true", help="exit 1 when a run does not meet the scenario's expectation"
    )
    p.add_argument("--no-report", action="store_true", help="save results and summary only; skip report.html")
    p.add_argument(
        "--attribute",
        action="store_true",
        help="name which of the dataset's structures the fork workers copied (MB per attribute path), "
        "read after the last measurement (docs/attribution.md)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="per-run timeout in seconds (overrides the scenario's timeout_s, default 300); it also bounds "
        "importing your dataset factories before the runs",
    )
    p.add_argument(
        "--no-limits",
        action="store_true",
        help="run even above this machine's limits on workers and dataset size (docs/limits.md)",
    )


def main(args: argparse.Namespace) -> int:
    from memprobe.run.limits import check_limits
    from memprobe.run.scenario import with_overrides

    scenario = with_repeats(_scenario(args), args)
    if args.timeout is not None:
        scenario = with_overrides(scenario, timeout_s=bounded("--timeout", args.timeout, 1, unit="seconds"))
    if args.quick:
        scenario = _quick(scenario)
    if args.attribute:
        scenario = with_overrides(scenario, sampling=replace(scenario.sampling, attribute=True))
    check_limits(scenario, lifted=args.no_limits)
    _preflight(scenario)
    # Only now pandas and the rest (~1 s): a scenario, flag or machine limit that is refused
    # is refused at once.
    from memprobe.cli.console import TerminalConsole, attribution_lines, say, summary_table, workers_table
    from memprobe.results.folder import default_out_dir, make_output
    from memprobe.run.session import run_scenario
    from memprobe.session.finish import EXIT_FAILED

    if args.output:
        out = Path(args.output)
        try:
            make_output(out)
        except UsageError as exc:
            raise UsageError(f"-o {exc}") from None
    else:
        out = default_out_dir(scenario.name)
    runs = scenario.runs()
    rounds = f" ({scenario.repeats} interleaved rounds)" if scenario.repeats > 1 else ""
    say(f"memprobe: {scenario.name}: {len(runs)} runs{rounds} -> {out}", sys.stderr)
    result = run_scenario(
        scenario, out, console=TerminalConsole(), render=not args.no_report, signals=STOP_SIGNALS
    )
    say(summary_table(result.summaries))
    table = workers_table(result.sweep)
    if table:
        say(table)
    for s in result.summaries:
        for line in attribution_lines(s):
            say(line)
    _print_explanations(result.summaries)
    print_advice(result.summaries, runs)
    if result.signals:
        name = signal.Signals(result.signals[0]).name
        say(
            f"memprobe: interrupted by {name}: completed runs and partial samples were saved"
            if result.interrupted
            else f"memprobe: {name} came after the last run had ended: the results are complete",
            sys.stderr,
        )
    say(f"\nresults: {out}" + (f"\nreport:  {result.report}" if result.report else ""))
    code = result.exit_code
    unmet = [s.run_id for s in result.summaries if s.expectation_met is False]
    if unmet:
        say(f"memprobe: expectation not met: {', '.join(unmet)}", sys.stderr)
        if args.strict and code == 0:
            code = EXIT_FAILED
    return code


def print_advice(summaries: list, runs: list) -> None:
    """What to do about each cause found (:func:`memprobe.core.cures.by_causes`): once for the
    runs whose verdicts name the same causes, named first, then the pytest guards."""
    from memprobe.cli.console import say
    from memprobe.core import cures

    factories = {
        r.run_id: {"factory": r.factory.factory, "kwargs": r.factory.kwargs} for r in runs if r.factory
    }
    for g in cures.by_causes(summaries, factories):
        say("\n" + ", ".join(f"{s.run_id} ({s.verdict})" for s in g.runs) + ":")
        lines = cures.text_lines([a.cause for a in g.advice], scenario=g.unsplit)[1:]  # [0]: the blank said
        for line in lines + cures.guard_lines(g.guards):
            say(line)


def _print_explanations(summaries: list) -> None:
    from memprobe.cli.console import say, short_error

    for s in summaries:
        if s.status != "ok":
            say(f"\n{s.run_id}: {s.status}" + (f": {short_error(s.error)}" if s.error else ""))
