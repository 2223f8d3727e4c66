"""A live view of a running job's memory: one row per process of its tree, refreshed every second.

`memprobe top PID` is `memprobe watch PID` with a view: the same sampler follows PID and its whole
process tree (torchrun ranks, DataLoader workers of every generation), and the terminal shows,
about once a second, each live process (role, rank, worker index and generation, USS, whether
that figure is this second's exact reading or the sampler's estimate, PSS at its latest exact
reading carried to now, RSS, its own growth rate in MB/min over the last 30 s, a worker's USS
gained since its start), the totals (total PSS, sum of RSS, the job's memory cgroup's charge and
its limit), the verdict so far in words and the time to the limit at the current rate.

q (or Ctrl-C) stops the view and saves what was sampled, as Ctrl-C stops `memprobe watch`: the
results folder, summary.json and report.html are written (reports/watch-<name>-<UTC time>/, or
-o DIR) and the summary printed; the job itself is never signalled. When the job exits by itself
the view ends the same way, with the final summary.

The view uses the terminal's alternate screen (plain ANSI, redrawn whole, as `top` does over
ssh), shows every string from the job (roles, command lines) with its control characters
escaped, its lines cut to the terminal's width in the columns the terminal shows (a CJK
character takes two), and honours NO_COLOR (no colour, no attribute). A terminal that takes no
output (paused with Ctrl-S, its reader stalled) never holds the sampling, the duration or the
job's end: the view is drawn by a thread of its own, the repaints it could not take dropped
(memprobe.live.outlet); the results are saved as if it were not paused, and the summary follows
once the terminal takes output again. When stdout is not a terminal (a pipe, a
file, TERM=dumb) it prints one line every --every seconds instead. Ctrl-Z gives the terminal back
as it was and stops memprobe (its sampling too; the job runs on); fg brings the view back.

Exit codes: as `memprobe watch`: 0 done (the job exited, --duration, or q), 1 the results could
not be written, 2 bad input, 128+N stopped by signal N (130 Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from memprobe.cli import watch
from memprobe.cli.recording import fail_on, print_result, verdict_exit
from memprobe.core.numbers import bounded
from memprobe.live.outlet import Outlet
from memprobe.live.view import Lines, Live, Screen

NAME = "top"
HELP = "a live view of a running job's memory per process (watch PID, shown every second)"
EPILOG = """examples:
  memprobe top 12345                        # until it exits, or q
  memprobe top $(pgrep -f torchrun) -o reports/live
  memprobe top 12345 > top.log              # not a terminal: one line every 5 s
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    watch.add_arguments(p)  # the same PID, --duration, --marks and the rest
    p.add_argument(
        "--every",
        type=float,
        default=5.0,
        metavar="S",
        help="when stdout is not a terminal: one line every S seconds (default: 5)",
    )


def main(args: argparse.Namespace) -> int:
    every = bounded("--every", args.every, 0.1, 3600, unit="seconds")
    watch.checked(args)  # the watch's flags too, before the view (and pandas) is made
    wanted = fail_on(args)
    outlet = Outlet()  # what memprobe writes while it samples never waits for the terminal
    display: Screen | Lines = (
        Screen(sys.stdout, outlet, color=not os.environ.get("NO_COLOR"))
        if sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"
        else Lines(sys.stdout, every, outlet=outlet)
    )
    live = Live(display, log=lambda line: outlet.say(sys.stderr, line))
    try:
        result = watch.follow(args, log=live.log, observer=live)
    finally:
        live.close()
        outlet.wait()  # the results are saved: the summary follows memprobe's last lines
    print_result(result, sys.stdout)
    if live.quit and result.saved and result.exit_code == 128 + signal.SIGINT:
        result.exit_code = 0  # q is how a live view is left: what was sampled is saved
    return verdict_exit(result, wanted, sys.stdout)
