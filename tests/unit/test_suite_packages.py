"""tools/suite_packages.py, which installs the suite's packages into another interpreter's venv
(make test-python), and the skips of tests/suite_extras.py that name what it left out."""

from __future__ import annotations

import re

from suite_extras import tool, why_missing

NOT_A_MODULE = "memprobe_no_such_package"


def _names(requirements: list[str]) -> set[str]:
    return {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", r)[0]).lower() for r in requirements}


def test_the_extras_make_install_test_installs_less_only_what_a_free_threaded_python_leaves_out() -> None:
    suite = tool()
    every = _names(suite.requirements(suite.REPO / "pyproject.toml", {}))
    assert {"tensorboard", "prometheus-client", "lightning", "transformers", "pytest-xdist"} <= every
    left_out = suite.FREE_THREADED_LEFT_OUT
    assert set(left_out) <= every  # a name that is no requirement would leave nothing out
    kept = _names(suite.requirements(suite.REPO / "pyproject.toml", left_out))
    assert kept == every - set(left_out)


def test_a_skip_names_the_package_and_why_a_free_threaded_python_lacks_it(monkeypatch) -> None:
    suite = tool()
    monkeypatch.setitem(suite.FREE_THREADED_LEFT_OUT, NOT_A_MODULE, "no wheel for it")
    monkeypatch.setattr(suite, "free_threaded", lambda: True)
    assert why_missing("json", NOT_A_MODULE) == (
        f"not installed on this free-threaded interpreter: {NOT_A_MODULE}: no wheel for it"
    )
    monkeypatch.setattr(suite, "free_threaded", lambda: False)
    assert why_missing(NOT_A_MODULE) == f"not installed: {NOT_A_MODULE} (make install-test installs it)"
    assert why_missing("json") is None
