"""Where the test suite's CPU goes: CPU seconds per test, its own and its processes'.

Not a test. As a pytest plugin it writes, for every test (set-up, call and tear-down: a module's
fixture is charged to the first test that asks for it), the CPU its pytest process spent and the
CPU of every process it started and waited for (``RUSAGE_CHILDREN``: a child's own waited-for
children are in it too, so a `memprobe run` and its run child and their workers count), one JSON
file per xdist worker. Run with this folder on ``PYTHONPATH``, as ``make test`` runs the suite:

    rm -rf /tmp/suite-cpu
    PYTHONPATH=benchmarks SUITE_CPU_DIR=/tmp/suite-cpu .venv/bin/python -m pytest -p suite_cpu \\
        -n 3 --dist loadgroup -q
    python benchmarks/suite_cpu.py /tmp/suite-cpu            # per module, the costliest first
    python benchmarks/suite_cpu.py /tmp/suite-cpu --tests 30 # the 30 costliest tests

A process started and never waited for (a daemon left running, a process of another session) is
not counted; nor are xdist's start-up and collection (the sum is ~95 % of the run's user + system
CPU under /usr/bin/time). Compare two runs of one machine side by side: on the build VM the same
``import torch`` costs 1.6 CPU-s with one core busy and 2.2-2.4 with both (docs/performance.md,
"The test suite's CPU").
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

_rows: list[tuple[str, float, float, float]] = []


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


try:
    import pytest
except ImportError:  # the summary below needs no pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
        own0, children0 = _cpu()
        t0 = time.monotonic()
        yield
        own1, children1 = _cpu()
        _rows.append((item.nodeid, own1 - own0, children1 - children0, time.monotonic() - t0))

    def pytest_sessionfinish(session: Any) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER") is None and _rows == []:
            return  # the xdist controller: its workers ran the tests
        out = Path(os.environ.get("SUITE_CPU_DIR", "suite-cpu"))
        out.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (out / f"cpu-{worker}.json").write_text(json.dumps(_rows))


def summary(folder: Path, tests: int) -> str:
    rows = [r for f in sorted(folder.glob("cpu-*.json")) for r in json.loads(f.read_text())]
    if not rows:
        raise SystemExit(f"suite_cpu: no cpu-*.json in {folder}: run pytest with -p suite_cpu first")
    own = sum(r[1] for r in rows)
    children = sum(r[2] for r in rows)
    lines = [
        f"{len(rows)} tests, {own + children:.0f} CPU-s ({own:.0f} in pytest, {children:.0f} in their processes)"
    ]
    if tests:
        for name, o, c, wall in sorted(rows, key=lambda r: -(r[1] + r[2]))[:tests]:
            lines.append(f"{o + c:7.1f} CPU-s {wall:7.1f} s wall  {name}")
        return "\n".join(lines)
    by: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for name, o, c, wall in rows:
        acc = by[name.split("::")[0]]
        acc[0] += o
        acc[1] += c
        acc[2] += wall
        acc[3] += 1
    lines.append(f"{'CPU-s':>7} {'pytest':>7} {'procs':>7} {'wall s':>7} {'tests':>5}  module")
    for module, (o, c, wall, n) in sorted(by.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        lines.append(f"{o + c:7.1f} {o:7.1f} {c:7.1f} {wall:7.1f} {n:5.0f}  {module}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="SUITE_CPU_DIR of a run with -p suite_cpu")
    p.add_argument("--tests", type=int, default=0, help="the N costliest tests instead of the modules")
    args = p.parse_args(argv)
    print(summary(args.folder, args.tests))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
