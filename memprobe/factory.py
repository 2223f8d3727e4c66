"""Import a user's dataset factory by name ("module:callable") and check what it returns."""
from __future__ import annotations

import importlib
from typing import Any

from memprobe.errors import UsageError


def load_factory(ref: str) -> Any:
    """The callable named by ``ref`` ("pkg.module:function" or "pkg.module:Class.method")."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise UsageError(f"dataset factory {ref!r}: expected 'module.path:callable'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"dataset factory {ref!r}: cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"dataset factory {ref!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise UsageError(f"dataset factory {ref!r}: {type(obj).__name__} object is not callable")
    return obj


def check_dataset(ref: str, dataset: Any) -> Any:
    """``dataset`` if it is usable by a DataLoader (map-style or iterable), else a clear error."""
    from torch.utils.data import IterableDataset

    map_style = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    if isinstance(dataset, IterableDataset) or map_style:
        return dataset
    raise UsageError(f"dataset factory {ref!r} returned {type(dataset).__module__}.{type(dataset).__name__}, "
                     "which is not a dataset: return a map-style dataset (with __getitem__ and __len__) "
                     "or a torch.utils.data.IterableDataset")


def call_factory(ref: str, kwargs: dict) -> Any:
    """Import ``ref``, call it with ``kwargs`` and check the result is a dataset."""
    return check_dataset(ref, load_factory(ref)(**kwargs))
