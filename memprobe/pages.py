"""From results folders to pages, the way ``memprobe report`` and ``memprobe compare`` take it: each
folder loaded (:class:`memprobe.results.folder.ResultSet`), analysed once
(:func:`memprobe.analysis.runs.analyse_all`), the page rendered from both (:mod:`memprobe.report`,
which computes no figure). A folder's life cycle (finishing one its memprobe left) is
:mod:`memprobe.results.lifecycle`'s; the end of a session, :mod:`memprobe.session.finish`'s.
"""

from __future__ import annotations

from pathlib import Path

from memprobe.analysis.runs import analyse_all
from memprobe.core.safe_read import display_path
from memprobe.report import write_report
from memprobe.report.compare import compared
from memprobe.results.files import write_text_atomic
from memprobe.results.folder import ResultSet


def folder_page(root: Path) -> Path:
    """``root/report.html`` written from the folder as it is (nothing else written): its runs
    analysed, then drawn."""
    results = ResultSet.load(root)
    return write_report(root, results, analyse_all(results))


def compare_folders(a: Path, b: Path, out: Path) -> tuple[Path, list[str]]:
    """Folders ``a`` (before) and ``b`` (after) compared on one page at ``out``, and what the
    terminal says besides the page's path (two recordings: their figures and what changed)."""
    out = Path(out)
    ra, rb = ResultSet.load(a), ResultSet.load(b)
    names = (display_path(Path(a).resolve().name), display_path(Path(b).resolve().name))
    if names[0] == names[1]:
        names = (f"{names[0]} (A)", f"{names[1]} (B)")
    done = compared(ra, analyse_all(ra), rb, analyse_all(rb), names)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(out, done.page), done.lines


def write_compare(a: Path, b: Path, out: Path) -> Path:
    """Compare results folders ``a`` (before) and ``b`` (after); write the page to ``out``."""
    return compare_folders(a, b, out)[0]
