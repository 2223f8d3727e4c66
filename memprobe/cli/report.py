"""Render report.html again from a results folder alone (no run is repeated), or one page for
a job of several nodes from the folders its nodes wrote (:mod:`memprobe.report.nodes`)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "report"
HELP = "re-render report.html from a saved results folder (or one page for a multi-node job)"
EPILOG = """examples:
  memprobe report reports/lists_vs_arrays-20261122T101500Z
  memprobe report job/                  # job/node0, job/node1, ...: one page, job/report.html
  memprobe report n0/ n1/ -o job.html   # the nodes' folders named one by one
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
        help="where a multi-node job's page goes (default: JOBDIR/report.html, or job-report.html "
        "beside the first node's folder)",
    )


def finish_folder(root: Path) -> int | None:
    """A folder whose writer died is marked and its rows gathered (once), before it is read.
    A folder whose memprobe still writes it is left as it is: the pid of that memprobe."""
    import sys

    from memprobe.cli.console import say
    from memprobe.core.safe_read import display_path
    from memprobe.probe.procfs import still_running
    from memprobe.results.files import check_run_records
    from memprobe.results.folder import ResultsFolder
    from memprobe.results.gather import consolidate, unconsolidated

    name = display_path(root)
    folder = ResultsFolder.open(root)
    check_run_records(root)
    # The folder is finished first, then loaded once: a killed recording's JSON lines are read
    # once (gathered into Parquet), and no second copy of its tables is held.
    writer_running = still_running(folder.manifest.get("writer") or {})
    if folder.manifest.get("status") == "running" and writer_running:
        # Its rows are still being written: read them, move nothing.
        pid = int(folder.manifest["writer"]["pid"])
        say(
            f"memprobe: {name} is still being written by memprobe (pid {pid}): this report shows what "
            "was saved so far; that memprobe writes its own when it ends",
            sys.stderr,
        )
        return pid
    if folder.finish_abandoned(writer_running=writer_running):
        say(
            f"memprobe: the memprobe that wrote {name} ended before finishing (killed?): marked interrupted",
            sys.stderr,
        )
    elif unconsolidated(root):  # gathering the rows failed last time (a full disk): finish it now
        consolidate(root)
    return None


def main(args: argparse.Namespace) -> int:
    from memprobe.analysis import analyse_all
    from memprobe.cli.console import say, summary_table
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.report import write_report
    from memprobe.results.folder import ResultsFolder, is_results_folder
    from memprobe.results.job import node_folders, not_one_job

    paths = [Path(p) for p in args.results]
    if len(paths) == 1 and paths[0].is_dir() and not is_results_folder(paths[0]) and node_folders(paths):
        inside = [f for f in node_folders(paths) if is_results_folder(f)]
        why = not_one_job(inside)
        if why:  # a folder of separate results (reports/): each is re-rendered on its own
            name = display_path(paths[0])
            raise UsageError(
                f"{name}: holds {len(inside)} results folders that are not the nodes of one job ({why}); "
                f"name one (memprobe report {display_path(inside[0])}), or name a job's nodes' folders "
                "one by one to put them on one page"
            )
    if len(paths) > 1 or (paths[0].is_dir() and not is_results_folder(paths[0]) and node_folders(paths)):
        return job_report(paths, args.output)
    root = paths[0]
    if not root.is_dir():
        raise UsageError(f"{display_path(root)}: no such results folder")
    writer = finish_folder(root)
    if writer is not None:
        return report_so_far(root, writer)
    folder = ResultsFolder.open(root)
    results = folder.load()
    analysed = analyse_all(results)  # once: the summary and the page draw from the same analysis
    summaries = [a.summary for a in analysed]
    folder.write_summary(summaries)
    say(summary_table(summaries))
    say(f"\nreport: {display_path(write_report(root, results, analysed))}")
    return 0


def report_so_far(root: Path, writer: int) -> int:
    """The page of a session memprobe ``writer`` still writes, from its rows so far, read and
    never moved (no gathering, no marking): the recording goes on undisturbed and writes its own
    summary and page at its end. Ours are written only while the manifest still says running,
    under the lock the recorder's finish takes (:meth:`memprobe.results.folder.ResultsFolder.write_while_running`), so
    they never replace the session's own."""
    import sys
    import time

    from memprobe.analysis import analyse_all
    from memprobe.cli.console import say, summary_table
    from memprobe.core.safe_read import display_path
    from memprobe.report import render
    from memprobe.report.format import clock
    from memprobe.results.files import write_text_atomic
    from memprobe.results.folder import ResultsFolder

    as_of = time.time()
    folder = ResultsFolder.open(root)
    path = root / "report.html"
    ended = (
        f"memprobe: {display_path(root)}: the session ended while this report was made; its own "
        f"summary and report are written by the memprobe that recorded it ({display_path(path)})"
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
        folder.write_summary(summaries)
        write_text_atomic(path, page)

    if not folder.write_while_running(write):
        say(ended, sys.stderr)
        return 0
    say(summary_table(summaries))
    going = "recording" if folder.manifest.get("kind") in ("record", "watch") else "running"
    say(f"\nreport (still {going}, as of {clock(as_of)}): {display_path(path)}")
    return 0


def job_report(paths: list[Path], output: Path | None) -> int:
    """One page for the nodes in ``paths`` (a job folder, or the nodes' folders)."""
    import sys

    from memprobe.analysis import analyse_all
    from memprobe.cli.console import say
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.report.nodes import culprit_words, job_name, write_job_report
    from memprobe.results.folder import is_results_folder
    from memprobe.results.job import Job, node_folders

    if len(paths) == 1 and not paths[0].is_dir():
        raise UsageError(f"{display_path(paths[0])}: no such results folder")
    for folder in node_folders(paths):
        if is_results_folder(folder):
            try:
                finish_folder(folder)
            except UsageError as e:  # this node is named on the page; the others are reported
                say(f"memprobe: {e}", sys.stderr)
    job = Job.load(paths, analyse=analyse_all)
    if not job.read:
        found = "; ".join(f"{display_path(n.folder)}: {n.problem}" for n in job.nodes) or "no folder in it"
        raise UsageError(f"{display_path(paths[0])}: no node's results folder could be read ({found})")
    say(culprit_words(job)[0])
    for node in job.nodes:
        s = node.summary
        said = f"{s.verdict or 'no verdict'}, peak total PSS {s.total_pss_peak_mb or 0:,.0f} MB" if s else ""
        say(f"{node.label}: {said}{'; ' if said and node.problem else ''}{node.problem or ''}")
    for k in job.missing:
        say(f"node {k}: no folder for it")
    out = output or (
        paths[0] / "report.html" if len(paths) == 1 else paths[0].resolve().parent / "job-report.html"
    )
    say(f"\nreport: {display_path(write_job_report(out, job, job_name(paths)))}")
    return 0
