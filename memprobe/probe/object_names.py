"""The paths a user types for a dataset's parts: which children of an object get names of their
own in the object map (:mod:`memprobe.probe.object_map`), and under which label.

* an object's attributes (its ``__dict__`` and ``__slots__``, read without calling its
  ``__getattr__`` or ``__getattribute__``): ``.name``; not those of a library's objects
  (:data:`LIBRARIES`: numpy's, pandas', Arrow's, memprobe's SharedList), which are its workings;
* a dict of at most :data:`NAMED_KEYS` str or int keys: ``['key']``;
* a pandas DataFrame's columns: ``['column']`` (:class:`Column`: its values as the frame holds
  them);
* a list or tuple of at most :data:`NAMED_ITEMS` items, one of them not a plain value (the
  datasets a ``ConcatDataset`` wraps): ``[i]``.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

NAMED_KEYS = 64  # a dict with at most this many str/int keys is named key by key
NAMED_ITEMS = 16  # a list/tuple with at most this many items (not all plain values) is named by index
NAMED_ATTRIBUTES = 256  # attributes of one object named, at most
PLAIN = (str, bytes, int, float, complex, bool, type(None))
# Libraries whose objects' attributes are their own workings, not the user's names: what such an
# object holds is counted to the path that reaches it (a DataFrame's columns are named all the same;
# torch's dataset wrappers, Subset and ConcatDataset, are named through).
LIBRARIES = frozenset({"memprobe", "numpy", "pandas", "pyarrow", "polars", "datasets", "h5py", "zarr", "PIL"})
NOT_DATA = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
    types.GeneratorType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


def attributes(obj: Any) -> list[tuple[str, Any]]:
    """An object's attributes from its ``__dict__`` and ``__slots__``, read without calling
    its ``__getattr__``."""
    out: list[tuple[str, Any]] = []
    try:
        d = object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001  (no __dict__, or one that raises: its slots only)
        d = None
    if type(d) is dict:
        out.extend((k, v) for k, v in d.items() if isinstance(k, str))
    for klass in type(obj).__mro__:
        for name in (
            klass.__dict__.get("__slots__", ())
            if isinstance(klass.__dict__.get("__slots__"), (tuple, list))
            else ()
        ):
            if name in ("__dict__", "__weakref__"):
                continue
            try:
                out.append((name, object.__getattribute__(obj, name)))
            except Exception:  # noqa: BLE001  (an empty slot)
                continue
    return out[:NAMED_ATTRIBUTES]


def is_frame(obj: Any) -> bool:
    t = type(obj)
    return t.__name__ == "DataFrame" and (t.__module__ or "").startswith("pandas")


def label(key: Any) -> str:
    text = repr(key)
    return f"[{text if len(text) <= 60 else text[:57] + '...'}]"


def named_children(obj: Any, reserved: set[int], named: set[int]) -> list[tuple[str, Any]]:
    """The children of a named object that get names of their own."""
    t = type(obj)
    if isinstance(obj, (PLAIN, NOT_DATA, Column)):
        return []
    if t is dict:
        if len(obj) <= NAMED_KEYS and all(type(k) in (str, int) for k in obj):
            return [(label(k), v) for k, v in obj.items()]
        return []
    if t in (list, tuple):
        if len(obj) <= NAMED_ITEMS and any(not isinstance(x, PLAIN) for x in obj):
            return [(f"[{i}]", x) for i, x in enumerate(obj)]
        return []
    if is_frame(obj):
        return columns(obj, reserved, named)
    if isinstance(obj, np.ndarray) or (t.__module__ or "").partition(".")[0] in LIBRARIES:
        return []
    return [(f".{name}", value) for name, value in attributes(obj)]


class Column:
    """A DataFrame column's values as its frame holds them (a view of its block, or its own)."""

    def __init__(self, values: Any) -> None:
        self.values = values


def columns(frame: Any, reserved: set[int], named: set[int]) -> list[tuple[str, Any]]:
    out = []
    for name in list(frame.columns)[:NAMED_ATTRIBUTES]:
        try:
            values = frame[name]._values
        except Exception:  # noqa: BLE001  (a duplicated or odd column name: counted with the frame)
            continue
        if isinstance(values, np.ndarray):
            base = values
            while isinstance(base.base, np.ndarray):
                base = base.base
            if base is not values:
                reserved.add(id(base))  # the frame's block: each column counts its own part
        else:
            named.add(id(values))  # an extension array (Arrow strings): the column's, not the frame's
        out.append((label(name), Column(values)))
    return out
