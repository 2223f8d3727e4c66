"""Scenario files: parse, validate and expand into the list of runs to execute.

A scenario names a dataset, the axes to sweep (backends x modes x worker counts) and the loader
and sampling settings. Every mistake stops before anything runs, with a message that names the
file, the key, the bad value and what is allowed.

Reading the file safely is :mod:`memprobe.run.scenario_file`; whether a scenario fits this machine
is :mod:`memprobe.run.limits`.

Over 500 lines because what stays here is one thing: the records a scenario becomes (Scenario,
RunSpec and their sections) next to the rules that check each field, so that a field and its
rule change together.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from memprobe.core.errors import UsageError
from memprobe.core.rounds import interleaved, round_suffix
from memprobe.core.verdict import VerdictSpec
from memprobe.core.vocabulary import MODES, SINGLE
from memprobe.run.scenario_file import load_yaml, read_scenario_text, shown

# MODES (memprobe.core.vocabulary): torch-thread and torchdata-thread fail per run, clearly, where
# the installed torch or torchdata lacks them.
BACKENDS = ("list", "numpy", "arrow")
DECODERS = ("pillow", "nvimgcodec", "simplejpeg")
DEVICES = ("auto", "cpu", "gpu")
VERDICTS = ("flat", "growing")

# -- limits (README "Limits" gives the reasons) -------------------------------------------------
MAX_SEED = 2**32 - 1  # numpy's generators take no larger seed
MAX_IMAGE_SIDE = 8192
# Batches each worker loads ahead (torch's default: 2). Far beyond, a loader holds a good part
# of its epoch in memory at once, which is the prefetching being measured, not the dataset.
MAX_PREFETCH = 64
# Repeats of every run (the exercise asks for 5). Far beyond, a session is hours of the same runs.
MAX_REPEATS = 100
NAME_CHARS = 100


@dataclass(frozen=True)
class DatasetSpec:
    records: int = 500_000
    floats: int = 4
    seed: int = 0


@dataclass(frozen=True)
class DecodeSpec:
    """The decode workload: real-photo JPEGs held in one arrow buffer, decoded per item."""

    images: int = 1024
    width: int = 640
    height: int = 408
    quality: int = 90
    device: str = "auto"  # nvimgcodec: auto picks the GPU when one is usable
    seed: int = 0


@dataclass(frozen=True)
class FactorySpec:
    """A user's dataset: ``factory`` is "module:callable", imported by name in the run's process."""

    name: str
    factory: str
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LoaderSpec:
    batch_size: int = 256
    epochs: int = 1
    items: int | None = None  # an item budget; stops before the epochs end if reached first
    shuffle: bool = True
    prefetch_factor: int = 2
    persistent_workers: bool = False
    # gc.freeze() before the workers start: the known fix for the one-off copy a forked worker
    # makes of the interpreter's own objects when Python's cyclic GC first walks them.
    gc_freeze: bool = False


@dataclass(frozen=True)
class SamplingSpec:
    interval_s: float = 0.1
    pss_cpu_budget: float = 0.012  # see probe.sampler.SamplerSettings
    pss_min_interval_s: float = 0.25
    attribute: bool = False  # which of the dataset's structures forked workers copied (probe/attribution.py)


@dataclass(frozen=True)
class Expectation:
    verdict: str
    backends: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()

    def applies(self, backend: str, mode: str) -> bool:
        # An empty axis matches every value of it.
        return (not self.backends or backend in self.backends) and (not self.modes or mode in self.modes)

    def describe(self) -> str:
        who = " x ".join(", ".join(x) for x in (self.backends, self.modes) if x) or "every run"
        return f"{who} stays {self.verdict}" if self.verdict == "flat" else f"{who} is {self.verdict}"


@dataclass(frozen=True)
class RunSpec:
    """One run of the matrix: everything the child process needs, JSON-serialisable."""

    run_id: str
    backend: str
    mode: str
    workers: int
    dataset: DatasetSpec
    loader: LoaderSpec
    sampling: SamplingSpec
    verdict: VerdictSpec
    timeout_s: float
    expect: str | None = None  # "flat"/"growing" where the scenario set an expectation
    fault: str | None = None  # test hook: "raise@N", "hang@N" (dataset index) or "kill@N" (batch)
    workload: str = "records"  # records | decode | factory
    decode: DecodeSpec | None = None
    factory: FactorySpec | None = None
    sys_path: tuple[str, ...] = ()  # prepended to the run process's sys.path (user factories)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return cls(
            **{
                **d,
                "dataset": DatasetSpec(**d["dataset"]),
                "loader": LoaderSpec(**d["loader"]),
                "sampling": SamplingSpec(**d["sampling"]),
                "verdict": VerdictSpec(**d["verdict"]),
                "decode": DecodeSpec(**d["decode"]) if d.get("decode") else None,
                "factory": FactorySpec(**d["factory"]) if d.get("factory") else None,
                "sys_path": tuple(d.get("sys_path") or ()),
            }
        )


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    text: str
    description: str = ""
    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    backends: tuple[str, ...] = BACKENDS
    modes: tuple[str, ...] = MODES
    workers: tuple[int, ...] = (2,)
    loader: LoaderSpec = field(default_factory=LoaderSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    verdict: VerdictSpec = field(default_factory=VerdictSpec)
    expect: tuple[Expectation, ...] = ()
    timeout_s: float = 300.0
    workload: str = "records"
    decode: DecodeSpec | None = None
    factories: tuple[FactorySpec, ...] = ()
    sys_path: tuple[str, ...] = ()
    repeats: int = 1

    def runs(self) -> list[RunSpec]:
        """The matrix: backends x modes x workers; ``workers: 0`` runs once per backend. With
        ``repeats`` N above 1, the whole matrix N times in interleaved rounds
        (:func:`memprobe.core.rounds.interleaved`), each run's id ending ``-r1`` .. ``-rN``.

        The backend axis is the storage (records), the decoder (decode) or the named user
        dataset (factory)."""
        matrix = self._matrix()
        if self.repeats == 1:
            return matrix
        return [
            replace(spec, run_id=spec.run_id + round_suffix(r, self.repeats))
            for r, spec in interleaved(matrix, self.repeats)
        ]

    def _matrix(self) -> list[RunSpec]:
        out: list[RunSpec] = []
        factories = {f.name: f for f in self.factories}
        for backend, workers in itertools.product(self.backends, self.workers):
            for mode in (SINGLE,) if workers == 0 else self.modes:
                out.append(
                    RunSpec(
                        run_id=f"{backend}-{mode}-w{workers}",
                        backend=backend,
                        mode=mode,
                        workers=workers,
                        dataset=self.dataset,
                        loader=self.loader,
                        sampling=self.sampling,
                        verdict=self.verdict,
                        timeout_s=self.timeout_s,
                        expect=self._expected(backend, mode),
                        workload=self.workload,
                        decode=self.decode,
                        factory=factories.get(backend),
                        sys_path=self.sys_path,
                    )
                )
        return out

    def _expected(self, backend: str, mode: str) -> str | None:
        found = [e.verdict for e in self.expect if e.applies(backend, mode)]
        return found[-1] if found else None


# -- validation ------------------------------------------------------------------------------


class _Checker:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str, value: Any, allowed: str) -> UsageError:
        return UsageError(f"{self.path}: key '{key}': got {shown(value)}; allowed: {allowed}")

    def mapping(self, key: str, value: Any, allowed_keys: tuple[str, ...]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, value, f"a mapping with keys {', '.join(allowed_keys)}")
        for k in value:
            if k not in allowed_keys:
                where = shown(f"{key}.{k}" if key else str(k), quote=False)
                raise UsageError(
                    f"{self.path}: unknown key '{where}'; allowed keys"
                    f"{' under ' + repr(key) if key else ''}: {', '.join(allowed_keys)}"
                )
        return value

    def number(
        self,
        key: str,
        value: Any,
        kind: type,
        minimum: float,
        *,
        optional: bool = False,
        maximum: float | None = None,
    ) -> Any:
        if value is None and optional:
            return None
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        # NaN compares false with everything and .inf never ends: both are refused.
        if (
            isinstance(value, bool)
            or not ok
            or not math.isfinite(value)
            or value < minimum
            or (maximum is not None and value > maximum)
        ):
            noun = "an integer" if kind is int else "a number"
            top = f" and <= {maximum:,}" if maximum is not None else ""
            raise self.fail(key, value, f"{noun} >= {minimum}{top}")
        return kind(value)

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, value, "true or false")
        return value

    def choices(self, key: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise self.fail(key, value, f"one or more of {', '.join(allowed)}")
        for item in items:
            if item not in allowed:
                raise self.fail(key, item, ", ".join(allowed))
        return tuple(dict.fromkeys(items))


def _section(check: _Checker, key: str, raw: Any, cls: type, rules: dict[str, tuple]) -> Any:
    data = check.mapping(key, raw, tuple(f.name for f in fields(cls)))
    values = {}
    for name, value in data.items():
        kind, minimum, *more = rules[name]
        full = f"{key}.{name}"
        values[name] = (
            check.boolean(full, value)
            if kind is bool
            else check.number(
                full,
                value,
                kind,
                minimum,
                optional="optional" in more,
                maximum=next((m for m in more if not isinstance(m, str)), None),
            )
        )
    return cls(**values)


_TOP_KEYS = (
    "name",
    "description",
    "dataset",
    "datasets",
    "decode",
    "backends",
    "decoders",
    "modes",
    "workers",
    "loader",
    "sampling",
    "verdict",
    "expect",
    "timeout_s",
    "repeats",
)
_RECORD_RULES = {"records": (int, 1), "floats": (int, 1), "seed": (int, 0, MAX_SEED)}
_DECODE_RULES = {
    "images": (int, 1),
    "width": (int, 16, MAX_IMAGE_SIDE),
    "height": (int, 16, MAX_IMAGE_SIDE),
    "quality": (int, 1),
    "seed": (int, 0, MAX_SEED),
}


def parse_scenario(text: str, path: str = "<scenario>", *, base_dir: str | None = None) -> Scenario:
    """Parse and validate scenario YAML ``text``; ``path`` is used in error messages.

    Three workloads, told apart by their keys: built-in records (``dataset: {records: ...}``
    and ``backends``), image decode (a ``decode:`` section and ``decoders``), or user datasets
    (``dataset: {factory: "pkg.mod:fn", kwargs: {...}}`` or a ``datasets:`` list of them).
    """
    check = _Checker(path)
    raw = load_yaml(text, path)
    data = check.mapping("", raw, _TOP_KEYS)
    if not data:
        raise UsageError(f"{path}: empty scenario; expected a mapping with keys {', '.join(_TOP_KEYS)}")
    name = _name(check, data.get("name", Path(path).stem))
    workload, axis = _workload(check, data)
    common = {
        "name": name,
        "path": path,
        "text": text,
        "description": str(data.get("description", "")),
        "modes": check.choices("modes", data.get("modes", list(MODES)), MODES),
        "workers": _workers(check, data.get("workers", [2])),
        "loader": _section(
            check,
            "loader",
            data.get("loader"),
            LoaderSpec,
            {
                "batch_size": (int, 1),
                "epochs": (int, 1),
                "items": (int, 1, "optional"),
                "shuffle": (bool, 0),
                "prefetch_factor": (int, 1, MAX_PREFETCH),
                "persistent_workers": (bool, 0),
                "gc_freeze": (bool, 0),
            },
        ),
        "sampling": _section(
            check,
            "sampling",
            data.get("sampling"),
            SamplingSpec,
            {
                "interval_s": (float, 0.01, 60),
                "pss_cpu_budget": (float, 0.001, 1),
                "pss_min_interval_s": (float, 0.0, 3600),
                "attribute": (bool, 0),
            },
        ),
        "verdict": _section(
            check, "verdict", data.get("verdict"), VerdictSpec, {"growth_threshold_mb": (float, 0.0)}
        ),
        "timeout_s": check.number("timeout_s", data.get("timeout_s", 300.0), float, 1.0),
        "repeats": check.number("repeats", data.get("repeats", 1), int, 1, maximum=MAX_REPEATS),
        "workload": workload,
        # The README promises both: the scenario's own folder first, then the current directory.
        "sys_path": tuple(dict.fromkeys((base_dir or str(Path(path).resolve().parent), os.getcwd()))),
    }
    if workload == "records":
        backends = check.choices("backends", data.get("backends", list(BACKENDS)), BACKENDS)
        extra = {"dataset": _section(check, "dataset", data.get("dataset"), DatasetSpec, _RECORD_RULES)}
    elif workload == "decode":
        backends = check.choices(axis, data.get(axis, ["pillow", "nvimgcodec"]), DECODERS)
        extra = {"decode": _decode(check, data["decode"])}
    else:
        factories = _factories(check, data)
        backends = tuple(f.name for f in factories)
        extra = {"factories": factories}
    expect = _expectations(check, data.get("expect", []), backends)
    return Scenario(backends=backends, expect=expect, **common, **extra)


def _name(check: _Checker, name: Any) -> str:
    """The scenario's name names its results folder: one path component, short and printable."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > NAME_CHARS
        or name in (".", "..")
        or any(c in "/\\" or not c.isprintable() for c in name)
    ):
        raise check.fail(
            "name",
            name,
            f"a non-empty string of at most {NAME_CHARS} printable characters "
            "without '/' or '\\' (it names the results folder)",
        )
    return name


def _workload(check: _Checker, data: dict) -> tuple[str, str]:
    """Which workload the keys describe, and the name of its backend axis."""
    if "backends" in data and "decoders" in data:
        raise check.fail("decoders", data["decoders"], "either 'backends' or 'decoders', not both")
    if "decode" in data:
        if "dataset" in data or "datasets" in data:
            raise check.fail("decode", "...", "a decode workload has no 'dataset'/'datasets' key")
        return "decode", "decoders" if "decoders" in data else "backends"
    if "decoders" in data:
        raise check.fail("decoders", data["decoders"], "only with a 'decode:' section")
    dataset = data.get("dataset")
    if "datasets" in data or (isinstance(dataset, dict) and "factory" in dataset):
        if "backends" in data:
            raise check.fail(
                "backends",
                data["backends"],
                "no 'backends' with user datasets: each entry of 'datasets' is one value of that axis",
            )
        return "factory", "datasets"
    return "records", "backends"


def _decode(check: _Checker, raw: Any) -> DecodeSpec:
    data = check.mapping("decode", raw, tuple(f.name for f in fields(DecodeSpec)))
    device = data.pop("device", "auto")
    if device not in DEVICES:
        raise check.fail("decode.device", device, ", ".join(DEVICES))
    spec = _section(check, "decode", data, DecodeSpec, _DECODE_RULES)
    if spec.quality > 100:
        raise check.fail("decode.quality", spec.quality, "an integer from 1 to 100")
    return replace(spec, device=device)


def _factories(check: _Checker, data: dict) -> tuple[FactorySpec, ...]:
    if "dataset" in data and "datasets" in data:
        raise check.fail("datasets", "...", "either 'dataset' (one factory) or 'datasets' (a list), not both")
    entries = [("dataset", data["dataset"])] if "dataset" in data else None
    if entries is None:
        listed = data["datasets"]
        if not isinstance(listed, list) or not listed:
            raise check.fail("datasets", listed, "a non-empty list of {name, factory, kwargs}")
        entries = [(f"datasets[{i}]", e) for i, e in enumerate(listed)]
    out = [_factory(check, key, entry) for key, entry in entries]
    names = [f.name for f in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise check.fail("datasets", dupes, "distinct 'name's (each names a backend of the matrix)")
    return tuple(out)


def _factory(check: _Checker, key: str, raw: Any) -> FactorySpec:
    data = check.mapping(key, raw, ("name", "factory", "kwargs"))
    # Here, not at the top: the run's process imports this module, and what it imports changes what
    # its forked workers measure (with run/factory.py and sysconfig imported there, list-fork-w2's
    # workers grew +50 MB, not the > 80 MB tests/integration/test_run.py::test_list_under_fork_grows
    # expects, in 3 runs of 3; it passed once they were not).
    from memprobe.run.factory import ref_problem

    ref = data.get("factory")
    # Checked as text only: the module is imported in a process of its own (run/import_check.py).
    why = ref_problem(ref) if isinstance(ref, str) else None
    if not isinstance(ref, str) or why:
        raise check.fail(
            f"{key}.factory",
            ref,
            '"module.path:callable", e.g. "mypkg.data:build_dataset"' + (f"; here {why}" if why else ""),
        )
    kwargs = data.get("kwargs", {}) or {}
    if not isinstance(kwargs, dict):
        raise check.fail(f"{key}.kwargs", kwargs, "a mapping of keyword arguments")
    name = data.get("name", ref.rsplit(":", 1)[1].split(".")[-1])
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise check.fail(f"{key}.name", name, "a short name of letters, digits, '-' and '_'")
    return FactorySpec(name=name, factory=ref, kwargs=kwargs)


def _workers(check: _Checker, value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise check.fail("workers", value, "a list of integers >= 0, e.g. [0, 2, 4]")
    return tuple(dict.fromkeys(check.number("workers", w, int, 0) for w in items))


def _expectations(check: _Checker, value: Any, backends: tuple[str, ...]) -> tuple[Expectation, ...]:
    if not isinstance(value, list):
        raise check.fail("expect", value, "a list of {backend, mode, verdict} entries")
    out = []
    for i, entry in enumerate(value):
        key = f"expect[{i}]"
        entry = check.mapping(key, entry, ("backend", "mode", "verdict"))
        if "verdict" not in entry:
            raise check.fail(f"{key}.verdict", None, ", ".join(VERDICTS))
        verdict = check.choices(f"{key}.verdict", entry["verdict"], VERDICTS)
        if len(verdict) != 1:
            raise check.fail(f"{key}.verdict", entry["verdict"], "exactly one of " + ", ".join(VERDICTS))
        out.append(
            Expectation(
                verdict=verdict[0],
                backends=check.choices(f"{key}.backend", entry["backend"], backends)
                if "backend" in entry
                else (),
                modes=check.choices(f"{key}.mode", entry["mode"], (*MODES, SINGLE))
                if "mode" in entry
                else (),
            )
        )
    return tuple(out)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate the scenario file at ``path``: a scenario, or a :class:`UsageError`
    naming the file whatever it is (see :func:`memprobe.run.scenario_file.read_scenario_text`)."""
    text, name = read_scenario_text(path)
    return parse_scenario(text, name, base_dir=str(Path(path).resolve().parent))


def with_overrides(scenario: Scenario, **changes: Any) -> Scenario:
    """A copy of ``scenario`` with top-level fields replaced (used by ``--quick`` and flags)."""
    return replace(scenario, **{k: v for k, v in changes.items() if v is not None})
