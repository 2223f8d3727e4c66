"""Profile a process that is already running (e.g. a torchrun job) from the outside.

memprobe samples PID and its whole process tree - for torchrun, every rank (a child of the
launcher; its RANK is read from /proc/PID/environ when readable) and each rank's DataLoader
workers - until the process exits, --duration seconds pass, or Ctrl-C. The process is never
signalled or stopped. Results, summary.json and report.html go to
reports/watch-<name>-<UTC time>/ (or -o DIR).

Items/s: memprobe.mark() cannot be injected into a process that is already running, so watch
shows memory and CPU only - unless the job was started with MEMPROBE_MARK_FILE=/some/file in
its environment and calls memprobe.mark(n_items): watch then reads that file (found in the
process's environment, or given with --marks). To get items/s without that, use
`memprobe record -- COMMAND`, which sets it for you.

A terminal paused with Ctrl-S never holds the sampling or the --duration: memprobe's lines are
written by a thread of its own (memprobe.live.outlet); the summary follows once the terminal takes
output again.

SIGINT (Ctrl-C), SIGTERM and SIGHUP stop the watch and keep what was sampled: the results, summary
and report are written, marked interrupted. When PID leads its process group, processes that left
its tree but not the group (a child's child whose parent exited) are found and sampled too; one
that also left the group (a daemon's double fork with setsid) before memprobe saw it is not seen.

Exit codes: 0 done, 1 the results could not be written (a full disk: what was kept is named),
2 bad input (no such process, a thread id, not readable), 3 the verdict is one --fail-on names,
128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from memprobe.cli.recording import add_common_arguments, fail_on, print_result, settings_from, verdict_exit
from memprobe.core.numbers import bounded

if TYPE_CHECKING:
    from memprobe.record.recording import Observer, RecordResult

NAME = "watch"
HELP = "profile an already running process tree (e.g. a torchrun job) by PID"
EPILOG = """examples:
  memprobe watch 12345                      # until it exits (or Ctrl-C)
  memprobe watch 12345 --duration 600 -o reports/ten-minutes
  memprobe watch $(pgrep -f torchrun) --duration 120
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "pid", type=int, help="the process to watch (e.g. the torchrun launcher or a training script)"
    )
    p.add_argument(
        "--duration", type=float, metavar="S", help="stop after S seconds (default: until it exits)"
    )
    p.add_argument(
        "--marks",
        metavar="FILE",
        help="mark file the job writes with memprobe.mark() (its MEMPROBE_MARK_FILE); "
        "read from the process's environment when not given",
    )
    add_common_arguments(p)


def main(args: argparse.Namespace) -> int:
    wanted = fail_on(args)
    from memprobe.live.outlet import Outlet

    outlet = Outlet()  # what memprobe says while it samples never waits for the terminal
    try:
        result = follow(args, log=lambda line: outlet.say(sys.stderr, line))
    finally:
        outlet.wait()  # the results are saved: the summary follows memprobe's last lines
    print_result(result, sys.stdout)
    return verdict_exit(result, wanted, sys.stdout)


def checked(args: argparse.Namespace) -> tuple:
    """The sampler's settings and the verdict the flags ask for, or a UsageError naming the flag:
    before anything heavy is imported (``memprobe top`` checks them before it builds its view)."""
    settings, verdict = settings_from(args)
    if args.duration is not None:
        bounded("--duration", args.duration, 0, above=True, unit="seconds")
    return settings, verdict


def follow(
    args: argparse.Namespace, log: Callable[[str], None], observer: Observer | None = None
) -> RecordResult:
    """The watch the flags ask for (``memprobe top``: with its live view as ``observer``)."""
    settings, verdict = checked(args)
    from memprobe.record.watch import watch  # pandas and the rest, once the arguments are good

    return watch(
        args.pid,
        Path(args.output) if args.output else None,
        duration=args.duration,
        marks_file=Path(args.marks) if args.marks else None,
        settings=settings,
        verdict=verdict,
        render=not args.no_report,
        log=log,
        observer=observer,
    )
