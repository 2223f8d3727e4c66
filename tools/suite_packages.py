"""Install what the suite needs into the interpreter that runs this script, as `make install-test`
installs it into .venv: memprobe editable from this checkout and pyproject.toml's extras
`test`, `images`, `nvimgcodec` and `trainers`, torch kept at the version already installed
(tools/build_python.sh chose it for the interpreter). `make test-python` and
tools/build_python.sh run it with the venv's python:

    /work/pythons/3.13t/venv/bin/python tools/suite_packages.py [PIP ARGS...]

On a free-threaded interpreter the packages in FREE_THREADED_LEFT_OUT are left out, each for the
reason given there (no wheel for it and a source build this machine cannot do or finish); the
tests that need them skip, naming what is not installed. Each left-out package is printed, with
why. Extra arguments go to pip (tools/build_python.sh passes --find-links to its wheels).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
EXTRAS = ("test", "images", "nvimgcodec", "trainers")  # what make install-test installs
# Checked 2026-11-29 with `pip install --dry-run --prefer-binary` on 3.13.15t: none of these (nor
# a package they need) has a cp313t wheel on the registry this machine reaches.
FREE_THREADED_LEFT_OUT = {
    "simplejpeg": "no cp313t wheel; its source build downloads libjpeg-turbo, which this machine cannot reach",
    "mypy": "its ast-serialize has no cp313t wheel and its Rust build fetches crates; only make check-code uses it",
    "types-pyyaml": "mypy's stubs, left out with mypy",
    "transformers": "tokenizers and safetensors have no cp313t wheel (Rust source builds)",
    "accelerate": "safetensors has no cp313t wheel (a Rust source build)",
    "tensorboard": "grpcio has no cp313t wheel; its source build compiles gRPC's C++ core",
}


def free_threaded() -> bool:
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def requirements(pyproject: Path, left_out: dict[str, str]) -> list[str]:
    """The extras' requirements, in pyproject's order, once each, less those ``left_out`` names."""
    with pyproject.open("rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    wanted = dict.fromkeys(r for group in EXTRAS for r in extras[group])
    return [r for r in wanted if _name(r) not in left_out]


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match[0]).lower()


def main(pip_args: list[str]) -> int:
    left_out = FREE_THREADED_LEFT_OUT if free_threaded() else {}
    for name, why in left_out.items():
        print(f"suite_packages: {name} left out on this free-threaded interpreter: {why}")
    pins = []  # no torch yet: pip chooses it, as pyproject.toml allows
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        pins.append(f"torch=={importlib.metadata.version('torch')}")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--progress-bar", "off", "--prefer-binary"]
    command += [*pip_args, *pins, "-e", str(REPO), *requirements(REPO / "pyproject.toml", left_out)]
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
