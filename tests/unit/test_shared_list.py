"""memprobe.SharedList in one process: a list's reads, one buffer and no per-record objects, the
descriptor (not the bytes) sent to a process being started, a buffer nobody can write."""

from __future__ import annotations

import copy
import gc
import os
import pickle
import tracemalloc
from multiprocessing import context
from typing import Any

import numpy as np
import pytest

import memprobe
from memprobe.datasets.shared_list import MEMFD_NAME, SharedList


def records(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "path": f"images/{i:08d}.jpg", "box": [float(i), 2.5, 3.0, 4.0]} for i in range(n)]


def test_the_public_name_is_the_class() -> None:
    assert memprobe.SharedList is SharedList
    assert "SharedList" in memprobe.__all__


def test_it_reads_back_every_record_as_a_list_does() -> None:
    recs = records(1_000)
    sl = SharedList(iter(recs))  # any iterable, consumed once
    assert len(sl) == 1_000
    assert list(sl) == recs
    assert [sl[i] for i in range(-1_000, 1_000)] == recs + recs
    assert sl[np.int64(7)] == recs[7]
    assert recs[500] in sl and {"id": -1} not in sl
    assert sl.index(recs[3]) == 3 and sl.count(recs[3]) == 1
    assert list(reversed(sl)) == recs[::-1]
    assert sl[0] is not sl[0]  # each read is a new object: nothing is kept per record


@pytest.mark.parametrize(
    "values", [[], [None], [0, "a", b"b", 2.5, (1, 2), {"k": [1, {2: 3}]}, np.arange(3)], [b""] * 5]
)
def test_any_picklable_records_round_trip(values: list[Any]) -> None:
    sl = SharedList(values)
    got = list(sl)
    assert len(got) == len(values)
    for a, b in zip(got, values, strict=True):
        assert type(a) is type(b)
        assert (a == b).all() if isinstance(b, np.ndarray) else a == b


def test_index_and_type_errors_are_a_lists() -> None:
    sl = SharedList(range(3))
    for bad in (3, -4, 10**30):
        with pytest.raises(IndexError, match="SharedList index out of range"):
            sl[bad]
    with pytest.raises(TypeError, match="SharedList indices must be integers or slices, not str"):
        sl["0"]  # type: ignore[call-overload]
    with pytest.raises(IndexError):
        SharedList()[0]


@pytest.mark.parametrize(
    "cut",
    [slice(None), slice(2, 9), slice(None, None, 3), slice(None, None, -1), slice(8, 2, -2), slice(5, 5)],
)
def test_a_slice_is_a_new_shared_list_of_those_records(cut: slice) -> None:
    recs = records(12)
    part = SharedList(recs)[cut]
    assert isinstance(part, SharedList)
    assert list(part) == recs[cut]
    assert part.nbytes == sum(len(pickle.dumps(r, pickle.HIGHEST_PROTOCOL)) for r in recs[cut])


def test_a_record_that_cannot_be_pickled_is_named_by_its_index() -> None:
    with pytest.raises(TypeError, match=r"SharedList: record 2 \(generator\) cannot be pickled"):
        SharedList([1, 2, (x for x in ())])


def test_building_keeps_no_python_object_per_record() -> None:
    """The records' pickles are in the memory file, outside the Python heap: after the build,
    the heap holds what it held before (a list of the same records holds them all)."""
    n = 50_000

    def gen() -> Any:
        return ({"id": i, "path": f"images/{i:08d}.jpg", "label": i % 80} for i in range(n))

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        shared = SharedList(gen())
        kept_shared = tracemalloc.get_traced_memory()[0] - before
        as_list = list(gen())
        kept_list = tracemalloc.get_traced_memory()[0] - before - kept_shared
    finally:
        tracemalloc.stop()
    assert len(shared) == len(as_list) == n
    assert shared.nbytes > 2_000_000  # ~56 bytes a record
    assert kept_shared < 50_000, kept_shared  # a few objects, not 50,000 dicts
    assert kept_list > 100 * kept_shared


def test_plain_pickling_copies_the_bytes_at_every_protocol() -> None:
    recs = records(300)
    sl = SharedList(recs)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(sl, protocol=protocol)
        assert len(data) > sl.nbytes  # the records travel with it
        back = pickle.loads(data)
        assert isinstance(back, SharedList) and list(back) == recs and back.nbytes == sl.nbytes


class Subclassed(SharedList):
    __slots__ = ()


def test_a_subclass_stays_itself_through_pickling_and_slicing() -> None:
    sub = Subclassed(range(5))
    assert type(pickle.loads(pickle.dumps(sub))) is Subclassed
    assert type(sub[1:3]) is Subclassed and list(sub[1:3]) == [1, 2]


def test_copies_are_the_object_itself() -> None:
    sl = SharedList(records(3))
    assert copy.copy(sl) is sl and copy.deepcopy(sl) is sl
    assert copy.deepcopy([sl])[0] is sl


def test_repr_gives_records_and_bytes() -> None:
    sl = SharedList(range(1_000))
    assert repr(sl) == f"SharedList(1,000 records, {sl.nbytes:,} bytes)"
    assert repr(SharedList()) == "SharedList(0 records, 0 bytes)"


class FakePopen:
    """What multiprocessing's spawn Popen does while it pickles a process object: it collects
    the descriptors to pass to the child (here duplicated, as the child would receive them)."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    class DupFd:
        def __init__(self, fd: int) -> None:
            self.fd = fd

        def detach(self) -> int:
            return self.fd

    def duplicate_for_child(self, fd: int) -> int:
        self.fds.append(os.dup(fd))
        return self.fds[-1]


def test_starting_a_process_sends_the_descriptor_of_a_sealed_memory_file_not_the_bytes() -> None:
    recs = records(20_000)
    sl = SharedList(recs)
    popen = FakePopen()
    context.set_spawning_popen(popen)
    try:
        data = pickle.dumps(sl, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        context.set_spawning_popen(None)
    assert len(data) < 500 < sl.nbytes // 1_000
    (fd,) = popen.fds
    # Anonymous: a memory file with no name in /dev/shm, freed when the last holder ends.
    assert os.readlink(f"/proc/self/fd/{fd}") == f"/memfd:{MEMFD_NAME} (deleted)"
    with pytest.raises(PermissionError):  # sealed: no process it is sent to can change it
        os.pwrite(fd, b"x", 0)
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)
    child = pickle.loads(data)  # the child's side: it maps the same file
    assert list(child) == recs and child.nbytes == sl.nbytes
    assert not os.get_inheritable(fd)


@pytest.mark.parametrize("free", [0, 1], ids=["no descriptor free", "one free: the mapping's copy fails"])
def test_at_the_open_files_limit_the_error_names_the_limit_and_nothing_leaks(free: int) -> None:
    """Before: a bare ``OSError: [Errno 24] Too many open files``, from memfd_create or from the
    mapping's copy of the descriptor (each SharedList holds two)."""
    import errno
    import resource

    def open_now(below: int) -> set[int]:  # without opening one (listing /proc/self/fd would)
        found = set()
        for fd in range(below):
            try:
                os.fstat(fd)
            except OSError:
                continue
            found.add(fd)
        return found

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    opened = open_now(max(int(fd) for fd in os.listdir("/proc/self/fd")) + 8)
    limit = sorted(set(range(len(opened) + 8)) - opened)[free]  # ``free`` numbers free below it
    shared = SharedList(records(10))  # built before the limit: slicing it takes two more
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        before = open_now(limit + 8)
        for build in (lambda: SharedList(records(10)), lambda: shared[2:5]):
            with pytest.raises(OSError) as raised:
                build()
            assert raised.value.errno == errno.EMFILE
            said = str(raised.value)
            assert (
                f"SharedList: this process has reached its limit of open files (ulimit -n: {limit};" in said
            )
            assert "each SharedList holds 2" in said and "Hold fewer of them" in said and "ulimit -n" in said
            assert open_now(limit + 8) == before  # the memory file made before the failure closed
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert shared[3] == records(10)[3]
