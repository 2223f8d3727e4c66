"""User dataset factories: named, imported by name, and checked, with errors that name them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from memprobe.core.errors import FactoryError, UsageError
from memprobe.run.api import factory_ref
from memprobe.run.factory import call_factory, doing, load_factory, parse_ref, tell_phases
from memprobe.run.scenario import RunSpec, parse_scenario


def module_level_factory(n: int = 3) -> list[int]:
    return list(range(n))


def not_a_dataset() -> object:
    return object()


def broken(path: str = "/data/train.parquet") -> list[int]:
    raise FileNotFoundError(f"no such file: {path}")


BROKEN_LINE = broken.__code__.co_firstlineno + 1


def a_frame():
    import pandas as pd

    return pd.DataFrame({"path": ["a.jpg", "b.jpg"], "label": [0, 1]})


def a_dict() -> dict:
    return {"train": [1, 2, 3]}


class FrameDataset:
    """Map-style, holding a frame: returns row i (what the error asks for)."""

    def __init__(self) -> None:
        self.frame = a_frame()

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, i: int) -> dict:
        return dict(self.frame.iloc[i])


def test_load_factory_imports_by_name() -> None:
    assert load_factory(f"{__name__}:module_level_factory") is module_level_factory


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        (f"{__name__}:missing", "has no attribute 'missing'"),
        ("os:sep", "str object is not callable"),
        ("nocolon", "expected 'module.path:callable'"),
    ],
)
def test_load_factory_errors_name_the_factory(ref: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        load_factory(ref)
    assert fragment in str(info.value)
    assert ref in str(info.value)


def test_factory_result_must_be_a_dataset() -> None:
    assert call_factory(f"{__name__}:module_level_factory", {"n": 2}) == [0, 1]
    with pytest.raises(UsageError, match=r"returned builtins\.object, which is not a dataset"):
        call_factory(f"{__name__}:not_a_dataset", {})


def test_a_factory_that_raises_is_named_with_its_error() -> None:
    ref = f"{__name__}:broken"
    with pytest.raises(UsageError) as info:
        call_factory(ref, {"path": "/x.parquet"})
    here = os.path.relpath(__file__)  # a path inside the current folder is shown relative to it
    here = __file__ if here.startswith("..") else here
    assert str(info.value) == (
        f"dataset factory {ref!r} raised FileNotFoundError: no such file: /x.parquet; "
        f'at {here}:{BROKEN_LINE} in broken (raise FileNotFoundError(f"no such file: {{path}}"))'
    )
    assert isinstance(info.value.__cause__, FileNotFoundError)  # the user's traceback stays chained
    with pytest.raises(
        UsageError, match=r"broken'.* raised TypeError: .*unexpected keyword argument 'split'"
    ):
        call_factory(ref, {"split": "train"})


@pytest.mark.parametrize(("name", "kind"), [("a_frame", "pandas"), ("a_dict", "builtins.dict")])
def test_a_frame_or_a_dict_is_not_a_dataset(name: str, kind: str) -> None:
    # Both have __getitem__ and __len__, but dataset[0] is a column or key lookup, not item 0.
    with pytest.raises(UsageError) as info:
        call_factory(f"{__name__}:{name}", {})
    message = str(info.value)
    assert f"'{__name__}:{name}' returned {kind}" in message and "which is not a dataset" in message
    assert "__getitem__(i) returns item i" in message


def test_a_dataset_wrapping_a_frame_is_accepted() -> None:
    dataset = call_factory(f"{__name__}:FrameDataset", {})
    assert dataset[1] == {"path": "b.jpg", "label": 1}


def test_factory_ref_needs_an_importable_function() -> None:
    assert factory_ref(module_level_factory) == f"{__name__}:module_level_factory"
    with pytest.raises(UsageError, match="importable by name"):
        factory_ref(lambda: [1])

    def local() -> list[int]:
        return [1]

    with pytest.raises(UsageError, match="importable by name"):
        factory_ref(local)


def test_scenario_datasets_become_the_backend_axis() -> None:
    s = parse_scenario(
        """
datasets:
  - {name: coco, factory: "pkg.data:coco", kwargs: {n: 5}}
  - {factory: "pkg.data:frame"}
modes: [fork, thread]
expect: [{backend: coco, verdict: growing}]
""",
        "s.yaml",
    )
    runs = {r.run_id: r for r in s.runs()}
    assert set(runs) == {"coco-fork-w2", "coco-thread-w2", "frame-fork-w2", "frame-thread-w2"}
    assert runs["coco-fork-w2"].factory.kwargs == {"n": 5}
    assert runs["coco-fork-w2"].expect == "growing" and runs["frame-fork-w2"].expect is None


def test_a_dataset_entry_with_its_own_batch_size_runs_with_it_and_the_others_with_the_loader_s() -> None:
    s = parse_scenario(
        """
datasets:
  - {name: light-b16, factory: "pkg.data:images", batch_size: 16}
  - {name: light-b64, factory: "pkg.data:images"}
modes: [fork]
workers: [0, 2]
loader: {batch_size: 64}
""",
        "s.yaml",
    )
    batch = {r.run_id: r.loader.batch_size for r in s.runs()}
    assert batch == {
        "light-b16-single-w0": 16,
        "light-b16-fork-w2": 16,
        "light-b64-single-w0": 64,
        "light-b64-fork-w2": 64,
    }
    # What the run's process gets back from its spec (the JSON it is handed) is the same.
    assert RunSpec.from_dict(json.loads(json.dumps(s.runs()[0].to_dict()))).loader.batch_size == 16


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('dataset: {factory: "pkg"}', "key 'dataset.factory': got 'pkg'"),
        ('datasets: [{factory: "a:b", batch_size: 0}]', "key 'datasets[0].batch_size': got 0"),
        ('datasets: [{factory: "a:b", batch_size: "16"}]', "key 'datasets[0].batch_size'"),
        ('dataset: {factory: "a:b", kwargs: [1]}', "key 'dataset.kwargs'"),
        ('datasets: [{factory: "a:b"}, {factory: "c:b"}]', "distinct 'name's"),
        ('datasets: [{factory: "a:b"}]\nbackends: [list]', "no 'backends' with user datasets"),
    ],
)
def test_bad_factory_entries_are_rejected(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_scenario(text, "bad.yaml")
    assert str(info.value).startswith("bad.yaml: ")
    assert fragment in str(info.value)


# -- a user's module that fails in any way: one FactoryError naming it (issue 39) ------------------


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        (".x:y", "'.x' is not the name of a module (a relative name"),
        ("..pkg.data:build", "'..pkg.data' is not the name of a module (a relative name"),
        ("mod:", "no callable after ':'"),
        (":f", "no module before ':'"),
        ("my-data:build", "'my-data' is not the name of a module"),
        ("class:build", "'class' is not the name of a module"),
        ("pkg.data:build:x", "'build:x' is not the name of a callable in it"),
        ("pkg.data:build()", "'build()' is not the name of a callable in it"),
    ],
)
def test_a_reference_that_names_no_factory_is_refused_as_text(ref: str, why: str) -> None:
    before = set(sys.modules)
    with pytest.raises(FactoryError) as info:
        parse_ref(ref)
    assert str(info.value).startswith(f"dataset factory {ref!r}: {why}")
    assert str(info.value).endswith("expected 'module.path:callable', e.g. 'mypkg.data:build_dataset'")
    with pytest.raises(FactoryError, match=r"is not the name|no callable|no module"):
        load_factory(ref)  # before: `.x:y` a TypeError from importlib, a traceback
    assert set(sys.modules) == before  # nothing imported


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder of modules, first on the path; the current folder."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _module(project: Path, name: str, text: str) -> str:
    (project / f"{name}.py").write_text(text)
    return name


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "import json\nx = 1\nraise RuntimeError('no data here')\ndef f(): pass\n",
            (
                "importing module '{m}' raised RuntimeError: no data here; "
                "at {m}.py:3 in <module> (raise RuntimeError('no data here'))"
            ),
        ),
        ("def f(:\n    pass\n", "importing module '{m}' raised SyntaxError: invalid syntax ({m}.py, line 1)"),
        ("import sys\nsys.exit(3)\n", "importing module '{m}' called sys.exit(3); at {m}.py:2 in <module>"),
        ("raise KeyboardInterrupt\n", "importing module '{m}' raised KeyboardInterrupt; at {m}.py:1"),
        (
            "import not_installed_anywhere_xyz\n",
            "importing module '{m}' raised ModuleNotFoundError: No module",
        ),
        (
            "def __getattr__(name):\n    raise ValueError(name)\n",
            "looking up 'f' raised ValueError: f; at {m}.py:2 in __getattr__",
        ),
    ],
    ids=["raises", "SyntaxError", "sys.exit", "KeyboardInterrupt", "imports what is missing", "__getattr__"],
)
def test_a_module_that_fails_at_import_is_one_factory_error_naming_it_and_where(
    project: Path, text: str, words: str
) -> None:
    m = _module(project, "users_module", text)
    with pytest.raises(FactoryError) as info:
        load_factory(f"{m}:f")  # before: the module's own exception (SystemExit, KeyboardInterrupt) escaped
    assert str(info.value).startswith(f"dataset factory '{m}:f': " + words.format(m=m)), str(info.value)
    assert "\n" not in str(info.value)


def test_a_factory_that_exits_or_is_interrupted_is_one_factory_error(project: Path) -> None:
    m = _module(
        project,
        "exits_when_called",
        "import sys\ndef leaves():\n    sys.exit('bye')\ndef interrupted():\n    raise KeyboardInterrupt\n",
    )
    with pytest.raises(
        FactoryError, match=rf"^dataset factory '{m}:leaves' called sys.exit\('bye'\); at {m}.py:3"
    ):
        call_factory(f"{m}:leaves", {})  # before: SystemExit, which ended the run's process silently
    with pytest.raises(
        FactoryError, match=rf"^dataset factory '{m}:interrupted' raised KeyboardInterrupt; at"
    ):
        call_factory(f"{m}:interrupted", {})


def test_the_user_s_innermost_frames_are_named_not_the_libraries(project: Path) -> None:
    m = _module(
        project,
        "reads_json",
        "import json\n\ndef _read(text):\n    return json.loads(text)\n\ndef build(text='{'):\n"
        "    return _read(text)\n",
    )
    with pytest.raises(FactoryError) as info:
        call_factory(f"{m}:build", {})
    message = str(info.value)
    assert message.startswith(f"dataset factory '{m}:build' raised JSONDecodeError: ")
    # json's own frames (the standard library) and memprobe's are left out
    assert message.endswith(
        f"; at {m}.py:4 in _read (return json.loads(text)), called from {m}.py:7 in build"
    ), message
    assert "decoder.py" not in message and "factory.py" not in message


def test_a_message_of_any_length_stays_one_line_s_worth(project: Path) -> None:
    m = _module(project, "long_error", "def build():\n    raise ValueError('x' * 100_000)\n")
    with pytest.raises(FactoryError) as info:
        call_factory(f"{m}:build", {})
    assert len(str(info.value)) < 1000 and "xxx..." in str(info.value)


def test_the_phases_are_told_as_they_happen(project: Path) -> None:
    told: list[tuple[str, str]] = []
    tell_phases(lambda ref, phase: told.append((ref, phase)))
    try:
        call_factory(f"{__name__}:module_level_factory", {"n": 2})
        assert told == [(f"{__name__}:module_level_factory", p) for p in ("import", "call", "built")]
        told.clear()
        m = _module(project, "fails_importing", "raise OSError('disk')\n")
        with pytest.raises(FactoryError):
            call_factory(f"{m}:f", {})
        assert told == [(f"{m}:f", "import")]  # the last phase told is what failed or did not return
    finally:
        tell_phases(None)
    assert doing("pkg.data:build", "import") == "importing module 'pkg.data'"
    assert doing("pkg.data:build", "call") == "calling it"


def test_a_scenario_s_factory_is_checked_as_text_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        parse_scenario('dataset: {factory: ".x:y"}\n', "s.yaml")  # before: accepted, then a traceback
    assert str(info.value).startswith("s.yaml: key 'dataset.factory': got '.x:y'; allowed: ")
    assert "here '.x' is not the name of a module (a relative name" in str(info.value)


def test_profile_never_imports_the_module_of_a_factory_it_is_given(project: Path) -> None:
    # A function whose module this process has not imported (a copy made elsewhere, a module
    # loaded under another name): importing it here would run the user's module in the caller's
    # process, where nothing bounds it. Refused, saying why, and the module was not run.
    marker = project / "imported"
    _module(project, "never_run_here", f"open({str(marker)!r}, 'w').close()\ndef build(): return [1]\n")

    def build() -> list[int]:
        return [1]

    build.__module__, build.__qualname__ = "never_run_here", "build"
    with pytest.raises(UsageError, match="importing it by name does not give it"):
        factory_ref(build)
    assert not marker.exists()  # before: imported in this process (then "a different object")
    assert factory_ref("never_run_here:build") == "never_run_here:build" and not marker.exists()
    with pytest.raises(FactoryError, match="no callable after ':'"):
        factory_ref("never_run_here:")
