"""Import a user's dataset factory by name ("module:callable"), call it, and check what it returns.

The user's code runs here, so it runs only in processes memprobe starts and can end: the run's
process (:mod:`memprobe.run.child`, within the run's timeout) and the import check
(:mod:`memprobe.run.import_check`, before a command writes anything); never in the command's own
process or a ``profile()`` caller's, where an import that never returns would hang memprobe.

Whatever the user's code does - raise (a ``KeyboardInterrupt`` too), call ``sys.exit``, have a
SyntaxError, return something that is not a dataset - becomes one :class:`FactoryError` naming
the reference, what was being done (importing the module, calling the factory) and where in the
user's own code it happened (their innermost frames: it is their code). A reference is checked
as text first (:func:`parse_ref`), without importing anything. What cannot be caught here (the
process ended by ``os._exit`` or a signal, or an import that never returns) the process that
started this one names, from the phases :func:`tell_phases` reports.
"""

from __future__ import annotations

import importlib
import keyword
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from memprobe.core.errors import FactoryError, MemprobeError

EXPECTED = "expected 'module.path:callable', e.g. 'mypkg.data:build_dataset'"
IMPORT, CALL, BUILT = "import", "call", "built"  # the phases tell_phases reports
FRAMES = 3  # the user's innermost frames named in a message
MESSAGE_CHARS = 500  # an exception's own message, cut to this in the one line

_phases: Callable[[str, str], None] | None = None


def tell_phases(callback: Callable[[str, str], None] | None) -> None:
    """Have ``callback(ref, phase)`` called as a factory's module is imported (``import``), the
    factory called (``call``) and its dataset checked (``built``): the run's process and the
    import check tell the process that started them, which can then say what did not return or
    ended the process."""
    global _phases
    _phases = callback


def _phase(ref: str, phase: str) -> None:
    if _phases is not None:
        _phases(ref, phase)


def doing(ref: str, phase: str) -> str:
    """What the user's code was doing in ``phase``, in words: "importing module 'pkg.data'",
    "calling it"."""
    if phase == IMPORT:
        return f"importing module {ref.partition(':')[0]!r}"
    return "calling it" if phase == CALL else "checking what it returned"


def parse_ref(ref: str) -> tuple[str, str]:
    """(module, attribute path) of "pkg.module:function" or "pkg.module:Class.method", checked
    as text (nothing imported): a :class:`FactoryError` saying what is wrong with it."""
    why = ref_problem(ref)
    if why:
        raise FactoryError(f"dataset factory {ref!r}: {why}; {EXPECTED}")
    module, _, attr = ref.partition(":")
    return module, attr


def ref_problem(ref: str) -> str | None:
    """What is wrong with ``ref`` as the name of a factory, in words (None: nothing)."""
    module, colon, attr = ref.partition(":")
    if not colon:
        return "no ':' between the module and the callable"
    if not module:
        return "no module before ':'"
    if not attr:
        return "no callable after ':'"
    if not _dotted(module):
        relative = (
            " (a relative name: there is no package for it to be relative to; name the module as "
            "it is imported from the current folder)"
        )
        return f"{module!r} is not the name of a module" + (relative if module.startswith(".") else "")
    if not _dotted(attr):
        return f"{attr!r} is not the name of a callable in it"
    return None


def _dotted(name: str) -> bool:
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in name.split("."))


def load_factory(ref: str) -> Any:
    """The callable named by ``ref`` ("pkg.module:function" or "pkg.module:Class.method"),
    imported here: only in a process memprobe can end (see the module's docstring)."""
    module_name, attr = parse_ref(ref)
    _phase(ref, IMPORT)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise FactoryError(
                f"dataset factory {ref!r}: cannot import module {module_name!r}: {exc} (looked for in "
                f"the current folder, {os.getcwd()}, and on the Python path)"
            ) from None
        raise FactoryError(failed(ref, f"importing module {module_name!r}", exc)) from exc
    except BaseException as exc:  # whatever the user's module does: one line naming it
        raise FactoryError(failed(ref, f"importing module {module_name!r}", exc)) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise FactoryError(
                f"dataset factory {ref!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
        except BaseException as exc:  # a module's or class's own __getattr__
            raise FactoryError(failed(ref, f"looking up {attr!r}", exc)) from exc
    if not callable(obj):
        raise FactoryError(f"dataset factory {ref!r}: {type(obj).__name__} object is not callable")
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
        raise FactoryError(
            f"dataset factory {ref!r} returned {kind}, which is not a dataset: "
            "dataset[i] must return item i; wrap it in a torch.utils.data.Dataset "
            "whose __getitem__(i) returns item i (for a DataFrame: frame.iloc[i])"
        )
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        return dataset
    raise FactoryError(
        f"dataset factory {ref!r} returned {kind}, which is not a dataset: return a map-style "
        "dataset (with __getitem__ and __len__) or a torch.utils.data.IterableDataset"
    )


def call_factory(ref: str, kwargs: dict) -> Any:
    """Import ``ref``, call it with ``kwargs`` and check the result is a dataset."""
    factory = load_factory(ref)
    _phase(ref, CALL)
    try:
        dataset = factory(**kwargs)
    except MemprobeError:
        # memprobe's own, passed through a factory of its own (cure's `converted` calls the
        # user's factory): already in words, naming the user's factory.
        raise
    except BaseException as exc:  # the user's code: one line naming it; the traceback stays chained
        # Name the factory: the run's error line is all a user sees of a failed matrix cell.
        raise FactoryError(failed(ref, "", exc)) from exc
    dataset = check_dataset(ref, dataset)
    _phase(ref, BUILT)
    return dataset


def failed(ref: str, what: str, exc: BaseException) -> str:
    """ "dataset factory 'pkg.data:build' raised ValueError: no such split; at data.py:12 in
    build": what the user's code raised (``what``: "importing module 'pkg.data'", or '' for the
    call itself), cut to one line's worth, and where in their code."""
    head = f"dataset factory {ref!r}" + (f": {what}" if what else "")
    if isinstance(exc, SystemExit):
        text = f"{head} called sys.exit({exc.code!r})"
    else:
        message = str(exc)
        if len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS] + "..."
        text = f"{head} raised {type(exc).__name__}" + (f": {message}" if message else "")
    where = your_frames(exc, ref.partition(":")[0])
    return f"{text}; {where}" if where else text


def your_frames(exc: BaseException, module_name: str) -> str:
    """The innermost frames of ``exc``'s traceback that are the user's code (not memprobe's, the
    standard library's or an installed library's, unless it is the user's own installed
    package), in words: "at data.py:12 in _read (frame = pd.read_parquet(path)), called from
    data.py:30 in build"; '' where none is."""
    roots = _module_roots(module_name)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _yours(f.filename, roots)]
    if not frames:
        return ""
    last = frames[-FRAMES:][::-1]
    first = last[0]
    code = f" ({first.line.strip()})" if first.line and first.line.strip() else ""
    words = [f"at {_shown_path(first.filename)}:{first.lineno} in {first.name}{code}"]
    words += [f"{_shown_path(f.filename)}:{f.lineno} in {f.name}" for f in last[1:]]
    return ", called from ".join(words)


def _module_roots(module_name: str) -> list[str]:
    """Where the user's module lives (its package's folder, or its file), found without
    importing it: frames there are theirs even in an installed package."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module_name.split(".")[0])
    except BaseException:  # noqa: BLE001  (a finder of the user's own: then no root is known)
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [os.path.realpath(p) for p in spec.submodule_search_locations]
    return [os.path.realpath(spec.origin)] if spec.origin and os.path.isabs(spec.origin) else []


def _library_roots() -> list[str]:
    import sysconfig  # only for a message: not in every run's process (see run/scenario.py's _factory)

    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # memprobe itself
    return [os.path.realpath(r) for r in roots if r]


def _yours(filename: str, roots: list[str]) -> bool:
    if not filename or filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    path = os.path.realpath(filename)
    if any(_under(path, r) for r in roots):
        return True
    return not any(_under(path, r) for r in _library_roots())


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _shown_path(filename: str) -> str:
    """A path relative to the current folder where it is inside it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
