"""Where a page given with ``-o`` goes (``memprobe report``, ``memprobe compare``): never a
folder, never over a file of a results folder but a page at its top level, in a folder memprobe
may write, made if it is not there. Checked before anything is read or written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memprobe.core.errors import UsageError
from memprobe.core.safe_read import display_path
from memprobe.results.files import unwritable
from memprobe.results.folder import is_results_folder

PAGE_ALLOWED = "the path of an HTML file outside any results folder, or a page (.html) at one's top level"


def page_output(out: Path, read: Sequence[Path]) -> Path:
    """``out``, where a page given with ``-o`` goes, checked before anything is read or
    written, its folder created if it is not there (as ``mkdir -p``); a :class:`UsageError`
    naming it otherwise. It must not be a folder, nor any file of a results folder but a page
    at its top level (``N0/report.html``): ``-o N0/manifest.json`` would replace the manifest
    with HTML and leave the folder unreadable. The results folders are those in ``read`` and
    any the path lies in (up to ``runs/<id>/``, the deepest a folder's files are), compared
    where paths lead (``-o link/manifest.json``, a folder named through a link); a link named
    as ``out`` itself is replaced, never written through."""
    name = display_path(out)
    if out.is_dir():
        raise UsageError(f"-o {name}: is a folder; allowed: {PAGE_ALLOWED}")
    where = out.parent.resolve() / out.name
    around = [d for d in where.parents[:3] if is_results_folder(d)]
    for top in [*(f.resolve() for f in read), *around]:
        if where.is_relative_to(top) and not (where.parent == top and where.suffix.lower() == ".html"):
            raise UsageError(
                f"-o {name}: a file of the results folder {display_path(top)} "
                f"({display_path(where.relative_to(top))}); allowed: {PAGE_ALLOWED}"
            )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"-o {name}: cannot create the folder {display_path(out.parent)}: {exc.strerror}"
        ) from None
    why = unwritable(out.parent)
    if why:
        raise UsageError(f"-o {name}: cannot write in {display_path(out.parent)}: {why}")
    return out
