"""The fixes for copy-on-access applied to a user's own dataset, for ``memprobe cure``.

:func:`convert` changes a built dataset in place: each large list or tuple attribute (at least
:data:`MIN_ELEMENTS` elements, every one picklable) becomes a :class:`memprobe.SharedList`, and a
pandas DataFrame's (or Series') object columns that hold strings become Arrow-backed strings
(``string[pyarrow]``). What it cannot convert, it names with why: a large dict (looked up by
key, not position), a set, a numpy array of Python objects, an object column that holds
something other than strings, a record that cannot be pickled, a large container inside an
object of the user's own class (whose code memprobe does not know). Datasets the dataset wraps
(``torch.utils.data.Subset.dataset``, ...) are converted too.

:func:`converted` is a module-level factory that the run's process imports by name
(``memprobe.profile("memprobe.run.cure:converted", kwargs=...)``), under every start method: it
builds the user's dataset with its factory, converts it, and writes what it converted and what
it refused to a JSON file for the command to print.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memprobe.core import cures
from memprobe.core.errors import FactoryError, MemprobeError
from memprobe.core.rounds import interleaved
from memprobe.run.factory import call_factory

MIN_ELEMENTS = 1_000  # a container with fewer elements is left as it is: too small to matter
MAX_DEPTH = 3  # datasets wrapping datasets, followed this deep
ARROW_STRINGS = "string[pyarrow]"
# Types whose objects hold no Python object per element (or are not data at all): not looked into.
FLAT_MODULES = ("numpy", "pandas", "pyarrow", "torch", "datasets", "memprobe", "polars", "h5py", "zarr")


NOTHING_CONVERTED = "memprobe cure: nothing in this dataset to convert"


class NothingConverted(MemprobeError):
    """Raised by :func:`converted` when it converted nothing (its run stops before the workers).
    memprobe's own error, not the user's factory's: ``call_factory`` passes it on as it is."""


@dataclass(frozen=True)
class Converted:
    """One attribute converted: where (``self.records``), what it was, what it is now, and the
    one-line change that does the same in the user's code."""

    attribute: str
    was: str
    now: str
    change: str


@dataclass(frozen=True)
class Refused:
    """One attribute memprobe did not convert: where, what it is, and why."""

    attribute: str
    was: str
    why: str


@dataclass
class Conversion:
    """What :func:`convert` did to a dataset."""

    converted: list[Converted] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "converted": [asdict(c) for c in self.converted],
            "refused": [asdict(r) for r in self.refused],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Conversion:
        return cls(
            [Converted(**c) for c in doc.get("converted", [])], [Refused(**r) for r in doc.get("refused", [])]
        )


def shared_list_change(attribute: str) -> str:
    """The one-line change that puts ``attribute`` in a SharedList: the advice's own line
    (memprobe/core/cures.py, "one serialized buffer") with the attribute's name."""
    line = named_cure(cures.COPY_ON_ACCESS, "one serialized buffer").change
    return line.replace("self.records", attribute)


def named_cure(cause: str, name: str) -> cures.Cure:
    """The fix called ``name`` in the advice for ``cause`` (memprobe/core/cures.py)."""
    return next(c for c in cures.ADVICE[cause].cures if c.name == name)


def convert(dataset: Any, *, min_elements: int = MIN_ELEMENTS) -> tuple[Any, Conversion]:
    """``dataset`` with its large Python containers converted (in place where it is an object;
    a dataset that is itself a list or tuple is returned as a SharedList), and what was done."""
    done = Conversion()
    if isinstance(dataset, (list, tuple)):
        return _container("dataset", dataset, min_elements, done, dataset), done
    _attributes(dataset, "self", min_elements, done, depth=0)
    return dataset, done


def _attributes(obj: Any, path: str, min_elements: int, done: Conversion, depth: int) -> None:
    try:
        items = list(vars(obj).items())
    except TypeError:
        return  # no __dict__ (__slots__, a builtin): nothing memprobe can set
    for name, value in items:
        where = f"{path}.{name}"
        new = _container(where, value, min_elements, done, None)
        if new is not None and new is not value:
            try:
                setattr(obj, name, new)
            except Exception as exc:  # noqa: BLE001  (any refusal to set it: a frozen dataclass, a property, __setattr__)
                done.converted.pop()
                done.refused.append(
                    Refused(where, _kind(value), f"cannot be set ({type(exc).__name__}: {exc})")
                )
            continue
        if new is None and depth < MAX_DEPTH and _is_dataset(value):
            _attributes(value, where, min_elements, done, depth + 1)
        elif new is None and _is_own_class(value):
            _look_inside(value, where, min_elements, done)


def _container(
    where: str, value: Any, min_elements: int, done: Conversion, default: Any, *, dry: bool = False
) -> Any:
    """``value`` converted (and recorded in ``done``), ``value`` itself where it is refused or
    too small, or ``default`` where it is no container memprobe knows. ``dry``: only record what
    would be done to a list (nothing pickled)."""
    from memprobe.datasets.shared_list import SharedList

    if isinstance(value, SharedList):
        return value
    if isinstance(value, (list, tuple)):
        if len(value) < min_elements:
            return value
        if dry:
            done.converted.append(Converted(where, _kind(value), "", shared_list_change(where)))
            return value
        try:
            shared = SharedList(value)
        except TypeError as exc:  # names the record that cannot be pickled
            done.refused.append(Refused(where, _kind(value), str(exc)))
            return value
        now = f"memprobe.SharedList ({shared.nbytes / 1e6:,.1f} MB pickled)"
        done.converted.append(Converted(where, _kind(value), now, shared_list_change(where)))
        return shared
    if isinstance(value, dict) and len(value) >= min_elements:
        done.refused.append(
            Refused(
                where,
                _kind(value),
                "a dict is looked up by key and a memprobe.SharedList by position, so memprobe "
                "cannot put one in place of the other; hold the values in a SharedList and find a "
                "key's position in a sorted numpy array of the keys (numpy.searchsorted): "
                f"keys = numpy.array(sorted({where})); {where} = memprobe.SharedList({where}[k] for k in keys)",
            )
        )
        return value
    if isinstance(value, (set, frozenset)) and len(value) >= min_elements:
        done.refused.append(
            Refused(where, _kind(value), "a set is not read by position: hold it sorted in a numpy array")
        )
        return value
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        if value.dtype == object and value.size >= min_elements:
            done.refused.append(
                Refused(
                    where,
                    _kind(value),
                    "a numpy array of Python objects is indexed in ways a SharedList is not (slices, "
                    f"masks, several axes); where it is read one element at a time: {where} = "
                    f"memprobe.SharedList({where}.tolist())",
                )
            )
        return value
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, (pandas.DataFrame, pandas.Series)):
        return _frame(where, value, min_elements, done, pandas, dry=dry)
    return default


def _frame(
    where: str, frame: Any, min_elements: int, done: Conversion, pandas: Any, *, dry: bool = False
) -> Any:
    """The frame (or Series) with its object columns of strings as Arrow-backed strings (``dry``:
    only recorded, the frame returned as it is)."""
    if len(frame) < min_elements:
        return frame
    series = isinstance(frame, pandas.Series)
    columns = {frame.name: frame} if series else {name: frame[name] for name in frame.columns}
    strings: list[tuple[Any, str]] = []
    others: list[tuple[Any, str]] = []
    for name, column in columns.items():
        if column.dtype != object:
            continue
        inferred = pandas.api.types.infer_dtype(column, skipna=True)
        (strings if inferred in ("string", "empty") else others).append((name, inferred))
    for name, inferred in others:
        done.refused.append(
            Refused(
                f"{where}[{name!r}]" if not series else where,
                f"object column of {inferred} values",
                "not strings, so no Arrow string column holds them: hold the column in a "
                f"memprobe.SharedList ({where}[{name!r}].tolist()) or as numpy arrays",
            )
        )
    if not strings:
        return frame
    try:
        import pyarrow  # noqa: F401  (string[pyarrow] needs it)
    except ImportError:
        done.refused.append(
            Refused(where, _kind(frame), "its object columns hold strings, but pyarrow is not installed here")
        )
        return frame
    if series:
        new = frame if dry else frame.astype(ARROW_STRINGS)
        change = f'{where} = {where}.astype("{ARROW_STRINGS}")'
    else:
        dtypes = {name: ARROW_STRINGS for name, _ in strings}
        new = frame if dry else frame.astype(dtypes)
        change = f"{where} = {where}.astype({dtypes!r})"
    names = ", ".join(repr(name) for name, _ in strings)
    done.converted.append(
        Converted(where, _kind(frame), f"object columns {names} as Arrow strings ({ARROW_STRINGS})", change)
    )
    return new


def _look_inside(obj: Any, where: str, min_elements: int, done: Conversion) -> None:
    """Name the large containers held by an object of the user's own class (not converted)."""
    try:
        items = list(vars(obj).items())
    except TypeError:
        return
    for name, value in items:
        probe = Conversion()
        _container(f"{where}.{name}", value, min_elements, probe, None, dry=True)
        found: list[tuple[str, str, str]] = [(c.attribute, c.was, c.change) for c in probe.converted]
        found += [(r.attribute, r.was, r.why) for r in probe.refused]
        for attribute, was, how in found:
            done.refused.append(
                Refused(
                    attribute,
                    f"{was}, inside a {type(obj).__qualname__}",
                    f"memprobe converts the dataset's own attributes (and the datasets it wraps), not "
                    f"those of a {type(obj).__qualname__}, whose code it does not know; to apply it "
                    f"yourself: {how}",
                )
            )


def _is_dataset(value: Any) -> bool:
    torch_data = sys.modules.get("torch.utils.data")
    return torch_data is not None and isinstance(value, (torch_data.Dataset, torch_data.IterableDataset))


def _is_own_class(value: Any) -> bool:
    """An instance of a class defined outside the standard library and the array libraries."""
    cls = type(value)
    module = (cls.__module__ or "").split(".")[0]
    if module in ("builtins", *FLAT_MODULES) or module in sys.stdlib_module_names:
        return False
    return hasattr(value, "__dict__") and not isinstance(value, type)


def _kind(value: Any) -> str:
    """'list of 160,000 dict', 'DataFrame of 400,000 rows'."""
    name = type(value).__name__
    if isinstance(value, (list, tuple)):
        first = f" {type(value[0]).__name__}" if len(value) else ""
        return f"{name} of {len(value):,}{first}"
    if isinstance(value, dict):
        return f"dict of {len(value):,} entries"
    if hasattr(value, "shape") and name in ("DataFrame", "Series"):
        return f"{name} of {len(value):,} rows"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{name} {tuple(value.shape)} of {value.dtype}"
    return name


# -- the factories the run's process imports by name ---------------------------------------------


def converted(
    factory: str, kwargs: dict | None = None, report: str = "", min_elements: int = MIN_ELEMENTS
) -> Any:
    """The user's dataset, ``factory(**kwargs)``, converted by :func:`convert`; what was done is
    written as JSON to ``report``."""
    dataset, done = convert(call_factory(factory, kwargs or {}), min_elements=min_elements)
    _write(report, done)
    if not done.converted:
        # Nothing to measure: the run would be the dataset as it is. It stops here, before any
        # worker starts; the command reads the report and says so.
        raise NothingConverted(NOTHING_CONVERTED)
    return dataset


def _write(report: str, done: Conversion) -> None:
    if report:
        Path(report).write_text(json.dumps(done.to_json(), indent=1))


# -- the variants, run side by side --------------------------------------------------------------

AS_IS, CONVERTED, FREEZE, THREADS, SPAWN_VARIANT = "as-is", "converted", "gc-freeze", "threads", "spawn"
SPAWN_CHANGE = (
    'DataLoader(dataset, num_workers=N, multiprocessing_context="spawn")  # each worker gets a copy'
)


@dataclass(frozen=True)
class Variant:
    """One way to load the dataset: its name, label, mode, whether gc.freeze() runs before the
    workers start, and whether the dataset is converted (:func:`converted`)."""

    key: str
    label: str
    mode: str
    gc_freeze: bool = False
    convert: bool = False

    def change(self) -> str:
        """The one-line change that applies this fix ('' for the dataset as it is; the converted
        variant's lines are the conversion's own)."""
        if self.key == FREEZE:
            return named_cure(cures.COPY_ON_ACCESS, "gc.freeze() before the workers start").change
        if self.key == THREADS:
            return named_cure(cures.COPY_ON_ACCESS, "worker threads").change
        if self.key == SPAWN_VARIANT:
            return SPAWN_CHANGE
        return ""


VARIANTS = (
    Variant(AS_IS, "as is (fork)", "fork"),
    Variant(CONVERTED, "SharedList / Arrow (fork)", "fork", convert=True),
    Variant(FREEZE, "gc.freeze() (fork)", "fork", gc_freeze=True),
    Variant(THREADS, "threads", "thread"),
    Variant(SPAWN_VARIANT, "spawn (as is)", "spawn"),
)


@dataclass
class Outcome:
    """A variant's runs (one per round) and, for the converted variant, what was converted."""

    variant: Variant
    results: list[Any] = field(default_factory=list)  # memprobe.ProfileResult, one per round
    conversion: Conversion | None = None
    skipped: str = ""  # why the variant was not run (nothing to convert)


def run_variants(
    factory: str,
    kwargs: dict,
    out: Path,
    *,
    workers: int = 2,
    items: int | None = None,
    batch_size: int = 64,
    rounds: int = 1,
    min_elements: int = MIN_ELEMENTS,
    timeout_s: float = 300.0,
    growth_threshold_mb: float = 50.0,
    only: tuple[str, ...] | None = None,
    log: Any = None,
) -> list[Outcome]:
    """Each variant (``only`` those keys, when given) ``rounds`` times, interleaved (round 1:
    every variant in order, then round 2, ...), each in its own results folder under ``out``.
    The first run is the check that the factory builds a dataset: where it cannot (it raises,
    ends the run's process, returns no dataset or does not return within ``timeout_s``), the
    :class:`FactoryError` naming it is raised then, before any other variant runs; later it fails
    only that run. A converted variant with nothing to convert is run once, stopped before its
    workers, and then skipped."""
    from memprobe.run.api import profile

    outcomes = [Outcome(v) for v in VARIANTS if only is None or v.key in only]
    first = True
    for r, o in interleaved(outcomes, rounds):
        if o.skipped:
            continue
        folder = out / f"r{r}-{o.variant.key}"
        ref, args = factory, kwargs
        if o.variant.convert:
            report = out / f"r{r}-{o.variant.key}-conversion.json"
            ref = f"{__name__}:converted"
            args = {
                "factory": factory,
                "kwargs": kwargs,
                "report": str(report),
                "min_elements": min_elements,
            }
        if log:
            log(f"round {r}/{rounds}: {o.variant.label} ...")
        try:
            result = profile(
                ref,
                kwargs=args,
                mode=o.variant.mode,
                workers=workers,
                items=items,
                batch_size=batch_size,
                gc_freeze=o.variant.gc_freeze,
                timeout_s=timeout_s,
                growth_threshold_mb=growth_threshold_mb,
                out=folder,
                attribute=o.variant.mode == "fork",  # which attribute each fix moved
            )
        except FactoryError as exc:
            if first or exc.result is None:
                bound = " (cure's --timeout)" if _timed_out(exc) else ""
                raise FactoryError(f"{exc}{bound}; no other variant was run", exc.result) from None
            result = exc.result  # built before, not this time: this run failed, the others stand
        if o.variant.convert and report.exists():
            o.conversion = Conversion.from_json(json.loads(report.read_text()))
            if not o.conversion.converted:
                o.skipped = "nothing converted"
                continue
        first = False
        o.results.append(result)
    return outcomes


def _timed_out(exc: FactoryError) -> bool:
    result = exc.result
    return result is not None and getattr(getattr(result, "summary", None), "status", None) == "timeout"
