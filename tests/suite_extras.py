"""Skips for the tests that need a package the suite's interpreter may lack, naming it and why:
`make install-test` and `make test-python` install memprobe's extras (tools/suite_packages.py),
which on a free-threaded interpreter leave out the packages with no wheel for it, each for the
reason tools/suite_packages.py gives; the skip repeats that reason."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "suite_packages.py"


@functools.cache
def tool():  # tools/ is no package: the script, loaded by its path (it runs nothing on import)
    spec = importlib.util.spec_from_file_location("suite_packages", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def why_missing(*packages: str) -> str | None:
    """None when every package imports; else the reason a skip gives: which are not installed,
    and why each was left out of this interpreter, where tools/suite_packages.py leaves it out."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if not missing:
        return None
    tool_ = tool()
    left_out = tool_.FREE_THREADED_LEFT_OUT if tool_.free_threaded() else {}
    whys = [f"{p}: {left_out[p]}" for p in missing if p in left_out]
    if whys:
        return f"not installed on this free-threaded interpreter: {'; '.join(whys)}"
    return f"not installed: {', '.join(missing)} (make install-test installs it)"


def needs(*packages: str) -> pytest.MarkDecorator:
    """A skipif mark for tests that need ``packages``, with :func:`why_missing`'s reason."""
    reason = why_missing(*packages)
    return pytest.mark.skipif(reason is not None, reason=reason or "")
