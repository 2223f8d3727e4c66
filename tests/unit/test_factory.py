"""User dataset factories: named, imported by name, and checked, with errors that name them."""

from __future__ import annotations

import pytest

from memprobe.core.errors import UsageError
from memprobe.run.api import factory_ref
from memprobe.run.factory import call_factory, load_factory
from memprobe.run.scenario import parse_scenario


def module_level_factory(n: int = 3) -> list[int]:
    return list(range(n))


def not_a_dataset() -> object:
    return object()


def broken(path: str = "/data/train.parquet") -> list[int]:
    raise FileNotFoundError(f"no such file: {path}")


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
    assert str(info.value) == f"dataset factory {ref!r} raised FileNotFoundError: no such file: /x.parquet"
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


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('dataset: {factory: "pkg"}', "key 'dataset.factory': got 'pkg'"),
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
