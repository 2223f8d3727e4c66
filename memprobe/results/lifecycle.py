"""A results folder's life before it is read: one whose memprobe was killed is marked and its rows
gathered, once, under the folder's lock (of two readers at once, one finishes it and the other
reads what it finished); one whose memprobe still writes it is left as it is. Whether that
memprobe still runs is a fact about a process, passed in by the caller (``results/`` reads no
process).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memprobe.core.safe_read import display_path
from memprobe.results.files import check_run_records
from memprobe.results.folder import ResultsFolder
from memprobe.results.gather import consolidate, unconsolidated


@dataclass(frozen=True)
class Found:
    """A results folder as :func:`finish_folder` found it, and what the user is told of it."""

    writer: int | None = None  # the pid of the memprobe that still writes it
    ended: bool = False  # its memprobe was killed and it was left as it was: read it as ended
    said: tuple[str, ...] = ()  # lines for the user (stderr)


def finish_folder(root: Path, *, writer_running: bool, left: str | None = None) -> Found:
    """Finish the folder ``root`` before it is read: a folder whose writer died is marked and its
    rows gathered (once), under the folder's lock. ``writer_running``: whether the memprobe its
    manifest names as its writer still runs. ``left``: why the folder is left as it is instead
    (memprobe may not write it, or the page goes elsewhere: ``-o``), said if there was something
    to finish; it is then read as finishing would leave it (``ended``). A folder whose memprobe
    still writes it is left as it is: the pid of that memprobe."""
    name = display_path(root)
    folder = ResultsFolder.open(root)
    check_run_records(root)
    if folder.manifest.get("status") == "running" and writer_running:
        pid = int(folder.manifest["writer"]["pid"])
        going = (
            f"memprobe: {name} is still being written by memprobe (pid {pid}): this report shows what "
            "was saved so far; that memprobe writes its own when it ends"
        )
        return Found(writer=pid, said=(going,))
    killed = f"memprobe: the memprobe that wrote {name} ended before finishing (killed?): marked interrupted"
    if left is not None:
        if folder.manifest.get("status") != "running":
            return Found()
        return Found(ended=True, said=(f"{killed} on the page; the folder is left as it was ({left})",))
    said: tuple[str, ...] = ()
    with folder.locked():
        folder = ResultsFolder.open(root)  # as another memprobe report may have finished it meanwhile
        if folder.finish_abandoned(writer_running=False):
            said = (killed,)
        elif unconsolidated(root):  # gathering the rows failed last time (a full disk): finish it now
            consolidate(root)
    return Found(said=said)
