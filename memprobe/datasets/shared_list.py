"""``memprobe.SharedList``: records pickled once into one shared, read-only buffer.

A list of dicts read by forked DataLoader workers is copied into each of them page by page
(every read writes reference counts: copy-on-access), and a dataset pickled to spawn or
forkserver workers is copied once per worker. A ``SharedList`` holds no Python object per
record: ``SharedList(records)`` pickles each record once into one buffer, followed by the
records' int64 end offsets, and ``sl[i]`` unpickles record ``i`` from it (a new object at every
read). The idea is detectron2's ``DatasetFromList(serialize=True)``; the buffer lives where
every start method can share it:

* The buffer is an anonymous memory file (``os.memfd_create``), sealed against writes and
  mapped read-only. It has no name: nothing is ever created in ``/dev/shm`` (so nothing is left
  there, however the job ends), and the kernel frees it when the last process holding it ends.
* **fork**: the workers inherit the mapping. Reading a record touches no page of it for writing,
  so a worker's own memory (USS) does not grow with what it reads; the buffer is one copy.
* **spawn, forkserver**: when the object is pickled to start a process (``multiprocessing``
  sets the "spawning popen" for that), it sends the file descriptor, not the bytes; the worker
  maps the same pages. Total PSS holds one copy, whatever the number of workers.
* **thread workers**: the one object, read concurrently (it is never written after it is built).
* Pickled any other way (``pickle.dumps``, a ``multiprocessing.Queue``, ``torch.save``), it is
  its bytes, and unpickling builds a new buffer. ``copy.copy`` and ``copy.deepcopy`` return the
  object itself: it cannot change.

The builder's process maps every page once, so a worker's reads map pages it shares with that
process (counted as shared, not as the worker's own). Linux only (``memfd_create``).

Each ``SharedList`` holds two file descriptors while it lives (its memory file, and the mapping's
own copy of it that Python's ``mmap`` keeps). At the process's limit of open files (``ulimit -n``)
building one raises an ``OSError`` (errno EMFILE) that names the limit and what to do, and
leaves no descriptor behind.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import operator
import os
import pickle
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing import context, reduction
from typing import Any, overload

__all__ = ["SharedList"]

MEMFD_NAME = "memprobe-sharedlist"
# Pickled records are written to the memory file in pieces of this size (the builder holds
# one piece, never the whole buffer, besides the file itself).
WRITE_CHUNK = 1 << 20
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
OFFSET_SIZE = 8  # int64


class SharedList(Sequence[Any]):
    """An immutable list of picklable records, held as one pickled buffer shared by every worker.

    ``SharedList(records)`` consumes ``records`` once (any iterable); ``len``, indexing
    (negative too; a slice gives a new ``SharedList``), iteration and ``in`` work as on a
    list. A record that cannot be pickled raises ``TypeError`` naming its index."""

    __slots__ = ("__weakref__", "_count", "_data", "_fd", "_map", "_nbytes", "_offsets")

    _fd: int
    _count: int
    _nbytes: int
    _map: mmap.mmap
    _data: memoryview
    _offsets: memoryview

    def __init__(self, records: Iterable[Any] = (), /) -> None:
        fd, count, nbytes = _write(_pickled(records))
        self._attach(fd, count, nbytes, populate=True)

    # -- building and attaching ------------------------------------------------------------

    def _attach(self, fd: int, count: int, nbytes: int, *, populate: bool) -> None:
        """Map the sealed memory file ``fd`` (records, padding, ``count + 1`` offsets)."""
        start = _offsets_start(nbytes)
        size = start + OFFSET_SIZE * (count + 1)
        try:
            found = os.fstat(fd).st_size
            if found != size:
                raise ValueError(f"SharedList: the shared buffer holds {found} bytes, expected {size}")
            mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        except OSError as exc:
            os.close(fd)
            raise _in_words(exc) from exc
        except BaseException:
            os.close(fd)
            raise
        weakref.finalize(self, os.close, fd)
        view = memoryview(mapped)
        if populate:
            # One byte of every page read: the pages are mapped here, so a worker that maps one
            # later shares it with this process instead of holding it alone.
            bytes(view[:: mmap.PAGESIZE])
        self._fd, self._count, self._nbytes, self._map = fd, count, nbytes, mapped
        self._data = view[:nbytes]
        self._offsets = view[start:size].cast("q")

    @classmethod
    def _adopt(cls, fd: int, count: int, nbytes: int, *, populate: bool) -> SharedList:
        obj = cls.__new__(cls)
        obj._attach(fd, count, nbytes, populate=populate)
        return obj

    # -- the sequence ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> SharedList: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._take(range(self._count)[index])
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(
                f"SharedList indices must be integers or slices, not {type(index).__name__}"
            ) from None
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError("SharedList index out of range")
        off = self._offsets
        return pickle.loads(self._data[off[i] : off[i + 1]])

    def __iter__(self) -> Iterator[Any]:
        data, off, loads = self._data, self._offsets, pickle.loads
        start = 0
        for i in range(1, self._count + 1):
            end = off[i]
            yield loads(data[start:end])
            start = end

    def _take(self, picked: range) -> SharedList:
        """A new SharedList of the records at ``picked``, copied as pickled bytes."""
        data, off = self._data, self._offsets
        fd, count, nbytes = _write(data[off[i] : off[i + 1]] for i in picked)
        return self._adopt(fd, count, nbytes, populate=True)

    @property
    def nbytes(self) -> int:
        """Bytes of the pickled records (the offsets add 8 bytes per record)."""
        return self._nbytes

    def __repr__(self) -> str:
        return f"SharedList({self._count:,} records, {self._nbytes:,} bytes)"

    # -- copies and pickling ---------------------------------------------------------------

    def __copy__(self) -> SharedList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedList:
        return self

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        if context.get_spawning_popen() is not None:
            # Starting a process (spawn, forkserver): multiprocessing passes the descriptor.
            return (_from_descriptor, (type(self), reduction.DupFd(self._fd), self._count, self._nbytes))
        records = pickle.PickleBuffer(self._data) if protocol >= 5 else self._data.tobytes()
        return (_from_bytes, (type(self), records, self._offsets.tobytes()))


def _pickled(records: Iterable[Any]) -> Iterator[bytes]:
    for index, record in enumerate(records):
        try:
            yield pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(
                f"SharedList: record {index} ({type(record).__name__}) cannot be pickled: {exc}"
            ) from exc


def _offsets_start(nbytes: int) -> int:
    return -(-nbytes // OFFSET_SIZE) * OFFSET_SIZE


def _write(pieces: Iterable[Any]) -> tuple[int, int, int]:
    """A sealed memory file holding ``pieces`` (bytes-like, one per record) then their end
    offsets: (its descriptor, the number of records, the records' bytes)."""
    fd = _memfd()
    try:
        ends = array("q", [0])
        chunk = bytearray()
        written = 0
        for piece in pieces:
            chunk += piece
            ends.append(written + len(chunk))
            if len(chunk) >= WRITE_CHUNK:
                _write_all(fd, chunk)
                written += len(chunk)
                chunk.clear()
        _write_all(fd, chunk)
        _finish(fd, memoryview(ends))
        return fd, len(ends) - 1, ends[-1]
    except BaseException:
        os.close(fd)
        raise


def _finish(fd: int, ends: memoryview) -> None:
    """After the records: padding to 8 bytes, the offsets, the seals."""
    _write_all(fd, bytes(_offsets_start(ends[-1]) - ends[-1]))
    _write_all(fd, ends)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def _from_descriptor(cls: type[SharedList], duplicated: Any, count: int, nbytes: int) -> SharedList:
    fd = duplicated.detach()
    os.set_inheritable(fd, False)
    return cls._adopt(fd, count, nbytes, populate=False)


def _from_bytes(cls: type[SharedList], records: Any, offsets: bytes) -> SharedList:
    """A SharedList unpickled from its bytes: the records' bytes and offsets written as they are."""
    ends = memoryview(offsets).cast("q")
    fd = _memfd()
    try:
        _write_all(fd, records)
        _finish(fd, ends)
    except BaseException:
        os.close(fd)
        raise
    return cls._adopt(fd, len(ends) - 1, ends[-1], populate=True)


def _memfd() -> int:
    try:
        return os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as exc:
        raise _in_words(exc) from exc


def _in_words(exc: OSError) -> OSError:
    """Out of file descriptors (EMFILE: this process's limit; ENFILE: the system's), in words: the
    limit, what a SharedList takes, what to do; any other error as it is."""
    if exc.errno == errno.ENFILE:
        return OSError(
            errno.ENFILE,
            "SharedList: the system's limit of open files is reached (fs.file-max, "
            "/proc/sys/fs/file-max): each SharedList holds 2 descriptors; close files or raise "
            "that limit (sysctl fs.file-max=...)",
        )
    if exc.errno != errno.EMFILE:
        return exc
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = hard == resource.RLIM_INFINITY
    to = max(soft * 4, 65536) if unlimited else hard
    raise_it = (
        f"raise the limit before building them (`ulimit -n {to}` in the shell that starts the job, "
        f"or resource.setrlimit(resource.RLIMIT_NOFILE, ({to}, "
        f"{'resource.RLIM_INFINITY' if unlimited else hard})) in the job)"
        if to > soft
        else "raise the hard limit, which takes root (limits.conf, systemd's LimitNOFILE=, docker --ulimit)"
    )
    return OSError(
        errno.EMFILE,
        f"SharedList: this process has reached its limit of open files (ulimit -n: {soft}; hard "
        f"limit: {'unlimited' if unlimited else hard}), and each SharedList holds 2 (its memory file "
        "and its mapping). Hold fewer of them (one SharedList of all the records rather than one "
        f"per sample or shard), or {raise_it}",
    )
