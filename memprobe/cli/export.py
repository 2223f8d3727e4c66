"""Write a results folder in another tool's format: a Chrome/Perfetto trace that opens beside a
torch.profiler trace, TensorBoard scalars beside a training's own curves, or OpenMetrics text of
its summary for a CI dashboard (Prometheus reads it too). The folder is only read; the figures are
the analysis', as summary.json and the page give them. docs/export.md says how to open each."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memprobe.results.folder import ResultSet, ResultsFolder

NAME = "export"
HELP = "write a results folder as a Chrome/Perfetto trace, TensorBoard scalars or OpenMetrics text"
EPILOG = """examples:
  memprobe export reports/record-python-20261129T031000Z --format chrome-trace   # DIR/trace.json
  memprobe export DIR --format tensorboard -o runs/memprobe    # then: tensorboard --logdir runs
  memprobe export DIR --format openmetrics -o metrics.prom     # a text-file collector, a Pushgateway
"""
# Each format: what -o is (a file or a folder) and where it goes by default, in the results folder.
FORMATS = {"chrome-trace": "trace.json", "tensorboard": "tensorboard", "openmetrics": "metrics.prom"}
ALLOWED = ", ".join(FORMATS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results", help="a results folder written by 'memprobe run', 'record', 'watch' or profile()"
    )
    p.add_argument(
        "--format",
        dest="format",
        default=None,
        metavar="FORMAT",
        help=f"one of: {ALLOWED}",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="where it goes: a file (chrome-trace, openmetrics) or a new or empty folder (tensorboard), "
        "in a folder that exists; default: in the results folder, "
        + ", ".join(f"DIR/{name} ({fmt})" for fmt, name in FORMATS.items()),
    )


def output_path(out: Path | None, root: Path, fmt: str) -> Path:
    """Where the export of ``root`` in ``fmt`` goes, checked before anything is read or written:
    ``out`` (``-o``) or the format's default in the folder; an error naming it otherwise (its
    folder missing, a results folder's own file, a folder for a file format, a folder that is
    not empty for TensorBoard, a folder memprobe may not write)."""
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.results.files import unwritable
    from memprobe.results.folder import is_results_folder, own_file

    given = out is not None
    out = out if out is not None else root / FORMATS[fmt]
    name = f"-o {display_path(out)}" if given else display_path(out)
    folder = fmt == "tensorboard"
    allowed = (
        "a new or empty folder (TensorBoard's log directory)" if folder else "the path of a file"
    ) + " in a folder that exists, never one of a results folder's own files"
    if not out.parent.is_dir():
        raise UsageError(f"{name}: no such folder {display_path(out.parent)}; allowed: {allowed}")
    where = out.parent.resolve() / out.name
    # The folder read (a job's folder is none: its nodes' are) and any the path lies in.
    tops = [d for d in (root.resolve(), where, *where.parents[:3]) if is_results_folder(d)]
    for top in tops:
        if where == top or (where.is_relative_to(top) and (where.parent != top or own_file(out.name))):
            inside = (
                "the results folder itself"
                if where == top
                else f"a file of the results folder {display_path(top)}"
            )
            raise UsageError(f"{name}: {inside}; allowed: {allowed}")
    if folder:
        if out.exists() and not out.is_dir():
            raise UsageError(f"{name}: exists and is not a folder; allowed: {allowed}")
        if out.is_dir() and any(out.iterdir()):
            raise UsageError(
                f"{name}: a folder that is not empty (TensorBoard would show what is there beside this "
                f"export); allowed: {allowed}"
            )
    elif out.is_dir():
        raise UsageError(f"{name}: is a folder; allowed: {allowed}")
    why = unwritable(out.parent)
    if why:
        hint = "" if given else f"; give it a path elsewhere: -o {'FOLDER' if folder else 'FILE'}"
        raise UsageError(f"{name}: cannot write in {display_path(out.parent)} ({why}){hint}")
    return out


def check_format(fmt: str | None) -> str:
    from memprobe.core.errors import UsageError
    from memprobe.core.text import printable

    if fmt is None:
        raise UsageError(f"--format is needed; allowed: {ALLOWED}")
    if fmt not in FORMATS:
        raise UsageError(f"--format {printable(fmt)}: not a format memprobe writes; allowed: {ALLOWED}")
    return fmt


def job_folders(root: Path, fmt: str) -> list[Path] | None:
    """The node folders when ``root`` is a job's folder (one results folder per node), None when
    it is a results folder (or neither: opening it says so). A trace takes one node's folder
    (each node's pids are its own host's), and folders that are not one job's are refused, each
    naming a folder to export on its own."""
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.results.folder import is_results_folder
    from memprobe.results.job import node_folders, not_one_job

    name = display_path(root)
    if not root.is_dir():
        raise UsageError(f"{name}: no such results folder")
    if is_results_folder(root):
        return None
    nodes = [f for f in node_folders([root]) if is_results_folder(f)]
    if not nodes:
        return None
    one = f"memprobe export {display_path(nodes[0])} --format {fmt}"
    if fmt == "chrome-trace":
        raise UsageError(
            f"{name}: holds {len(nodes)} nodes' results folders; a trace takes one node's (each node's pids "
            f"are its own host's): {one}"
        )
    why = not_one_job(nodes)
    if why:
        raise UsageError(
            f"{name}: holds {len(nodes)} results folders that are not the nodes of one job ({why}); "
            f"export each on its own: {one}"
        )
    return nodes


def export_job(root: Path, fmt: str, out: Path) -> None:
    """A job's nodes in one export: OpenMetrics labelled by node, TensorBoard a log directory per
    node (``OUT/<node>/<run id>``); a node that cannot be read is named on stderr."""
    import sys

    from memprobe.analysis.runs import analyse_all
    from memprobe.cli.console import say
    from memprobe.core.errors import UsageError
    from memprobe.core.safe_read import display_path
    from memprobe.core.text import printable
    from memprobe.export.openmetrics import text
    from memprobe.export.source import runs_of
    from memprobe.export.tensorboard import run_dir_name, write_tensorboard
    from memprobe.results.files import write_text_atomic
    from memprobe.results.job import Job

    job = Job.load([root], analyse=analyse_all)
    if not job.read:
        found = "; ".join(f"{display_path(n.folder)}: {n.problem}" for n in job.nodes)
        raise UsageError(f"{display_path(root)}: no node's results folder could be read ({found})")
    for node in job.nodes:
        if node.problem:
            say(printable(f"memprobe: {node.label}: {node.problem}"), sys.stderr)
    nodes = [(n, n.results) for n in job.read if n.results is not None]
    if fmt == "openmetrics":
        items = [(r, res.manifest, n.label) for n, res in nodes for r in runs_of(res, n.analysed or [])]
        write_text_atomic(out, text(items))
    else:
        for n, res in nodes:
            write_tensorboard(runs_of(res, n.analysed or []), out / run_dir_name(n.label))


def load(folder: ResultsFolder) -> ResultSet:
    """The folder as it is, read and never changed: one whose memprobe still writes it, its
    rows so far; one whose memprobe was killed, as finishing it would leave it."""
    from memprobe.probe.procfs import still_running

    writer = folder.manifest.get("writer") or {}
    if folder.manifest.get("status") == "running" and still_running(writer):
        return folder.load()
    return folder.load_as_ended()


def main(args: argparse.Namespace) -> int:
    from memprobe.analysis.runs import analyse_all
    from memprobe.cli.console import say
    from memprobe.core.safe_read import display_path
    from memprobe.export.openmetrics import openmetrics
    from memprobe.export.source import runs_of
    from memprobe.export.tensorboard import write_tensorboard
    from memprobe.export.trace import dumps, trace
    from memprobe.results.files import write_text_atomic
    from memprobe.results.folder import ResultsFolder

    fmt = check_format(args.format)
    root = Path(args.results)
    if job_folders(root, fmt) is not None:
        out = output_path(args.output, root, fmt)
        export_job(root, fmt, out)
        say(f"{fmt}: {display_path(out)}")
        return 0
    folder = ResultsFolder.open(root)
    out = output_path(args.output, root, fmt)
    results = load(folder)
    runs = runs_of(results, analyse_all(results))
    if fmt == "chrome-trace":
        write_text_atomic(out, dumps(trace(runs, results.manifest)))
    elif fmt == "openmetrics":
        write_text_atomic(out, openmetrics(runs, results.manifest))
    else:
        write_tensorboard(runs, out)
    say(f"{fmt}: {display_path(out)}")
    return 0
