"""memprobe as a user who ran `pip install torch-memprobe` has it: the wheel built from this
checkout, installed into a virtual environment of its own, used from a folder that holds no
repository. The shipped scenarios (and the factory module one of them imports) must come with
the wheel, and run by name.

The new environment gets memprobe from the wheel alone; its dependencies (torch, numpy, ...)
come from this test's environment through a path file, which adds that site-packages folder to
``sys.path`` without running the ``.pth`` files in it: the editable install of this checkout
(a ``.pth`` import hook) is not loaded, so nothing of the checkout is importable there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What a build never needs: environments, caches, results, earlier builds.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "reports", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "test-artifacts"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a new virtual environment holding the wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy: the build's build/ and egg-info stay out of the checkout
    shutil.copytree(REPO, source, ignore=NOT_SOURCES, symlinks=True)
    dist = tmp / "dist"
    offline = ["--no-deps", "--no-index", "-q"]  # this checkout's code alone, nothing downloaded
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            *offline,
            "--no-build-isolation",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("torch_memprobe-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", *offline, str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def run(bin_dir: Path, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_wheel_alone_runs_a_shipped_scenario_by_name(installed: Path, tmp_path: Path) -> None:
    where = run(installed, "python", "-c", "import memprobe; print(memprobe.__file__)", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout  # not the checkout

    done = run(installed, "memprobe", "run", "quick", "--quick", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["scenario"] == "quick"
    assert [r["status"] for r in summary["runs"]] == ["ok"] * 4
    assert (tmp_path / "out" / "report.html").is_file()


@pytest.mark.slow
def test_the_wheel_lists_copies_and_imports_every_shipped_scenario(installed: Path, tmp_path: Path) -> None:
    shipped = sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml"))
    listed = run(installed, "memprobe", "scenarios", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert re.findall(r"^  (\S+) \(\d+ runs?\)$", listed.stdout, re.MULTILINE) == shipped

    # Every shipped scenario's factories import from the wheel, as `memprobe run NAME` imports
    # them before its first run (user_datasets: from the module next to it).
    check = (
        "import sys; from memprobe.cli.run import _preflight; from memprobe.run.scenario import load_scenario;"
        "from memprobe.run.scenario_file import find_scenario;"
        "[_preflight(load_scenario(find_scenario(n))) for n in sys.argv[1:]]"
    )
    imported = run(installed, "python", "-c", check, *shipped, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-3000:]

    copied = run(installed, "memprobe", "scenarios", "copy", "user_datasets", "mine.yaml", cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    assert (tmp_path / "mine.yaml").read_text() == (REPO / "scenarios" / "user_datasets.yaml").read_text()
    assert (tmp_path / "user_datasets.py").read_text() == (
        REPO / "scenarios" / "user_datasets.py"
    ).read_text()
