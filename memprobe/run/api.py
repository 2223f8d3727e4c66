"""Profile a dataset from Python (and from pytest): ``memprobe.profile(factory, ...)``.

The dataset is built by ``factory`` in a fresh process, loaded by a DataLoader in the chosen
mode, and sampled from the outside exactly as ``memprobe run`` does; the result can then be
asserted on::

    result = memprobe.profile(build_dataset, mode="fork", workers=2, items=20_000)
    result.assert_flat(max_worker_growth_mb=5)
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memprobe.analysis.scenario import per_process_growth
from memprobe.core import cures
from memprobe.core.errors import FactoryError, UsageError
from memprobe.core.summary import RunSummary, window_bounds
from memprobe.core.verdict import VerdictSpec
from memprobe.core.vocabulary import FORK, MAIN, MODES, SINGLE, is_thread_mode
from memprobe.results.folder import ResultSet, ResultsFolder
from memprobe.run.factory import parse_ref
from memprobe.run.limits import MB_PER_WORKER, WORKERS_PER_CPU, Machine
from memprobe.run.runner import execute
from memprobe.run.scenario import (
    DatasetSpec,
    FactorySpec,
    LoaderSpec,
    RunSpec,
    SamplingSpec,
)
from memprobe.session.finish import finalize
from memprobe.session.identity import environment, writer_identity

# Without ``out``, results go to a new <temp>/memprobe/profile-<factory>-<UTC time>: a test that
# profiles should not fill the working directory's reports/.
PROFILE_BASE = Path(tempfile.gettempdir()) / "memprobe"


def factory_ref(factory: Callable[..., Any] | str) -> str:
    """ "module:qualname" for a factory that the run's process can import by name, or a
    :class:`UsageError` saying plainly why this one cannot be (it is imported, never pickled)."""
    if isinstance(factory, str):
        parse_ref(factory)  # checked as text: the module is imported in the run's process only
        return factory
    if isinstance(factory, functools.partial):
        raise UsageError(
            "factory_ref() takes the function: profile() unwraps a functools.partial into its "
            "function and keyword arguments (unwrap_partial)"
        )
    why = _not_importable(factory)
    if why:
        raise UsageError(
            f"dataset factory {factory!r} must be importable by name (a module-level function or "
            f"class): the run's process imports it, it is not pickled; {why}"
        )
    module, qualname = factory.__module__, factory.__qualname__
    ref = f"{module}:{qualname}"
    if module == "__main__":
        raise UsageError(
            f"dataset factory {ref}: defined in __main__, which the run's process cannot "
            "import; move it into a module"
        )
    found = _by_name(module, qualname)
    if found is None:
        raise UsageError(
            f"dataset factory {ref}: importing it by name does not give it (the run's process imports "
            f"factories by name, and module {module!r} does not hold it under that name)"
        )
    # A classmethod is a new bound method at every lookup: equal, not identical.
    same = found == factory if inspect.ismethod(factory) else found is factory
    if not same and getattr(found, "__wrapped__", None) is not factory:
        raise UsageError(f"dataset factory {ref}: importing it by name gives a different object")
    return ref


def _by_name(module_name: str, qualname: str) -> Any:
    """What ``module_name:qualname`` names in the module as this process has already imported it
    (None where it is not imported or holds no such name). Nothing is imported: the caller's
    process never runs the user's module (its import could raise, exit or never return); the
    run's process imports it, within the run's timeout."""
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if obj is not None else ():
        obj = getattr(obj, part, None)
        if obj is None:
            break
    return obj


def _not_importable(factory: Any) -> str | None:
    """Why the run's process could not import ``factory`` by name, in words (None if it can try)."""
    qualname = getattr(factory, "__qualname__", None)
    if not callable(factory):
        return f"a {type(factory).__name__} is not callable"
    if qualname is None or not getattr(factory, "__module__", None):
        return (
            f"a {type(factory).__name__} object has no name to import it by (pass its class, or a function "
            "that builds it)"
        )
    if "<lambda>" in qualname:
        return "a lambda has no name to import it by"
    if "<locals>" in qualname:
        return "it is defined inside a function (define it at module level)"
    if inspect.ismethod(factory) and not isinstance(factory.__self__, type):
        return (
            f"a bound method carries its object ({type(factory.__self__).__name__} instance), which cannot be "
            "imported (use a module-level function, a classmethod or a staticmethod)"
        )
    return None


def unwrap_partial(
    factory: Callable[..., Any] | str, kwargs: dict | None
) -> tuple[Callable[..., Any] | str, dict]:
    """A ``functools.partial`` as its function and keyword arguments (the run's process imports
    the function by name and calls it with them); positional arguments are given their
    parameter's name. Keywords given to :func:`profile` win, as they would in a call."""
    if not isinstance(factory, functools.partial):
        return factory, dict(kwargs or {})
    func = factory.func
    try:
        bound = inspect.signature(func).bind_partial(*factory.args, **factory.keywords)
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"functools.partial of {getattr(func, '__qualname__', func)!r}: its arguments do not fit "
            f"the function ({exc})"
        ) from None
    params = inspect.signature(func).parameters
    var = [name for name in bound.arguments if params[name].kind is inspect.Parameter.VAR_POSITIONAL]
    if var:
        raise UsageError(
            f"functools.partial of {func.__qualname__}: positional arguments that go to *{var[0]} have no "
            "name to pass them by; give the function named parameters or pass keyword arguments"
        )
    merged: dict = {}
    for name, value in bound.arguments.items():
        if params[name].kind is inspect.Parameter.VAR_KEYWORD:
            merged.update(value)
        else:
            merged[name] = value
    merged.update(kwargs or {})
    try:
        json.dumps(merged, allow_nan=False)
    except (TypeError, ValueError):
        bad = next(k for k, v in merged.items() if not _json_value(v))
        raise UsageError(
            f"functools.partial of {func.__qualname__}: argument {bad!r} is a "
            f"{type(merged[bad]).__name__}; the run's process gets arguments as JSON (numbers, "
            "strings, booleans, None, lists and dicts of them): build that object inside the "
            "factory instead"
        ) from None
    return func, merged


def _json_value(v: Any) -> bool:
    try:
        json.dumps(v, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class WorkerGrowth:
    pid: int
    role: str
    uss_start_mb: float
    uss_end_mb: float
    growth_mb: float
    kind: str = ""  # "DataLoader worker, fork", "main process, 2 worker threads"

    @property
    def label(self) -> str:
        """'worker 1 (DataLoader worker, fork; pid 15700)'."""
        return f"{self.role} ({self.kind}; pid {self.pid})" if self.kind else f"{self.role} (pid {self.pid})"


@dataclass(frozen=True)
class ProfileResult:
    """The outcome of :func:`profile`: the run's summary, its workers, and its results folder."""

    summary: RunSummary
    workers: tuple[WorkerGrowth, ...]
    main: WorkerGrowth | None
    results_dir: Path

    @property
    def verdict(self) -> str | None:
        return self.summary.verdict

    @property
    def worker_growth_mb(self) -> float | None:
        return self.summary.worker_uss_growth_mb

    @property
    def attribution(self) -> dict | None:
        """Which of the dataset's structures the workers copied (``profile(attribute=True)``):
        :func:`memprobe.analysis.attribution.attribution`'s table."""
        return self.summary.attribution

    def assert_ok(self) -> None:
        __tracebackhide__ = True  # pytest: show the user's line and the message, not this frame
        if self.summary.status != "ok":
            raise AssertionError(
                f"memprobe run {self.summary.status}: {self.summary.error}\nresults: {self.results_dir}"
            )

    def assert_flat(self, *, max_worker_growth_mb: float | None = None) -> None:
        """Fail unless every worker's USS grew by at most ``max_worker_growth_mb`` (default: the
        verdict threshold, 50 MB). For thread and single-process runs the main process is checked."""
        __tracebackhide__ = True  # pytest: show the user's line and the message, not this frame
        self.assert_ok()
        limit = self.summary.growth_threshold_mb if max_worker_growth_mb is None else max_worker_growth_mb
        checked = list(self.workers) or ([self.main] if self.main else [])
        if not checked:
            raise AssertionError(
                f"memprobe: no memory samples in the iteration window; results: {self.results_dir}"
            )
        over = [w for w in checked if w.growth_mb > limit]
        if over:
            raise AssertionError(self._message(max(over, key=lambda w: w.growth_mb), limit, checked))

    def _message(self, worst: WorkerGrowth, limit: float, checked: list[WorkerGrowth]) -> str:
        s = self.summary
        head = (
            f"{worst.label} grew {worst.growth_mb:.1f} MB over {s.items:,} items "
            f"({s.mode}, {s.workers} workers, dataset {s.backend}); limit {limit:g} MB"
        )
        rows = [f"  {'process':<12} {'pid':>8} {'USS start':>11} {'USS end':>11} {'growth':>10}"]
        rows += [
            f"  {w.role:<12} {w.pid:>8} {w.uss_start_mb:>8.1f} MB {w.uss_end_mb:>8.1f} MB "
            f"{w.growth_mb:>+7.1f} MB{'  <-- over' if w.growth_mb > limit else ''}"
            for w in checked
        ]
        advice = cures.text_lines(cures.grown_causes(s), scenario=cures.is_unsplit(s))
        return "\n".join([head, "", *rows, *advice, "", f"results: {self.results_dir}"])


def profile(
    factory: Callable[..., Any] | str,
    *,
    kwargs: dict | None = None,
    mode: str = FORK,
    workers: int = 2,
    items: int | None = None,
    epochs: int = 1,
    batch_size: int = 64,
    shuffle: bool = True,
    gc_freeze: bool = False,
    timeout_s: float = 300.0,
    growth_threshold_mb: float = 50.0,
    out: str | Path | None = None,
    seed: int = 0,
    no_limits: bool = False,
    attribute: bool = False,
) -> ProfileResult:
    """Build the dataset with ``factory(**kwargs)`` in a fresh process, load it with ``workers``
    workers in ``mode``, sample memory from the outside, and return the result. ``gc_freeze``
    calls gc.freeze() before the workers start (no one-off copy of the interpreter's objects).

    ``factory`` is imported by name in that process, never pickled: a module-level function or
    class, a classmethod or staticmethod, a ``"module:qualname"`` string, or a
    ``functools.partial`` of one of those whose arguments are JSON values (they are passed as
    keyword arguments). Lambdas, functions defined inside functions, anything defined in
    ``__main__`` and methods bound to an object are refused, saying why.

    ``attribute``: which of the dataset's structures the forked workers copied, by attribute path
    (``result.attribution``; summary.json's ``attribution``): after the last measurement, the
    workers' pages read and the dataset walked in the run's process (docs/attribution.md).

    The numbers are checked as a scenario's are (README, Limits): ``workers`` at most what this
    machine can hold unless ``no_limits`` (as ``--no-limits``).

    The results folder (manifest, tables, summary.json; ``memprobe report DIR`` renders its page)
    is ``out``, new or empty, or by default a new ``<temp>/memprobe/profile-<factory>-<UTC time>``.

    A factory that gives no dataset - its module cannot be imported (it raises, exits, ends the
    process or does not return within ``timeout_s``), or the factory raises, exits, returns
    something that is not a dataset or does not return within ``timeout_s`` - raises
    :class:`memprobe.core.errors.FactoryError` (a ``UsageError``) naming it, once the results
    folder is written (``.result``: the run's ``ProfileResult``). The module is imported in the
    run's process only, never in the caller's."""
    __tracebackhide__ = True  # pytest: the user's line and the error, not memprobe's frames
    if mode not in MODES:
        raise UsageError(f"profile(): mode {mode!r}; allowed: {', '.join(MODES)}")
    _check_numbers(
        workers=workers,
        items=items,
        epochs=epochs,
        batch_size=batch_size,
        timeout_s=timeout_s,
        growth_threshold_mb=growth_threshold_mb,
        seed=seed,
        no_limits=no_limits,
    )
    factory, kwargs = unwrap_partial(factory, kwargs)
    ref = factory_ref(factory)
    name = ref.rsplit(":", 1)[1].split(".")[-1]
    spec = RunSpec(
        run_id=f"{name}-{mode if workers else SINGLE}-w{workers}",
        backend=name,
        mode=mode if workers else SINGLE,
        workers=workers,
        dataset=DatasetSpec(seed=seed),
        loader=LoaderSpec(
            batch_size=batch_size, epochs=epochs, items=items, shuffle=shuffle, gc_freeze=gc_freeze
        ),
        sampling=SamplingSpec(attribute=attribute),
        verdict=VerdictSpec(growth_threshold_mb=growth_threshold_mb),
        timeout_s=timeout_s,
        workload="factory",
        factory=FactorySpec(name=name, factory=ref, kwargs=kwargs),
        sys_path=tuple(p for p in sys.path if p),
    )
    return _execute(spec, Path(out) if out is not None else None)


def _check_numbers(
    *,
    workers: int,
    items: int | None,
    epochs: int,
    batch_size: int,
    timeout_s: float,
    growth_threshold_mb: float,
    seed: int,
    no_limits: bool,
) -> None:
    """Refuse what no run can do, naming the argument, the value and what is allowed."""

    def bad(name: str, value: object, allowed: str) -> UsageError:
        return UsageError(f"profile(): {name}={value!r}; allowed: {allowed}")

    for name, value, low in (("workers", workers, 0), ("epochs", epochs, 1), ("batch_size", batch_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise bad(name, value, f"a whole number >= {low}")
    if items is not None and (isinstance(items, bool) or not isinstance(items, int) or items < 1):
        raise bad("items", items, "None (the whole dataset) or a whole number >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise bad("seed", seed, "a whole number from 0 to 4,294,967,295")
    for name, number, least in (
        ("timeout_s", timeout_s, 1.0),
        ("growth_threshold_mb", growth_threshold_mb, 0.0),
    ):
        if (
            isinstance(number, bool)
            or not isinstance(number, (int, float))
            or not math.isfinite(number)
            or number < least
        ):
            raise bad(name, number, f"a finite number >= {least:g}")
    machine = Machine.here()
    if not no_limits and workers > machine.max_workers:
        raise bad(
            "workers",
            workers,
            f"at most {machine.max_workers} on this machine ({WORKERS_PER_CPU} per CPU x "
            f"{machine.cpus} CPUs, and {MB_PER_WORKER} MB per worker of "
            f"{machine.memory_mb:,} MB); no_limits=True runs it anyway",
        )


def _execute(spec: RunSpec, out: Path | None) -> ProfileResult:
    __tracebackhide__ = True  # pytest: see profile()
    assert spec.factory is not None
    folder = ResultsFolder.create(
        out,
        kind="profile",
        name=f"profile-{spec.backend}",
        description=f"memprobe.profile({spec.factory.factory}, mode={spec.mode!r}, workers={spec.workers})",
        environment=environment(),
        runs=[spec.run_id],
        writer=writer_identity(),
        base=PROFILE_BASE,
    )
    state = execute(spec, folder.root / "runs" / spec.run_id)
    session = finalize(folder, "interrupted" if state.status == "interrupted" else "complete", render=False)
    results = folder.load()
    result = ProfileResult(
        summary=session.summaries[0], results_dir=folder.root, **_growth(results, spec.run_id)
    )
    error = state.error or {}
    if error.get("type") == FactoryError.__name__:
        # No dataset, nothing measured: raised, not returned for the caller to read a verdict of None.
        raise FactoryError(f"{error.get('message')} (results: {folder.root})", result)
    return result


def _growth(results: ResultSet, run_id: str) -> dict[str, Any]:
    meta = results.metas[0]
    samples = results.run_table("samples", run_id)
    start, end = window_bounds(samples, meta.get("milestones", {}))
    if start is None or end is None:  # both or neither
        return {"workers": (), "main": None}
    table = per_process_growth(samples, start, end)
    spec = meta.get("spec") or {}
    rows = [
        WorkerGrowth(
            int(r.pid),
            str(r.role),
            float(r.uss_start_mb),
            float(r.uss_end_mb),
            float(r.growth_mb),
            process_kind(str(r.role), spec.get("mode", ""), int(spec.get("workers") or 0)),
        )
        for r in table.sort_values(["worker", "pid"]).itertuples()
    ]
    return {
        "workers": tuple(w for w in rows if w.role.startswith("worker")),
        "main": next((w for w in rows if w.role == MAIN), None),
    }


def process_kind(role: str, mode: str, workers: int) -> str:
    """What a process of a profile() run is, in words: 'DataLoader worker, fork' for a worker
    process, 'main process, 2 worker threads' for the loader's own process."""
    if role.startswith("worker"):
        return f"DataLoader worker, {mode}"
    if role == MAIN:
        if is_thread_mode(mode):
            return f"main process, {workers} worker thread{'s' if workers != 1 else ''}"
        return "main process, no workers" if workers == 0 else "main process"
    return role
