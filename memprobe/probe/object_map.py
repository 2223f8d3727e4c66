"""Where a dataset's objects lie: its structure walked into (attribute path -> address ranges).

Run inside the process that built the dataset (the forked workers' parent): in CPython ``id()``
is an object's address, and its size is known to the interpreter. The walk names the paths a
user would type (``dataset.samples``, ``dataset.index.entries``, ``dataset.df['text']``,
``dataset.datasets[0]``) down to :data:`NAMED_DEPTH` levels, by the rules of
:mod:`memprobe.probe.object_names`.

Everything else a named object holds (a list's items, a dict's keys and values, an object
array's elements, an Arrow column's buffers, a tensor's storage) is counted to its path, followed
as far as it goes. What is held in two places is counted once, to the first path: the named
paths are taken breadth first (shallower first, then attributes in their order), each one's
contents before the next's; where a later path holds containers an earlier one took, the map
says which and how many (``also_held``). Types, modules, functions and code are the interpreter's: not
followed.

Each object counts as its memory block: the garbage collector's header before it (where a
collection writes, so a forked worker copies its page), the object, rounded up to pymalloc's 16
bytes; plus the buffers it holds outside itself, read at their CPython 3.11-3.13 offsets (a
list's item array, a dict's key table, a set's table, a bytearray's bytes), checked on this
interpreter first (:data:`BUFFERS_READABLE`; where the check fails only the objects themselves
are counted, and the map says so). numpy, Arrow and torch buffers come from their own APIs.

Bounded: at most ``max_objects`` objects and ``max_seconds`` seconds; where it stops, the map
says so (``stopped``) and what it did not reach is counted outside the dataset. Its memory: 20
bytes per block met while it walks (three arrays), the containers seen by path (~100 bytes each; a
tuple of plain values, the commonest record, takes none), and at its end, sorting the blocks by
address, about as much again; measured in docs/performance.md (+173 MB at its peak for 4 M
objects, 1 M records of (path, class)).
"""

from __future__ import annotations

import array
import ctypes
import gc
import json
import sys
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from memprobe.probe.object_names import NOT_DATA, PLAIN, Column, named_children

NAMED_DEPTH = 6  # levels of named paths below the dataset
MAX_OBJECTS = 20_000_000
MAX_SECONDS = 120.0
ALSO_HELD = 10  # paths that also hold what an earlier path took, named at most
_CHECK_EVERY = 4096  # objects between two looks at the clock
# How an object's size is read (_Walker.kind): __sizeof__ of a builtin, object.__sizeof__, the
# basic size plus a buffer outside it, the basic size alone, a numpy array, Arrow's or torch's
# buffers, an instance whose attribute values lie outside it (3.11's managed dict).
_INLINE, _OBJECT, _OUTSIDE, _BASIC, _ARRAY, _FOREIGN, _VALUES = range(7)

_ALIGN = 16  # pymalloc's (and glibc's) alignment on 64-bit
_HAVE_GC = 1 << 14  # Py_TPFLAGS_HAVE_GC
_MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT (3.11-3.13): two pointers before the GC header
_GC_HEAD = 16  # sizeof(PyGC_Head) on 64-bit


def _ssize(address: int) -> int:
    return ctypes.c_ssize_t.from_address(address).value


def _pointer(address: int) -> int:
    return ctypes.c_void_p.from_address(address).value or 0


# Offsets of the buffers builtin containers hold outside themselves (CPython 3.11-3.13, 64-bit,
# not free-threaded): (offset of the pointer to the buffer). The buffer's size is the type's
# __sizeof__ minus its basic size.
_BUFFER_AT: dict[type, int] = {list: 24, dict: 32, set: 40, frozenset: 40, bytearray: 32}


def _buffers_readable() -> bool:
    """Whether this interpreter lays out lists, dicts, sets and bytearrays as the offsets above
    say: checked on objects whose contents are known, never assumed from the version alone."""
    if sys.implementation.name != "cpython" or sys.maxsize != 2**63 - 1:
        return False
    if (
        not (3, 11) <= sys.version_info[:2] <= (3, 13)
        or getattr(sys, "_is_gil_enabled", lambda: True)() is False
    ):
        return False
    try:
        probe_list = [1, 2, 3, 4, 5]
        if _ssize(id(probe_list) + 16) != 5 or _ssize(id(probe_list) + 32) < 5:
            return False
        items = _pointer(id(probe_list) + 24)
        if _pointer(items) != id(probe_list[0]) or _pointer(items + 8) != id(probe_list[1]):
            return False
        probe_dict = {"a": 1, "b": 2, "c": 3}
        if _ssize(id(probe_dict) + 16) != 3 or not _pointer(id(probe_dict) + 32):
            return False
        blob = bytearray(b"memprobe")
        return ctypes.string_at(_pointer(id(blob) + 32), 8) == b"memprobe"
    except (ValueError, OSError):
        return False


BUFFERS_READABLE = _buffers_readable()


@dataclass
class ObjectMap:
    """The dataset's memory blocks: ``starts[i]``..``ends[i]`` (bytes, sorted, not overlapping)
    belong to ``paths[path_ids[i]]``."""

    paths: list[str]
    starts: np.ndarray
    ends: np.ndarray
    path_ids: np.ndarray
    objects: int  # objects visited (a shared one once)
    seconds: float
    stopped: str | None = None  # why the walk ended before reaching everything, or None
    buffers_followed: bool = True  # the builtin containers' outside buffers were counted
    unreadable: list[str] = field(default_factory=list)  # paths whose attributes raised when read
    # Containers a path holds that an earlier path took: (path, the earlier one, how many), most first.
    also_held: list[tuple[str, str, int]] = field(default_factory=list)

    def bytes_per_path(self) -> np.ndarray:
        """Bytes each path's objects take."""
        sizes = (self.ends - self.starts).astype(np.float64)
        return np.bincount(self.path_ids, weights=sizes, minlength=len(self.paths))

    def save(self, path: Path) -> None:
        """The map in one ``.npz`` file (``memprobe.mark_dataset``'s, read by the recorder)."""
        np.savez(
            path,
            paths=np.array(self.paths, dtype=str),
            starts=self.starts,
            ends=self.ends,
            path_ids=self.path_ids,
            facts=np.array(json.dumps(self.facts())),
        )

    @classmethod
    def load(cls, path: Path) -> ObjectMap:
        """A map :meth:`save` wrote; ``ValueError`` (or ``OSError``) for anything else."""
        with np.load(path, allow_pickle=False) as f:
            starts, ends, ids = (f[k].astype(np.uint64) for k in ("starts", "ends", "path_ids"))
            paths = [str(p) for p in f["paths"]]
            facts = json.loads(str(f["facts"]))
        if not (len(starts) == len(ends) == len(ids)) or (len(ids) and int(ids.max()) >= len(paths)):
            raise ValueError(f"{path}: not an object map (its arrays disagree)")
        if len(starts) > 1 and not (np.all(starts[1:] >= ends[:-1]) and np.all(ends > starts)):
            raise ValueError(f"{path}: not an object map (its blocks are not sorted apart)")
        return cls(
            paths=paths,
            starts=starts,
            ends=ends,
            path_ids=ids.astype(np.uint32),
            objects=int(facts.get("objects") or 0),
            seconds=float(facts.get("seconds") or 0.0),
            stopped=facts.get("stopped"),
            buffers_followed=bool(facts.get("buffers_followed", True)),
            unreadable=list(facts.get("unreadable") or []),
            also_held=[
                (str(a["path"]), str(a["counted_to"]), int(a["objects"]))
                for a in facts.get("also_held") or []
            ],
        )

    def facts(self) -> dict[str, Any]:
        """The walk as summary.json keeps it."""
        return {
            "objects": self.objects,
            "blocks": len(self.starts),
            "seconds": round(self.seconds, 3),
            "stopped": self.stopped,
            "buffers_followed": self.buffers_followed,
            "unreadable": self.unreadable[:10],
            "also_held": [
                {"path": p, "counted_to": o, "objects": n} for p, o, n in self.also_held[:ALSO_HELD]
            ],
        }


class _Stop(Exception):
    """The walk's bound was reached."""


class _Walker:
    def __init__(self, max_objects: int, max_seconds: float) -> None:
        self.max_objects, self.max_seconds = max_objects, max_seconds
        self.t0 = time.monotonic()
        self.paths: list[str] = []
        self.starts = array.array("Q")
        self.sizes = array.array("Q")
        self.ids = array.array("I")
        # Containers the collector tracks (the only ones in a cycle), by the path that took them;
        # another path meeting one is counted (``also_held``): the first path's, said so.
        self.seen: dict[int, int] = {}
        self.also: dict[tuple[int, int], int] = {}
        self.reserved: set[int] = set()  # arrays whose buffer a named column counts instead
        self.named: set[int] = set()  # objects with a path of their own: never counted to another
        self.objects = 0
        self.unreadable: list[str] = []
        self.kinds: dict[type, tuple[int, int]] = {}

    def add(self, start: int, size: int, path: int) -> None:
        if size > 0 and start > 0:
            self.starts.append(start)
            self.sizes.append(size)
            self.ids.append(path)

    def tick(self) -> None:
        self.objects += 1
        if self.objects >= self.max_objects:
            raise _Stop(f"stopped at {self.objects:,} objects (the walk's bound)")
        if self.objects % _CHECK_EVERY == 0 and time.monotonic() - self.t0 > self.max_seconds:
            raise _Stop(
                f"stopped after {self.max_seconds:.0f} s at {self.objects:,} objects (the walk's bound)"
            )

    # -- one object's memory ---------------------------------------------------------------------

    def kind(self, t: type) -> tuple[int, int]:
        """(bytes before the object, how its size is read) of type ``t``, learned once per type."""
        flags = t.__flags__
        pre = (_GC_HEAD if flags & _HAVE_GC else 0) + (16 if flags & _MANAGED_DICT else 0)
        module = t.__module__ or ""
        if t in _BUFFER_AT:
            how = _OUTSIDE if BUFFERS_READABLE else _BASIC
        elif issubclass(t, np.ndarray):
            how = _ARRAY
        elif module.startswith(("pyarrow", "torch")):
            how = _FOREIGN
        elif flags & _MANAGED_DICT and BUFFERS_READABLE and sys.version_info[:2] == (3, 11):
            how = _VALUES
        else:
            how = _INLINE if module == "builtins" else _OBJECT
        self.kinds[t] = (pre, how)
        return pre, how

    def block(self, obj: Any, path: int) -> None:
        """The object's own memory block and the buffers it holds outside itself."""
        t = type(obj)
        pre, how = self.kinds.get(t) or self.kind(t)
        try:
            if how == _INLINE:
                inline = t.__sizeof__(obj)  # type: ignore[call-arg]
            elif how in (_OUTSIDE, _BASIC, _ARRAY):
                inline = t.__basicsize__
            else:
                inline = object.__sizeof__(obj)
        except Exception:  # noqa: BLE001  (a __sizeof__ that raises: its basic size)
            inline = t.__basicsize__
        self.starts.append(id(obj) - pre)
        self.sizes.append(-(-(pre + inline) // _ALIGN) * _ALIGN)
        self.ids.append(path)
        if how in (_INLINE, _OBJECT, _BASIC):
            return
        if how == _OUTSIDE:
            extra = t.__sizeof__(obj) - t.__basicsize__  # type: ignore[call-arg]
            if t is dict and _pointer(id(obj) + 40):  # a split dict: its values, the keys are the type's
                self.add(_pointer(id(obj) + 40), 8 * len(obj), path)
            elif extra > 0:
                self.add(_pointer(id(obj) + _BUFFER_AT[t]), extra, path)
        elif how == _VALUES:
            values = _pointer(id(obj) - 32)  # the instance's attribute values, without a dict
            if values:
                prefix = ctypes.c_uint8.from_address(values - 1).value
                self.add(values - prefix, prefix + 8 * max(len(gc.get_referents(obj)) - 1, 1), path)
        elif how == _ARRAY:
            self.array_data(obj, path)
        else:
            self.foreign_buffers(obj, path)

    def array_data(self, arr: np.ndarray, path: int, *, view: bool = False) -> None:
        """A numpy array's data: its own, or (``view``) the part of another's it shows."""
        if not view and id(_root(arr)) in self.reserved:
            return
        if arr.flags.owndata or (view and (arr.flags.c_contiguous or arr.flags.f_contiguous)):
            self.add(arr.__array_interface__["data"][0], arr.nbytes, path)

    def foreign_buffers(self, obj: Any, path: int) -> None:
        """Arrow's and torch's buffers, through their own APIs."""
        module = type(obj).__module__ or ""
        if module.startswith("pyarrow"):
            for buf in _arrow_buffers(obj):
                self.add(buf.address, buf.size, path)
        elif module.startswith("torch") and hasattr(obj, "untyped_storage"):
            try:
                storage = obj.untyped_storage()
                self.add(storage.data_ptr(), storage.nbytes(), path)
            except Exception:  # noqa: BLE001  (a tensor without storage: a meta or sparse one)
                pass

    # -- what an object holds ----------------------------------------------------------------------

    def contents(self, root: Any, path: int) -> None:
        """``root``'s block and everything it holds that no earlier path took, to ``path``.
        Long-winded on purpose: it runs once per object (millions), its lookups kept local."""
        stack = [root]
        named, seen, tracked, block, tick = self.named, self.seen, gc.is_tracked, self.block, self.tick
        plain, not_data = PLAIN, NOT_DATA
        while stack:
            obj = stack.pop()
            tick()
            block(obj, path)
            for child in self.children(obj):
                if child is None or child is True or child is False or id(child) in named:
                    continue
                if type(child) in plain:
                    tick()
                    block(child, path)
                    continue
                if isinstance(child, not_data):
                    continue
                if type(child) is tuple and all(type(x) in plain for x in child):
                    # A record of plain values ((path, class)): no cycle runs through it, so it
                    # needs no place in ``seen`` (~70 bytes each); held twice, it is met twice.
                    tick()
                    block(child, path)
                    for x in child:
                        if x is not None and x is not True and x is not False and id(x) not in named:
                            tick()
                            block(x, path)
                    continue
                if tracked(child):
                    owner = seen.get(id(child))
                    if owner is not None:
                        if owner != path:
                            self.also[path, owner] = self.also.get((path, owner), 0) + 1
                        continue
                    seen[id(child)] = path
                stack.append(child)

    def children(self, obj: Any) -> Iterable[Any]:
        t = type(obj)
        if t in (list, tuple, set, frozenset):
            return obj
        if t is dict:
            return chain(obj.keys(), obj.values())
        if isinstance(obj, np.ndarray):
            if id(_root(obj)) in self.reserved:
                return ()  # a view of a frame's block (the block's own values): its columns count it
            base = [obj.base] if obj.base is not None else []
            if obj.dtype.hasobject:
                return [*base, *obj.ravel(order="K")]
            return base
        if isinstance(obj, PLAIN):
            return ()
        try:
            return gc.get_referents(obj)
        except Exception:  # noqa: BLE001  (an extension's traverse that fails: its block alone)
            return ()


def _root(arr: np.ndarray) -> np.ndarray:
    """The array whose memory ``arr`` shows (itself, or the last of its bases)."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def _arrow_buffers(obj: Any) -> list[Any]:
    """Every buffer of a pyarrow Table, RecordBatch, ChunkedArray, Array or Buffer."""
    try:
        if hasattr(obj, "address") and hasattr(obj, "size"):  # a Buffer
            return [obj]
        if hasattr(obj, "columns") and hasattr(obj, "num_rows"):  # a Table or RecordBatch
            return [b for column in obj.columns for b in _arrow_buffers(column)]
        if hasattr(obj, "chunks"):
            return [b for chunk in obj.chunks for b in _arrow_buffers(chunk)]
        if hasattr(obj, "buffers"):
            return [b for b in obj.buffers() if b is not None]
    except Exception:  # noqa: BLE001  (an Arrow object this version lays out otherwise: not counted)
        pass
    return []


def walk(
    dataset: Any, name: str = "dataset", *, max_objects: int = MAX_OBJECTS, max_seconds: float = MAX_SECONDS
) -> ObjectMap:
    """The map of ``dataset``'s objects, by the paths a user would type from ``name``."""
    w = _Walker(max_objects, max_seconds)
    named: deque[tuple[Any, str, int]] = deque([(dataset, name, 0)])
    order: list[tuple[Any, int]] = []
    stopped = None
    try:
        while named:
            obj, path, depth = named.popleft()
            if id(obj) in w.named or obj is None or isinstance(obj, NOT_DATA):
                continue
            w.named.add(id(obj))
            w.paths.append(path)
            order.append((obj, len(w.paths) - 1))
            if depth < NAMED_DEPTH:
                try:
                    children = named_children(obj, w.reserved, w.named)
                except Exception:  # noqa: BLE001  (a dataset's attribute that raises: its contents counted unnamed)
                    w.unreadable.append(path)
                    children = []
                named.extend((child, path + label, depth + 1) for label, child in children)
        for obj, path_id in order:
            if isinstance(obj, Column):
                _column_contents(w, obj.values, path_id)
            else:
                w.contents(obj, path_id)
    except _Stop as stop:
        stopped = str(stop)
    return _finish(w, stopped)


def _column_contents(w: _Walker, values: Any, path: int) -> None:
    if isinstance(values, np.ndarray):
        w.array_data(values, path, view=True)
        if values.dtype.hasobject:
            for x in values:
                if x is None or isinstance(x, NOT_DATA) or id(x) in w.named:
                    continue
                if type(x) in PLAIN:
                    w.tick()
                    w.block(x, path)
                elif not gc.is_tracked(x) or id(x) not in w.seen:
                    w.seen[id(x)] = path
                    w.contents(x, path)
    else:
        w.contents(values, path)


def _finish(w: _Walker, stopped: str | None) -> ObjectMap:
    """Arrays sorted by address; a block met twice (a plain value held in two places) kept for
    the first path; overlaps (a view inside its base) cut so no byte is counted twice. The
    walk's sets are let go first: this is where its memory peaks (docs/performance.md)."""
    also = sorted(((w.paths[p], w.paths[o], n) for (p, o), n in w.also.items()), key=lambda x: -x[2])
    w.seen.clear()
    w.reserved.clear()
    starts = np.frombuffer(w.starts, dtype=np.uint64) if len(w.starts) else np.zeros(0, np.uint64)
    order = np.argsort(starts, kind="stable")  # the first met of each address first among equals
    starts = starts[order]
    first = np.ones(len(starts), dtype=bool)
    first[1:] = starts[1:] != starts[:-1]
    order = order[first]
    starts = starts[first]
    del first
    sizes = np.frombuffer(w.sizes, dtype=np.uint64) if len(w.sizes) else np.zeros(0, np.uint64)
    ends = starts + sizes[order]
    ids = (np.frombuffer(w.ids, dtype=np.uint32) if len(w.ids) else np.zeros(0, np.uint32))[order]
    del order, sizes
    w.starts, w.sizes, w.ids = array.array("Q"), array.array("Q"), array.array("I")
    if len(starts) > 1:
        reach = np.maximum.accumulate(ends)
        np.maximum(starts[1:], reach[:-1], out=starts[1:])
        del reach
        keep = ends > starts
        if not keep.all():
            starts, ends, ids = starts[keep], ends[keep], ids[keep]
    return ObjectMap(
        paths=w.paths,
        starts=starts,
        ends=ends,
        path_ids=ids,
        objects=w.objects,
        seconds=time.monotonic() - w.t0,
        stopped=stopped,
        buffers_followed=BUFFERS_READABLE,
        unreadable=w.unreadable,
        also_held=also,
    )
