"""How often torch's main process misses a DataLoader worker SIGKILLed at an arbitrary moment.

Not a test: it counts. tests/integration/test_run.py's ``fork-kill`` run (the run's process
SIGKILLs worker 0 right after batch 3, ``fault: kill@3``) expects the run to fail naming the
worker; on 2026-11-26 it hung until its timeout once in a CI run, and this script, run by hand on
the 2-core VM, counted 1 hang in 25 runs (24 failed as expected, with three different torch errors
depending on where the worker was when it died). py-spy showed the hang: the main process waits
forever in ``_mark_worker_as_unavailable`` -> ``Event.is_set`` for the done event's lock, which the
killed worker held (its loop checks that event). Since ``memprobe.run.child.kill_worker`` stops the
worker and kills it only while that lock is free: 80 runs, 80 failed as expected, none hung.

    python benchmarks/kill_worker_hang_rate.py --runs 25 [--timeout 20]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from memprobe.run.scenario import parse_scenario
from memprobe.run.session import run_scenario

SCENARIO = """\
name: kill-hang-rate
dataset: {records: 20000}
backends: [arrow]
modes: [fork]
workers: [2]
loader: {batch_size: 64, shuffle: false}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--timeout", type=float, default=20.0, help="each run's timeout_s (a hang ends there)")
    args = ap.parse_args()
    scenario = parse_scenario(SCENARIO, "kill-hang-rate.yaml")
    base = scenario.runs()[0]
    outcomes: collections.Counter[str] = collections.Counter()
    for i in range(args.runs):
        out = Path(tempfile.mkdtemp(prefix="kill-hang-")) / "results"
        run = replace(base, run_id="fork-kill", fault="kill@3", timeout_s=args.timeout)
        t0 = time.monotonic()
        s = run_scenario(scenario, out, runs=[run], render=False).summaries[0]
        error = (s.error or "").split(":")[0]
        outcomes[f"{s.status} {error}"] += 1
        print(f"{i}: {s.status} in {time.monotonic() - t0:.1f} s: {(s.error or '')[:120]}", flush=True)
    print("\n".join(f"{n:4d}  {what}" for what, n in outcomes.most_common()))


if __name__ == "__main__":
    main()
