"""Scenario files: parse, validate and expand into the list of runs to execute.

A scenario names a dataset, the axes to sweep (backends x modes x worker counts) and the loader
and sampling settings. Every mistake stops before anything runs, with a message that names the
file, the key, the bad value and what is allowed.
"""

from __future__ import annotations

import itertools
import math
import os
import stat
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from memprobe.errors import UsageError

# thread: memprobe's ThreadDataLoader. torch-thread: torch's own thread workers, where the
# installed torch has them (DataLoader(worker_method="thread")). torchdata-thread:
# torchdata.nodes.ParallelMapper(method="thread"). The last two fail per run, clearly, when absent.
MODES = ("fork", "spawn", "forkserver", "thread", "torch-thread", "torchdata-thread")
BACKENDS = ("list", "numpy", "arrow")
DECODERS = ("pillow", "nvimgcodec", "simplejpeg")
DEVICES = ("auto", "cpu", "gpu")
SINGLE = "single"  # the mode label of a workers: 0 run (no worker processes or threads)
VERDICTS = ("flat", "growing")

# -- limits (README "Limits" gives the reasons) -------------------------------------------------
# A scenario is a few hundred bytes (the largest shipped one is under 3 KB). It is copied into
# its results folder and its report, so a file, or what its YAML aliases expand to, is refused
# above this size: a 1.3 KB alias bomb once wrote a 1.1 GB results folder.
MAX_SCENARIO_CHARS = 1_000_000
MAX_DEPTH = 50  # nesting levels; a scenario needs 4
# Workers per run: beyond 8 per CPU a worker only waits for a core (torch warns above 1 per
# CPU); and each worker process holds its own interpreter with torch imported (177 MB of USS
# measured for a spawn worker of 2,000 arrow records) or, forked, can copy the whole dataset:
# 256 MB of memory each.
WORKERS_PER_CPU = 8
MB_PER_WORKER = 256
# Bytes a list-backed record holds (USS measured, 200k records): 646 with 4 floats, 2,986 with
# 64. The list backend is the largest of the three, and each process worker can end up with a
# full copy of it (copy-on-access under fork, its own unpickled copy under spawn/forkserver).
RECORD_BYTES, RECORD_FLOAT_BYTES = 500, 40
# Encoded JPEG bytes per pixel: 0.22 measured at quality 100 (640x408), 0.07 at quality 90.
JPEG_BYTES_PER_PIXEL = 0.25
MEMORY_SHARE = 0.8  # of the machine's memory a scenario may plan to use; the rest is everyone else's
MAX_SEED = 2**32 - 1  # numpy's generators take no larger seed
MAX_IMAGE_SIDE = 8192
# Batches each worker loads ahead (torch's default: 2). Far beyond, a loader holds a good part
# of its epoch in memory at once, which is the prefetching being measured, not the dataset.
MAX_PREFETCH = 64
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


@dataclass(frozen=True)
class VerdictSpec:
    # Worker USS growth above this (MB, mean per worker) reads as "growing". Chosen from
    # measurement (docs/performance.md): a forked worker copies ~36 MB of the interpreter's own
    # objects (torch imported) once, when the cyclic GC first walks them, whatever the dataset;
    # numpy/arrow workers grow by that much and no more, list workers by a share of the data.
    growth_threshold_mb: float = 50.0


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

    def runs(self) -> list[RunSpec]:
        """The matrix: backends x modes x workers; ``workers: 0`` runs once per backend.

        The backend axis is the storage (records), the decoder (decode) or the named user
        dataset (factory)."""
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
            },
        ),
        "verdict": _section(
            check, "verdict", data.get("verdict"), VerdictSpec, {"growth_threshold_mb": (float, 0.0)}
        ),
        "timeout_s": check.number("timeout_s", data.get("timeout_s", 300.0), float, 1.0),
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


def shown(value: Any, *, limit: int = 80, quote: bool = True) -> str:
    """``repr(value)`` (or the text itself), cut to ``limit`` characters: an error message names
    the bad value without repeating a megabyte of it."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


def display_path(path: str | Path) -> str:
    """``path`` as printable text: bytes that are not UTF-8 (kept by Python as surrogates, which
    no UTF-8 file or terminal can take) are shown as U+FFFD."""
    return os.fsencode(path).decode("utf-8", "replace")


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


def load_yaml(text: str, path: str) -> Any:
    """``yaml.safe_load(text)``, refusing what safe_load lets through: aliases that expand to
    more than :data:`MAX_SCENARIO_CHARS` (an "alias bomb"), recursive aliases, nesting deeper than
    :data:`MAX_DEPTH`, and a key given twice in one mapping (safe_load keeps the last silently)."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise UsageError(_yaml_error(path, exc)) from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply; allowed: at most {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_nodes(root: yaml.Node, path: str) -> None:
    sizes: dict[int, int] = {}
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            where = key.value if isinstance(key, yaml.ScalarNode) else "?"
            if (
                _expanded(key, path, sizes, set(), 1, where) + _expanded(value, path, sizes, set(), 1, where)
                > MAX_SCENARIO_CHARS
            ):
                raise _too_big(path, f"key '{shown(where, quote=False)}': its")
    if _expanded(root, path, sizes, set(), 0, "") > MAX_SCENARIO_CHARS:
        raise _too_big(path, "the")


def _too_big(path: str, whose: str) -> UsageError:
    return UsageError(
        f"{path}: {whose} aliases expand to more than {MAX_SCENARIO_CHARS:,} characters; allowed: "
        f"at most {MAX_SCENARIO_CHARS:,} once expanded (a scenario is copied into its results)"
    )


def _expanded(
    node: yaml.Node, path: str, sizes: dict[int, int], open_: set[int], depth: int, where: str
) -> int:
    """Characters ``node`` stands for once every alias in it is expanded (capped just above
    the limit), computed once per node: an alias repeats a node, it does not copy it."""
    if id(node) in sizes:
        return sizes[id(node)]
    line = node.start_mark.line + 1
    if id(node) in open_:
        raise UsageError(
            f"{path}: line {line}: key '{shown(where, quote=False)}': an alias refers to a node "
            "that contains it (a recursive alias); allowed: aliases to complete nodes only"
        )
    if depth > MAX_DEPTH:
        raise UsageError(
            f"{path}: line {line}: nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH}"
        )
    open_.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        size = len(node.value) + 1
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(
            _expanded(item, path, sizes, open_, depth + 1, f"{where}[{i}]")
            for i, item in enumerate(node.value)
        )
    else:
        assert isinstance(node, yaml.MappingNode)  # the third and last kind of YAML node
        _no_duplicate_keys(node, path, where)
        size = 1
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            inner = f"{where}.{name}" if where else name
            size += _expanded(key, path, sizes, open_, depth + 1, inner)
            size += _expanded(value, path, sizes, open_, depth + 1, inner)
    open_.discard(id(node))
    sizes[id(node)] = min(size, MAX_SCENARIO_CHARS + 1)
    return sizes[id(node)]


def _no_duplicate_keys(node: yaml.MappingNode, path: str, where: str) -> None:
    seen: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue  # '<<' merges another mapping in; its keys may be overridden, by design
        line = key.start_mark.line + 1
        if (key.tag, key.value) in seen:
            full = shown(f"{where}.{key.value}" if where else key.value, quote=False)
            raise UsageError(
                f"{path}: line {line}: key '{full}' appears twice in one mapping (first on "
                f"line {seen[(key.tag, key.value)]}); allowed: each key once (YAML would keep "
                "the last one silently)"
            )
        seen[(key.tag, key.value)] = line


def _yaml_error(path: str, exc: yaml.YAMLError) -> str:
    """'file: line L, column C: not valid YAML: problem' (PyYAML's own text names no file)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow, e.g. NUL
        return (
            f"{path}: character {exc.position + 1}: not valid YAML: character "
            f"{shown(chr(exc.character) if isinstance(exc.character, int) else exc.character)} is not allowed"
        )
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{path}:{where} not valid YAML: {problem}"


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
    ref = data.get("factory")
    if not isinstance(ref, str) or ":" not in ref or not all(ref.split(":", 1)):
        raise check.fail(f"{key}.factory", ref, '"module.path:callable", e.g. "mypkg.data:build_dataset"')
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
    """Read and validate the scenario file at ``path``.

    Whatever ``path`` is (a folder, a FIFO, a device, a huge or binary file), the answer is a
    scenario or a :class:`UsageError` naming it; nothing is read past the size limit and
    nothing blocks (a FIFO is opened without waiting for a writer)."""
    p = Path(path)
    name = display_path(p)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{name}: no such scenario file") from None
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {exc.strerror}") from None
    try:
        kind = _file_kind(os.fstat(fd).st_mode)
        if kind:
            raise UsageError(f"{name}: is {kind}; give a scenario YAML file (e.g. scenarios/quick.yaml)")
        data = _read_at_most(fd, MAX_SCENARIO_CHARS + 1)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SCENARIO_CHARS:
        raise UsageError(
            f"{name}: larger than {MAX_SCENARIO_CHARS:,} bytes; allowed: a scenario file of at most "
            f"{MAX_SCENARIO_CHARS:,} bytes (see README, Limits)"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{name}: not a text file (byte 0x{data[exc.start]:02x} at offset {exc.start} is not "
            "UTF-8); allowed: a YAML scenario in UTF-8"
        ) from None
    return parse_scenario(text, name, base_dir=str(p.resolve().parent))


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _file_kind(mode: int) -> str | None:
    """What a path that is not a regular file is, in words."""
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return None


@dataclass(frozen=True)
class Machine:
    """What a scenario's runs must fit in: CPUs this process may use and memory it may take."""

    cpus: int
    memory_mb: int

    @classmethod
    def here(cls) -> Machine:
        return cls(cpus=len(os.sched_getaffinity(0)), memory_mb=memory_limit_mb())

    @property
    def max_workers(self) -> int:
        return max(1, min(self.cpus * WORKERS_PER_CPU, self.memory_mb // MB_PER_WORKER))


def mem_total_mb() -> int:
    """The machine's memory (MemTotal in /proc/meminfo), in MB; 0 if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next((int(line.split()[1]) // 1024 for line in f if line.startswith("MemTotal:")), 0)
    except (OSError, ValueError, IndexError):
        return 0


def memory_limit_mb() -> int:
    """The machine's memory, or the cgroup's limit where that is lower (a container)."""
    mb = mem_total_mb()
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
    except OSError:
        return mb
    return min(mb or 2**62, int(limit) // 2**20) if limit.isdigit() else mb


def check_limits(scenario: Scenario, machine: Machine | None = None, *, lifted: bool = False) -> None:
    """Refuse a scenario this machine cannot hold, before anything runs (README, Limits).

    Workers and the dataset's memory are checked against ``machine`` unless ``lifted``
    (``--no-limits``); the batch size against the dataset always: with fewer batches than
    workers, some worker never delivers one and the growth window never opens."""
    if not lifted:
        _check_machine(scenario, machine or Machine.here())
    _check_batches(scenario)


def _check_machine(scenario: Scenario, machine: Machine) -> None:
    flag = "; --no-limits runs it anyway"
    most = max(scenario.workers)
    if most > machine.max_workers:
        raise UsageError(
            f"{scenario.path}: key 'workers': got {most}; allowed on this machine: at most "
            f"{machine.max_workers} ({WORKERS_PER_CPU} per CPU x {machine.cpus} CPUs, and "
            f"{MB_PER_WORKER} MB per worker of {machine.memory_mb:,} MB){flag}"
        )
    need = planned_memory_mb(scenario)
    budget = machine.memory_mb * MEMORY_SHARE
    if need is not None and need > budget:
        key, value = (
            ("decode.images", scenario.decode.images)
            if scenario.decode is not None  # set for the decode workload only
            else ("dataset.records", scenario.dataset.records)
        )
        raise UsageError(
            f"{scenario.path}: key '{key}': got {value:,}; allowed on this machine: a dataset whose "
            f"copies fit in {budget:,.0f} MB ({MEMORY_SHARE:.0%} of {machine.memory_mb:,} MB): "
            f"with {most} workers each holding a copy this scenario needs ~{need:,.0f} MB{flag}"
        )


def planned_memory_mb(scenario: Scenario) -> float | None:
    """Memory the largest run can reach: the dataset in the main process plus a full copy in
    each worker process, and for decode the decoded batches in flight. None for user datasets,
    whose size memprobe cannot know before running them."""
    copies = 1 + max(scenario.workers)
    if scenario.workload == "records":
        d = scenario.dataset
        return d.records * (RECORD_BYTES + RECORD_FLOAT_BYTES * d.floats) * copies / 2**20
    if scenario.workload == "decode":
        dec, lo = scenario.decode, scenario.loader
        assert dec is not None  # parse_scenario sets it for this workload
        pixels = dec.width * dec.height
        in_flight = lo.batch_size * pixels * 3 * lo.prefetch_factor * max(*scenario.workers, 1)
        return (dec.images * pixels * JPEG_BYTES_PER_PIXEL * copies + in_flight) / 2**20
    return None


def _check_batches(scenario: Scenario) -> None:
    if scenario.workload == "factory":
        return  # the dataset's length is known only once the factory ran
    # decode is set for the decode workload only
    per_epoch = scenario.decode.images if scenario.decode is not None else scenario.dataset.records
    items = min(per_epoch, scenario.loader.items or per_epoch)
    most = max(scenario.workers)
    batch = scenario.loader.batch_size
    if most > 1 and -(-items // batch) < most:
        largest = -(-items // (most - 1)) - 1  # the largest batch size that still makes ``most`` batches
        key = "dataset.records" if scenario.workload == "records" else "decode.images"
        raise UsageError(
            f"{scenario.path}: key 'loader.batch_size': got {batch:,} for {items:,} items "
            f"({key}{' / loader.items' if scenario.loader.items else ''}) and {most} workers; "
            f"allowed: at most {largest:,}, so that every worker delivers a batch "
            "(the growth window opens only then)"
        )


def with_overrides(scenario: Scenario, **changes: Any) -> Scenario:
    """A copy of ``scenario`` with top-level fields replaced (used by ``--quick`` and flags)."""
    return replace(scenario, **{k: v for k, v in changes.items() if v is not None})
