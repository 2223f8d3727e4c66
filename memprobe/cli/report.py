"""Render report.html again from a results folder alone (no run is repeated), or one page for
a job of several nodes from the folders its nodes wrote (:mod:`memprobe.report.nodes`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memprobe.results.lifecycle import Found

NAME = "report"
HELP = "re-render report.html from a saved results folder (or one page for a multi-node job)"
EPILOG = """examples:
  memprobe report reports/lists_vs_arrays-20261122T101500Z
  memprobe report job/                  # job/node0, job/node1, ...: one page, job/report.html
  memprobe report n0/ n1/ -o job.html   # the nodes' folders named one by one
  memprobe report /mnt/ro/run -o run.html  # a folder memprobe may not write: only read
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results",
        nargs="+",
        help="a results folder written by 'memprobe run', 'record', 'watch' or profile(); or a job "
        "folder holding one such folder per node, or several nodes' folders",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="where the page goes; the folders are then only read, nothing is written in them "
        "(default: DIR/report.html, JOBDIR/report.html, or job-report.html beside the first node's "
        "folder named); never a file of a results folder but a page (.html)",
    )


def finish_folder(root: Path, left: str | None = None) -> Found:
    """:func:`memprobe.results.lifecycle.finish_folder`, whether the folder's memprobe still runs
    asked of /proc, what it says printed."""
    import sys

    from memprobe.cli.console import say
    from memprobe.probe.procfs import still_running
    from memprobe.results.folder import ResultsFolder
    from memprobe.results.lifecycle import finish_folder as finish

    writer = ResultsFolder.open(root).manifest.get("writer") or {}
    found = finish(root, writer_running=still_running(writer), left=left)
    for line in found.said:
        say(line, sys.stderr)
    return found


def main(args: argparse.Namespace) -> int:
    from memprobe.analysis.runs import analyse_all
    from memprobe.cli.console import say, summary_table, workers_table
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.report import render, write_report
    from memprobe.results.files import unwritable, write_text_atomic
    from memprobe.results.folder import ResultsFolder, is_results_folder
    from memprobe.results.job import linked_nodes, node_folders
    from memprobe.results.pages import page_output

    paths = [Path(p) for p in args.results]
    root = paths[0]
    if len(paths) > 1 or (
        root.is_dir() and not is_results_folder(root) and (node_folders(paths) or linked_nodes(paths))
    ):
        return job_report(paths, args.output)
    if not root.is_dir():
        raise UsageError(f"{display_path(root)}: no such results folder")
    name = display_path(root)
    ResultsFolder.open(root)  # a results folder, before anything is written anywhere
    out = page_output(args.output, [root]) if args.output else None
    why = None if out is not None else unwritable(root)
    if why:
        raise UsageError(
            f"{name}: cannot be written ({why}); nothing was changed. memprobe report {name} -o PAGE.html "
            "writes its page elsewhere and only reads the folder"
        )
    found = finish_folder(root, left=None if out is None else "the page goes to -o")
    if found.writer is not None:
        return report_so_far(root, found.writer, out)
    folder = ResultsFolder.open(root)
    results = folder.load_as_ended() if found.ended else folder.load()
    analysed = analyse_all(results)  # once: the summary and the page draw from the same analysis
    summaries = [a.summary for a in analysed]
    if out is None:
        folder.write_summary(summaries, analysed.sweep.to_dict())
    say(summary_table(summaries))
    if workers_table(analysed.sweep):
        say(workers_table(analysed.sweep))
    if out is None:
        page = write_report(root, results, analysed)
    else:
        page = write_text_atomic(out, render(results, analysed=analysed))
    say(f"\nreport: {display_path(page)}")
    return 0


def report_so_far(root: Path, writer: int, out: Path | None = None) -> int:
    """The page of a session memprobe ``writer`` still writes, from its rows so far, read and
    never moved (no gathering, no marking): the recording goes on undisturbed and writes its own
    summary and page at its end. Ours are written only while the manifest still says running,
    under the lock the recorder's finish takes (:meth:`memprobe.results.folder.ResultsFolder.write_while_running`), so
    they never replace the session's own; with ``out`` (``-o``), only the page, there."""
    import sys
    import time

    from memprobe.analysis.runs import analyse_all
    from memprobe.cli.console import say, summary_table, workers_table
    from memprobe.core.safe_read import display_path
    from memprobe.report import render
    from memprobe.report.format import clock
    from memprobe.results.files import write_text_atomic
    from memprobe.results.folder import ResultsFolder

    as_of = time.time()
    folder = ResultsFolder.open(root)
    path = out or root / "report.html"
    ended = (
        f"memprobe: {display_path(root)}: the session ended while this report was made; its own "
        f"summary and report are written by the memprobe that recorded it ({display_path(root / 'report.html')})"
    )
    try:
        results = folder.load()
        # What this reader saw, for the page's banner; never written to the folder.
        results.manifest = {**results.manifest, "seen_running": {"as_of": as_of, "writer_pid": writer}}
        analysed = analyse_all(results)
        summaries = [a.summary for a in analysed]
        page = render(results, analysed=analysed)
    except Exception:
        # Its rows gathered (moved) by its own finish while they were read: that finish's page is the one.
        if ResultsFolder.open(root).manifest.get("status") != "running":
            say(ended, sys.stderr)
            return 0
        raise

    def write() -> None:
        folder.write_summary(summaries, analysed.sweep.to_dict())
        write_text_atomic(path, page)

    if out is not None:
        write_text_atomic(out, page)
    elif not folder.write_while_running(write):
        say(ended, sys.stderr)
        return 0
    say(summary_table(summaries))
    if workers_table(analysed.sweep):
        say(workers_table(analysed.sweep))
    going = "recording" if folder.manifest.get("kind") in ("record", "watch") else "running"
    say(f"\nreport (still {going}, as of {clock(as_of)}): {display_path(path)}")
    return 0


def job_page(paths: list[Path]) -> Path:
    """Where a job's page goes by default: in the job folder, or beside the first node's folder
    named (where its name leads, not its link's target: a page is never written outside the
    folders named and the folder they are in)."""
    if len(paths) == 1:
        return paths[0] / "report.html"
    return Path(os.path.abspath(paths[0])).parent / "job-report.html"


def job_report(paths: list[Path], output: Path | None) -> int:
    """One page for the nodes in ``paths`` (a job folder, or the nodes' folders). Each line said
    of a node is shown :func:`~memprobe.core.text.printable` whole: a host or folder name is the
    folder's text, and its newline would forge a line of memprobe's."""
    import sys

    from memprobe.analysis.runs import analyse_all
    from memprobe.cli.console import say
    from memprobe.core.errors import MemprobeError, UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.core.text import printable
    from memprobe.report.nodes import culprit_words, job_name, write_job_report
    from memprobe.results.files import unwritable
    from memprobe.results.folder import is_results_folder
    from memprobe.results.job import Job, node_folders, not_one_job
    from memprobe.results.pages import page_output

    if len(paths) == 1 and not paths[0].is_dir():
        raise UsageError(f"{display_path(paths[0])}: no such results folder")
    folders = node_folders(paths)
    inside = [f for f in folders if is_results_folder(f)]
    why = not_one_job(inside, named=len(paths) > 1)
    if why and len(paths) > 1:
        named = ", ".join(display_path(p) for p in paths[:4]) + (" ..." if len(paths) > 4 else "")
        raise UsageError(f"{named}: not the nodes of one job ({why})")
    if why:  # a folder of separate results (reports/): each is re-rendered on its own
        name = display_path(paths[0])
        raise UsageError(
            f"{name}: holds {len(inside)} results folders that are not the nodes of one job ({why}); "
            f"name one (memprobe report {display_path(inside[0])}), or name a job's nodes' folders "
            "one by one to put them on one page"
        )
    if output is not None:
        out = page_output(output, folders)
    else:
        out = job_page(paths)
        cannot = unwritable(out.parent)
        if cannot:
            raise UsageError(
                f"{display_path(out.parent)}: cannot write the job's page in it ({cannot}); nothing was "
                "changed. Give it a path elsewhere: -o PAGE.html"
            )
    ended = []
    for folder in inside:
        left = "the page goes to -o" if output is not None else unwritable(folder)
        try:
            if finish_folder(folder, left).ended:
                ended.append(folder)
        except MemprobeError as e:  # this node is named on the page; the others are reported
            say(f"memprobe: {printable(str(e))}", sys.stderr)
            ended.append(folder)  # if it is still marked running, read as finishing would leave it
    job = Job.load(paths, analyse=analyse_all, ended=ended)
    if not job.read:
        found = "; ".join(f"{display_path(n.folder)}: {n.problem}" for n in job.nodes) or "no folder in it"
        raise UsageError(f"{display_path(paths[0])}: no node's results folder could be read ({found})")
    say(printable(culprit_words(job)[0]))
    for node in job.nodes:
        s = node.summary
        said = f"{s.verdict or 'no verdict'}, peak total PSS {s.total_pss_peak_mb or 0:,.0f} MB" if s else ""
        say(printable(f"{node.label}: {said}{'; ' if said and node.problem else ''}{node.problem or ''}"))
    for lost in job.lost():
        say(lost)
    say(f"\nreport: {display_path(write_job_report(out, job, job_name(paths)))}")
    return 0
