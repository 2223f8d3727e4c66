"""Opening a file someone else made (a scenario, a results folder sent by a colleague) without
trusting it: only a regular file is read, within a stated size, and nothing blocks.

Whatever the path is (a folder, a FIFO, a device, a symbolic link out of a results folder, a
sparse terabyte), the answer is an open file or a :class:`~memprobe.core.errors.UsageError` of one
line naming it. Inside a results folder no symbolic link is followed, at any level: memprobe
writes none there, and a link is how a folder would make the report copy a file such as
``/etc/shadow`` (a link that stays inside the folder is refused too: one rule, nothing to check
twice). A missing file raises :class:`FileNotFoundError`, which each reader turns into what a
missing file means for it (no rows yet, no scenario, "not a results folder").
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from memprobe.core.errors import UsageError
from memprobe.core.text import printable

# A scenario is a few hundred bytes (the largest shipped one is under 3 KB). It is copied into
# its results folder and its report, so a file, or what its YAML aliases expand to, is refused
# above this size: a 1.3 KB alias bomb once wrote a 1.1 GB results folder.
# The limit is the same where a scenario is read to run it and where its copy is read back.
MAX_SCENARIO_CHARS = 1_000_000


def display_path(path: str | Path) -> str:
    """``path`` as printable text: bytes that are not UTF-8 escaped (``\\xff``), and control
    characters too (``\\x1b``): a folder from someone else names its own files."""
    return printable(os.fspath(path))


def file_kind(mode: int) -> str | None:
    """What a path that is not a regular file is, in words."""
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return kind
    return None


def read_at_most(f: BinaryIO | int, limit: int) -> bytes:
    """At most ``limit`` bytes of an open file (or descriptor), read in 64 KB pieces."""
    chunks, size = [], 0
    while size < limit:
        n = min(1 << 16, limit - size)
        chunk = os.read(f, n) if isinstance(f, int) else f.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def open_regular(path: str | Path, *, limit: int, root: Path | None = None, allowed: str) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file of at most ``limit`` bytes,
    else a :class:`UsageError` naming it and saying what is ``allowed``.

    With ``root`` (a results folder), ``path`` must lie inside it and is reached one name at a
    time from ``root`` without following any symbolic link (``root`` itself may be one: the user
    named it). Without, ``path`` is a file the user named and is opened as given. Either way a
    FIFO or device is opened without waiting (O_NONBLOCK) and refused before a byte is read."""
    p = Path(path)
    name = display_path(p)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = _open_inside(root, p, flags) if root is not None else os.open(p, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(
                f"{name}: is a symbolic link (or lies under one); allowed: {allowed} (memprobe "
                "follows no link inside a results folder)"
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise FileNotFoundError(errno.ENOENT, "a parent is not a folder", str(p)) from None
        raise UsageError(f"{name}: cannot read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        if kind:
            raise UsageError(f"{name}: is {kind}; allowed: {allowed}")
        if st.st_size > limit:
            raise UsageError(
                f"{name}: larger than {limit:,} bytes; allowed: {allowed} of at most {limit:,} bytes"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, *, limit: int, root: Path | None = None, allowed: str) -> bytes:
    """The bytes of ``path`` (see :func:`open_regular`): refused above ``limit`` bytes even when
    the file grows, or its size lied, while it is read."""
    with open_regular(path, limit=limit, root=root, allowed=allowed) as f:
        try:
            data = read_at_most(f, limit + 1)
        except OSError as exc:
            raise UsageError(f"{display_path(path)}: cannot read: {exc.strerror}") from None
    if len(data) > limit:
        raise UsageError(
            f"{display_path(path)}: larger than {limit:,} bytes; allowed: {allowed} of at most {limit:,} bytes"
        )
    return data


def _open_inside(root: Path, path: Path, flags: int) -> int:
    """Open ``path`` (under ``root``) one name at a time, following no symbolic link."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise UsageError(
            f"{display_path(path)}: not inside the results folder {display_path(root)}"
        ) from None
    if not parts or ".." in parts:
        raise UsageError(f"{display_path(path)}: not a file inside the results folder {display_path(root)}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except NotADirectoryError:  # what Linux says of a link to a folder, opened so
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link") from None
                raise
            os.close(fd)
            fd = inner
        return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
