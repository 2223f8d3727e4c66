"""The ``memprobe`` command: one module per subcommand; no logic lives here."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from memprobe import __version__
from memprobe.core.errors import MemprobeError
from memprobe.core.text import printable

EPILOG = """examples:
  memprobe run lists_vs_arrays                         # the full matrix (~3.5 min on 2 cores)
  memprobe run quick                                   # a 30-second look
  memprobe run lists_vs_arrays --quick                 # same matrix, small dataset
  memprobe scenarios                                   # the shipped scenarios, with what each shows
  memprobe scenarios copy quick my.yaml                # a start for your own: memprobe run my.yaml
  memprobe report reports/lists_vs_arrays-20261122T101500Z
  memprobe compare reports/before reports/after -o compare.html
  memprobe export reports/DIR --format chrome-trace     # also: tensorboard, openmetrics
  memprobe record -- python train.py --epochs 2        # profile your own training command
  memprobe watch 12345 --duration 120                  # profile a running job (e.g. torchrun)
  memprobe top 12345                                   # the same, with a live view per process
  memprobe cure mypkg.data:build_dataset               # try the fixes on your dataset, side by side
"""


def _parser() -> argparse.ArgumentParser:
    from memprobe.cli import compare, cure, export, record, report, run, scenarios, top, watch

    parser = argparse.ArgumentParser(
        prog="memprobe",
        description="See how much memory torch DataLoader workers really use "
        "(PSS/USS, not RSS) under fork, spawn, forkserver and threads.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (run, scenarios, report, compare, export, record, watch, top, cure):
        p = sub.add_parser(
            module.NAME,
            help=module.HELP,
            description=module.__doc__,
            epilog=getattr(module, "EPILOG", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(handler=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for bad input, 1 for failed runs, 130 on Ctrl-C)."""
    _stand_in_for_closed_streams()
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except MemprobeError as exc:
        _error(f"memprobe: error: {printable(str(exc))}")
        return exc.exit_code
    except KeyboardInterrupt:
        _error("memprobe: interrupted")
        return 130
    except BrokenPipeError:
        # The reader of memprobe's output went away (`memprobe compare A B | head -0`): the
        # output stops, without a traceback; the exit code is a program's ended by SIGPIPE, as
        # the shell expects of `... | head`. (Output that goes through console.say never gets
        # here: it stops and the command goes on.)
        _quiet(sys.stdout)
        return 128 + signal.SIGPIPE


def _stand_in_for_closed_streams() -> None:
    """stdout or stderr closed when memprobe started (``memprobe top PID >&-``): Python makes
    it None, and memprobe's first output was a traceback (``top``: nothing recorded; ``record
    --live 2>&-``: exit 1, no word; ``record 2>&-`` printed its lines into the job's stdout).
    What memprobe would write there goes to /dev/null instead, opened close-on-exec: the job
    ``record`` starts sees the descriptor closed, as it would without memprobe."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115  (memprobe's for its whole life)


def _error(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # stderr a closed pipe or a terminal gone: nothing more can be said
        _quiet(sys.stderr)


def _quiet(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null: the interpreter's final flush of what is
    still buffered then finds a harmless descriptor, not a closed pipe."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def entry() -> None:
    code = main()
    try:
        sys.stdout.flush()
    except OSError:  # a closed pipe (memprobe ... | head): nothing more to say, and no traceback
        _quiet(sys.stdout)
    sys.exit(code)
