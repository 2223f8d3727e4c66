"""Import a user's dataset factory by name ("module:callable") and check what it returns."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

from memprobe.core.errors import UsageError


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
            raise UsageError(
                f"dataset factory {ref!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise UsageError(f"dataset factory {ref!r}: {type(obj).__name__} object is not callable")
    return obj


def check_dataset(ref: str, dataset: Any) -> Any:
    """``dataset`` if it is usable by a DataLoader (map-style or iterable), else a clear error."""
    # torch only here: the supervisor side (profile(), `memprobe run`) imports this module and
    # stays free of torch; the run's own process, which calls this, has imported it already.
    from torch.utils.data import Dataset, IterableDataset

    if isinstance(dataset, (Dataset, IterableDataset)):
        return dataset
    kind = f"{type(dataset).__module__}.{type(dataset).__name__}"
    # These have __getitem__ and __len__ but dataset[i] is not item i: a DataFrame looks up a
    # column, a dict a key. The loader would fail later in a worker with a bare KeyError.
    pandas = sys.modules.get("pandas")  # a DataFrame exists only if pandas was imported
    if isinstance(dataset, (Mapping, str, bytes)) or (
        pandas is not None and isinstance(dataset, pandas.DataFrame)
    ):
        raise UsageError(
            f"dataset factory {ref!r} returned {kind}, which is not a dataset: "
            "dataset[i] must return item i; wrap it in a torch.utils.data.Dataset "
            "whose __getitem__(i) returns item i (for a DataFrame: frame.iloc[i])"
        )
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        return dataset
    raise UsageError(
        f"dataset factory {ref!r} returned {kind}, which is not a dataset: return a map-style "
        "dataset (with __getitem__ and __len__) or a torch.utils.data.IterableDataset"
    )


def call_factory(ref: str, kwargs: dict) -> Any:
    """Import ``ref``, call it with ``kwargs`` and check the result is a dataset."""
    factory = load_factory(ref)
    try:
        dataset = factory(**kwargs)
    except Exception as exc:
        # Name the factory: the run's error line is all a user sees of a failed matrix cell.
        # The original traceback stays chained (the run's meta.json keeps it).
        raise UsageError(f"dataset factory {ref!r} raised {type(exc).__name__}: {exc}") from exc
    return check_dataset(ref, dataset)
