"""The errors memprobe raises for problems a user can act on."""

from __future__ import annotations

import errno
from typing import Any


class MemprobeError(Exception):
    """A problem the user can fix; the CLI prints it without a traceback."""

    exit_code = 1


class UsageError(MemprobeError):
    """Bad input: a scenario file, a flag, a factory name. Exit code 2."""

    exit_code = 2


class FactoryError(UsageError):
    """A user's dataset factory (``module:callable``) that gives no dataset: a reference that names
    no module or callable, a module that cannot be imported (it raises, has a SyntaxError, calls
    ``sys.exit``, ends its process, or does not return within the time allowed), a factory that
    raises, ends its process, does not return, or returns something that is not a dataset. The
    message names the reference, what went wrong and where in the user's code. Exit code 2.

    ``result``: the run that found it, where there was one (``memprobe.profile()``'s
    ``ProfileResult``, its results folder holding the whole traceback)."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class SchemaVersionError(UsageError):
    """A results folder whose schema version this memprobe does not read (written by a newer
    memprobe, or not by memprobe at all). Exit code 2."""


class ResultsWriteError(MemprobeError):
    """The results folder could not be written (a full disk, permissions). What was written
    before stays intact: every file is written to a temporary name and renamed."""

    def __init__(self, path: object, exc: OSError) -> None:
        self.path = path
        self.errno = exc.errno
        advice = _advice(exc.errno)
        super().__init__(
            f"cannot write {path}: {exc.strerror or exc}. What was saved before is intact"
            + (f"; {advice}" if advice else "")
        )


def _advice(code: int | None) -> str | None:
    """What to do about a write that failed with ``code``, where the error says it (a full disk:
    free space; a folder gone: it was moved), else None: the error's own words are all there is."""
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "free some space and run 'memprobe report' on the results folder to finish it"
    if code == errno.ENOENT:
        return "its folder was deleted or moved while memprobe was writing"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "memprobe may not write there: choose another place (-o)"
    return None


class ResultsFolderGone(MemprobeError):
    """The results folder was deleted or moved while a run was writing into it."""

    def __init__(self, path: object) -> None:
        super().__init__(
            f"the results folder {path} was deleted or moved while memprobe was running; the "
            "run in progress was ended (no process of it is left) and nothing more could be saved"
        )
