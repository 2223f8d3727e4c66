"""Run your own command (e.g. a training script) and profile its DataLoader memory from outside.

The command runs with your terminal (its output is shown as usual, Ctrl-C and Ctrl-Z reach it as
if it ran alone). memprobe samples its whole process tree - the main process, every DataLoader
worker and every other child process (classified by how it was started: fork, spawn, exec;
each epoch's new workers are worker 0..N-1 again), torchrun ranks and their workers - until it
exits, then writes the results, summary.json and
report.html to reports/record-<name>-<UTC time>/ (or -o DIR) and prints each worker's private
memory (USS) growth over its lifetime, with the verdict flat/growing.

Items/s cannot be seen from outside. To get them, add one line to the training loop:

    import memprobe;  memprobe.mark(len(batch))

It does nothing (and costs nothing) when memprobe is not recording, and is safe to call from
DataLoader workers and threads. Without it, the report shows memory and CPU only.

memprobe exits with the command's exit code (128+N if the command was killed by signal N), or
with 3 where the command succeeded but the verdict is one --fail-on names (`--fail-on growing`
for CI: the job itself passed, its memory did not). A
SIGINT/SIGTERM sent to memprobe itself is forwarded to the command's process group (a second
Ctrl-C sends SIGTERM, a third SIGKILL); what was sampled is saved and memprobe exits 128+N
(130 for Ctrl-C). Processes the command leaves behind in its process group are ended after 3 s.
Processes that left its process group (setsid, start_new_session=True, a shell's job control) and
still run when it ends are not ended, as a shell would not end them: memprobe names them (pid and
command line), marks them "runs on" in the table and lists them in the run's meta.json.

memprobe's own trouble never ends the command: on a full disk or a results folder deleted
under it, memprobe stops sampling and says so, the command runs to its end, memprobe exits with
its exit code and says what was kept (`memprobe report DIR` finishes a folder once there is space).
A process that leaves the tree and the process group before memprobe first sees it (a daemon's
double fork within one tick, 0.2 s) is not seen.

--live shows `memprobe top`'s view while the job runs, at the foot of the terminal, under the
job's own output, which passes through unchanged (the terminal's scroll region, as apt draws its
progress line; see memprobe.live.panel). The job keeps the terminal and the keyboard: Ctrl-C
stops it as without --live, and memprobe saves what was sampled. A full-screen view (top's
alternate screen) would hide the job's output, and the job's output redirected to a file would
change what it prints (no terminal: no progress bars, other buffering); so the job's output stays
where the user expects it, and the view takes the lines below. Where stderr is no terminal, one
line every --every seconds goes to stderr.

A terminal paused with Ctrl-S (or one that stops reading) holds the job's own output as it would
without memprobe, and never memprobe's sampling or its end: what memprobe writes while the job
runs is written by a thread of its own (memprobe.live.outlet), the view's repaints the terminal
did not take dropped. memprobe's summary follows once the terminal takes output again.
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
    from memprobe.live.outlet import Outlet
    from memprobe.live.view import Live

NAME = "record"
HELP = "run your command (e.g. python train.py) and profile its workers' memory"
EPILOG = """examples:
  memprobe record -- python train.py --epochs 2
  memprobe record -o reports/mine -- torchrun --nproc-per-node 2 train.py
  memprobe record --pss-budget 0.05 -- python -m mypkg.train
  memprobe record --fail-on growing -- python train.py --max-steps 300   # CI: exit 3 if it grows
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument(
        "--live",
        action="store_true",
        help="a live view of the job's memory per process at the foot of the terminal, under the "
        "job's own output (which passes through unchanged); where stderr is no terminal, one line "
        "every --every seconds on stderr",
    )
    p.add_argument(
        "--every",
        type=float,
        default=5.0,
        metavar="S",
        help="with --live, when stderr is not a terminal: one line every S seconds (default: 5)",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS...]",
        help="the command to run (put it after --)",
    )


def main(args: argparse.Namespace) -> int:
    from memprobe.core.errors import UsageError

    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command given: memprobe record [-o DIR] -- COMMAND [ARGS...]")
    settings, verdict = settings_from(args)
    wanted = fail_on(args)
    every = bounded("--every", args.every, 0.1, 3600, unit="seconds")
    from memprobe.live.outlet import Outlet
    from memprobe.record.command import record  # pandas and the rest, once the arguments are good

    outlet = Outlet()  # what memprobe says while the job runs never waits for the terminal

    def log(line: str) -> None:
        outlet.say(sys.stderr, line)

    live = live_view(every, log, outlet) if args.live else None
    try:
        result = record(
            command,
            Path(args.output) if args.output else None,
            settings=settings,
            verdict=verdict,
            render=not args.no_report,
            log=live.log if live else log,
            observer=live,
        )
    finally:
        if live is not None:
            live.close()
        outlet.wait()  # the results are saved: the summary follows memprobe's last lines
    print_result(result, sys.stderr)
    return verdict_exit(result, wanted, sys.stderr)


def live_view(every: float, log: Callable[[str], None], outlet: Outlet) -> Live:
    """``--live``: the view at the foot of the terminal the job shares (:mod:`memprobe.live.panel`)
    where stderr is one, else one line every ``every`` seconds on stderr."""
    import os

    from memprobe.live.panel import Panel
    from memprobe.live.view import Lines, Live

    name = "memprobe record"
    display: Panel | Lines = (
        Panel(
            sys.stderr,
            outlet,
            color=not os.environ.get("NO_COLOR"),
            name=name,
            hint="Ctrl-C: stop the job, save",
        )
        if sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"
        else Lines(sys.stderr, every, outlet=outlet, name=name)
    )
    return Live(display, log=log)
