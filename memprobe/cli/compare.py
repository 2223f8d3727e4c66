"""Compare two results folders (e.g. before and after a fix): runs matched by backend, mode
and worker count, with the deltas highlighted."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "compare"
HELP = "compare two results folders side by side"
EPILOG = """example:
  memprobe compare reports/before reports/after -o before-vs-after.html
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="DIR_A", help="the baseline results folder")
    p.add_argument("b", metavar="DIR_B", help="the results folder to compare with it")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="HTML file to write (default: DIR_B/compare.html); never a file of a results folder but a page",
    )


def main(args: argparse.Namespace) -> int:
    from memprobe.cli.console import say
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.pages import compare_folders
    from memprobe.results.files import check_run_records, unwritable
    from memprobe.results.folder import ResultsFolder
    from memprobe.results.pages import page_output

    a, b = Path(args.a), Path(args.b)
    for d in (a, b):
        ResultsFolder.open(d)  # a results folder, of a schema version this memprobe reads
        check_run_records(d)
    if args.output:
        out = page_output(Path(args.output), [a, b])
    else:
        out = b / "compare.html"
        why = unwritable(b)
        if why:
            raise UsageError(
                f"{display_path(b)}: cannot write the page in it ({why}); give it a path: "
                f"memprobe compare {display_path(a)} {display_path(b)} -o PAGE.html"
            )
    page, lines = compare_folders(a, b, out)
    for line in lines:  # two recordings: their figures side by side, what changed
        say(line)
    say(f"compare: {display_path(page)}")
    return 0
