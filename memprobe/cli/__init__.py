"""The ``memprobe`` command: one module per subcommand; no logic lives here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from memprobe import __version__
from memprobe.errors import MemprobeError

EPILOG = """examples:
  memprobe run lists_vs_arrays                         # the full matrix (~3.5 min on 2 cores)
  memprobe run quick                                   # a 30-second look
  memprobe run lists_vs_arrays --quick                 # same matrix, small dataset
  memprobe scenarios                                   # the shipped scenarios, with what each shows
  memprobe scenarios copy quick my.yaml                # a start for your own: memprobe run my.yaml
  memprobe report reports/lists_vs_arrays-20261122T101500Z
  memprobe compare reports/before reports/after -o compare.html
  memprobe record -- python train.py --epochs 2        # profile your own training command
  memprobe watch 12345 --duration 120                  # profile a running job (e.g. torchrun)
"""


def _parser() -> argparse.ArgumentParser:
    from memprobe.cli import compare, record, report, run, scenarios, watch

    parser = argparse.ArgumentParser(
        prog="memprobe",
        description="See how much memory torch DataLoader workers really use "
        "(PSS/USS, not RSS) under fork, spawn, forkserver and threads.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (run, scenarios, report, compare, record, watch):
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
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except MemprobeError as exc:
        print(f"memprobe: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("memprobe: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    code = main()
    try:
        sys.stdout.flush()
    except OSError:  # a closed pipe (memprobe ... | head): nothing more to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)
