"""Thread vs process DataLoader workers at equal worker counts, measured by memprobe itself.

Two workloads, each under fork, spawn, forkserver, thread (memprobe's ThreadDataLoader) and
torchdata-thread (torchdata.nodes ParallelMapper with threads), 2 workers, plus a workers=0
baseline ("single": the loading process alone); and under torch-thread (torch's own thread workers,
``DataLoader(worker_method="thread")``) too where the installed torch has them (detected from
DataLoader's signature, not assumed from its version):

* ``pillow``: decode a 640x408 real-photo JPEG, resize (short side 256), centre-crop 224, to a
  uint8 tensor (``benchmarks/workloads.py:pillow_decode_resize``); CPU-heavy, GIL released in
  Pillow's decode and resize.
* ``list``: memprobe's built-in ``list`` records backend (a Python list of dicts, cheap
  per-item work): where thread workers save memory (one copy of the data instead of 1 + workers).
* ``pillow-malloc``: the pillow workload again (fork, thread, torchdata-thread; no baseline) with
  glibc's malloc told not to hand freed memory back to the kernel (``GLIBC_TUNABLES``, see
  ``MALLOC_TUNABLES``): by default every decoded image re-faults ~2 MB of fresh pages (~530 minor
  faults an item) in every mode except torchdata-thread; this pass shows the modes without that.

Every configuration is a separate memprobe run (fresh process, sampled from outside). The whole
matrix is repeated ``--repeats`` times; within a repeat the run order is rotated, so no mode always
runs first or last, and the two workloads alternate. Reported: medians over repeats of items/s
(between memprobe's ``warm`` and ``done`` marks), peak total PSS of the run's process tree,
time to first batch, CPU time and minor page faults per item (from memprobe's per-process
samples, summed over the run's processes within the same window), and the per-repeat throughput
ratios. Machine noise is recorded: load average
before and after, and for every run the machine's busy cores (from /proc/stat) over the run.

    python benchmarks/bench_threads.py [--repeats 3] [--out DIR]

Run it from anywhere; results (every run's folder, ``results.json`` and ``results.md``) go to
``--out``. Takes about 4-8 minutes on 2 cores, depending on the load.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from memprobe.runner import RunState  # noqa: E402
from memprobe.scenario import RunSpec, Scenario, parse_scenario  # noqa: E402
from memprobe.session import Console, run_scenario  # noqa: E402

PROCESS_MODES = ("fork", "spawn", "forkserver")
THREAD_MODES = ("thread", "torchdata-thread")
MODES = PROCESS_MODES + THREAD_MODES
# torch's own thread workers (DataLoader(worker_method="thread")) join the matrix only where the
# installed torch has them: see native_thread_modes().
NATIVE_THREAD_MODES = ("torch-thread",)
ALL_LABELS = ("single",) + MODES + NATIVE_THREAD_MODES

# Keep freed heap memory in the process (no trimming below 256 MB) and serve allocations up to
# 32 MB from the heap instead of fresh mmaps; this disables glibc's dynamic mmap threshold.
MALLOC_TUNABLES = "glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432"
MALLOC_MODES = ("fork", "thread", "torchdata-thread")
WORKLOADS = ("pillow", "list", "pillow-malloc")

PILLOW_YAML = """\
name: bench-threads-pillow
datasets:
  - name: pillow
    factory: "workloads:pillow_decode_resize"
    kwargs: {{images: 256, length: {length}}}
modes: [{modes}]
workers: [{workers}]
loader: {{batch_size: 32, epochs: 1, shuffle: true, prefetch_factor: 2}}
timeout_s: 240
"""

LIST_YAML = """\
name: bench-threads-list
dataset: {{records: {records}, floats: 4, seed: 0}}
backends: [list]
modes: [{modes}]
workers: [0, 2]
loader: {{batch_size: 256, epochs: 1, shuffle: true, prefetch_factor: 2}}
timeout_s: 240
"""


# -- machine facts and noise ---------------------------------------------------------------------

def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def loadavg() -> str:
    return " ".join(_read("/proc/loadavg").split()[:3])


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat (steal counts as busy)."""
    fields = [int(x) for x in _read("/proc/stat").splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def machine() -> dict[str, Any]:
    cpuinfo = _read("/proc/cpuinfo")
    model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
                 platform.processor())
    mem_kb = next((int(ln.split()[1]) for ln in _read("/proc/meminfo").splitlines() if ln.startswith("MemTotal:")), 0)
    import PIL
    import torch

    from memprobe.loaders.thread import gil_enabled, torch_native_thread_workers_available

    try:
        import torchdata
        td = torchdata.__version__
    except ImportError:
        td = None
    return {"cpu_model": model, "cores": os.cpu_count(), "mem_total_gib": round(mem_kb / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(), "torch": torch.__version__,
            "torchdata": td, "pillow": PIL.__version__, "gil_enabled": gil_enabled(),
            "torch_native_thread_workers": torch_native_thread_workers_available()}


def native_thread_modes() -> tuple[str, ...]:
    """``torch-thread`` where the installed torch's DataLoader takes ``worker_method``, else none."""
    from memprobe.loaders.thread import torch_native_thread_workers_available

    return NATIVE_THREAD_MODES if torch_native_thread_workers_available() else ()


def others_busy_cores(seconds: float = 3.0) -> float:
    """Cores kept busy by other processes while this script sleeps."""
    b0, t0 = cpu_ticks()
    time.sleep(seconds)
    b1, t1 = cpu_ticks()
    return (b1 - b0) / max(t1 - t0, 1) * (os.cpu_count() or 1)


class NoiseConsole(Console):
    """Prints one line per run and records the machine's busy cores over each run."""

    def __init__(self) -> None:
        self.busy: dict[str, float] = {}
        self._start: tuple[int, int] = (0, 0)

    def run_started(self, spec: RunSpec, index: int, total: int) -> None:
        self._start = cpu_ticks()

    def run_finished(self, state: RunState) -> None:
        b1, t1 = cpu_ticks()
        b0, t0 = self._start
        cores = (b1 - b0) / max(t1 - t0, 1) * (os.cpu_count() or 1)
        self.busy[state.spec.run_id] = cores
        print(f"  {state.spec.run_id:32s} {state.status:7s} {state.items:>8,} items {state.elapsed_s:6.1f} s"
              f"  machine busy {cores:.2f} cores", flush=True)


# -- the matrix ----------------------------------------------------------------------------------

def scenarios(out: Path, pillow_length: int, records: int) -> dict[str, Scenario]:
    modes = ", ".join(MODES + native_thread_modes())
    texts = {"pillow": PILLOW_YAML.format(length=pillow_length, modes=modes, workers="0, 2"),
             "list": LIST_YAML.format(records=records, modes=modes),
             "pillow-malloc": PILLOW_YAML.format(length=pillow_length, modes=", ".join(MALLOC_MODES),
                                                 workers="2")}
    out.mkdir(parents=True, exist_ok=True)
    result = {}
    for name, text in texts.items():
        path = out / f"{name}.yaml"
        path.write_text(text)
        # base_dir: the factory module (workloads.py) is imported from this folder.
        result[name] = parse_scenario(text, str(path), base_dir=str(HERE))
    return result


def label(spec: RunSpec) -> str:
    return "single" if spec.workers == 0 else spec.mode


def ordered_runs(scenario: Scenario, repeat: int) -> list[RunSpec]:
    """The scenario's runs, rotated by ``repeat`` and reversed on odd repeats, renamed per repeat."""
    runs = scenario.runs()
    k = repeat % len(runs)
    runs = runs[k:] + runs[:k]
    if repeat % 2:
        runs.reverse()
    return [replace(r, run_id=f"{r.run_id}-r{repeat}") for r in runs]


def per_item_costs(root: Path, summary: dict) -> dict[str, dict[str, float]]:
    """CPU ms and minor page faults per item, summed over the run's processes, between the
    ``warm`` and ``done`` marks (memprobe's iteration window)."""
    import pandas as pd

    samples = pd.read_parquet(root / "samples.parquet")
    out = {}
    for s in summary["runs"]:
        meta = json.loads((root / "runs" / s["run_id"] / "meta.json").read_text())
        marks = meta.get("marks", {})
        if s["status"] != "ok" or not s["items_per_s"] or "warm" not in marks or "done" not in marks:
            continue
        w = samples[(samples["run_id"] == s["run_id"]) & (samples["t"] >= marks["warm"])
                    & (samples["t"] <= marks["done"]) & ~samples["missing"].astype(bool)].sort_values("t")
        g = w.groupby("pid")
        items = s["items_per_s"] * (marks["done"] - marks["warm"])
        if items > 0:
            out[s["run_id"]] = {"cpu_ms_per_item": float((g["cpu_s"].last() - g["cpu_s"].first()).sum()) / items * 1e3,
                                "faults_per_item": float((g["minflt"].last() - g["minflt"].first()).sum()) / items}
    return out


def run_matrix(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    scns = scenarios(out, args.pillow_length, args.records)
    results: dict[str, Any] = {"machine": machine(), "command": " ".join([Path(sys.executable).name] + sys.argv),
                               "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               "loadavg_before": loadavg(), "others_busy_cores_before": others_busy_cores(),
                               "runs": []}
    t0 = time.monotonic()
    for repeat in range(args.repeats):
        order = list(WORKLOADS) if repeat % 2 == 0 else list(reversed(WORKLOADS))
        for workload in order:
            console = NoiseConsole()
            print(f"repeat {repeat + 1}/{args.repeats}: {workload}  (load {loadavg()})", flush=True)
            saved = os.environ.get("GLIBC_TUNABLES")
            if workload == "pillow-malloc":  # inherited by the run processes memprobe starts
                os.environ["GLIBC_TUNABLES"] = MALLOC_TUNABLES
            try:
                session = run_scenario(scns[workload], out / f"r{repeat}-{workload}",
                                       runs=ordered_runs(scns[workload], repeat), console=console, render=False)
            finally:
                if saved is None:
                    os.environ.pop("GLIBC_TUNABLES", None)
                else:
                    os.environ["GLIBC_TUNABLES"] = saved
            summary = json.loads((session.root / "summary.json").read_text())
            per_item = per_item_costs(session.root, summary)
            for s in summary["runs"]:
                results["runs"].append({
                    "workload": workload, "repeat": repeat, "label": "single" if s["workers"] == 0 else s["mode"],
                    "run_id": s["run_id"], "status": s["status"], "error": s["error"],
                    "items": s["items"], "items_per_s": s["items_per_s"], "ttfb_s": s["time_to_first_batch_s"],
                    "pss_peak_mb": s["total_pss_peak_mb"], "cpu_cores_used": s["cpu_cores_used"],
                    "machine_busy_cores": console.busy.get(s["run_id"]),
                    **per_item.get(s["run_id"], {})})
    results["loadavg_after"] = loadavg()
    results["others_busy_cores_after"] = others_busy_cores()
    results["wall_s"] = round(time.monotonic() - t0, 1)
    return results


# -- torchdata knobs (in-process side measurement) ------------------------------------------------

def torchdata_variants(records: int, repeats: int) -> str:
    """Items/s of torchdata.nodes thread pipelines on the list dataset, in this process, interleaved:
    the pipeline memprobe's torchdata-thread mode builds, the same without per-item state snapshots
    (``snapshot_frequency=0``), and with items pre-batched per worker task (``prebatch``), next to
    memprobe's ThreadDataLoader. Per-item Python overhead is what separates them."""
    import torch
    import torchdata.nodes as tn
    from torch.utils.data import SequentialSampler, default_collate

    from memprobe.datasets import RecordSpec, build_dataset
    from memprobe.loaders import build_loader

    ds = build_dataset("list", RecordSpec(records=records))

    def pipeline(snapshot_frequency: int = 1, prebatch: int | None = None) -> Any:
        items = tn.ParallelMapper(tn.SamplerWrapper(SequentialSampler(ds)), ds.__getitem__, num_workers=2,
                                  method="thread", in_order=True, snapshot_frequency=snapshot_frequency,
                                  prebatch=prebatch)
        batches = tn.Batcher(items, batch_size=256, drop_last=False)
        collated = tn.ParallelMapper(batches, default_collate, num_workers=1, method="thread",
                                     snapshot_frequency=snapshot_frequency)
        return tn.Loader(tn.Prefetcher(collated, prefetch_factor=4, snapshot_frequency=snapshot_frequency))

    configs = {
        "torchdata-thread (memprobe's pipeline)": lambda: build_loader(
            ds, mode="torchdata-thread", workers=2, batch_size=256, shuffle=False),
        "same, snapshot_frequency=0": lambda: pipeline(0),
        "same, prebatch=256": lambda: pipeline(1, 256),
        "thread (memprobe ThreadDataLoader)": lambda: build_loader(
            ds, mode="thread", workers=2, batch_size=256, shuffle=False),
        "single (workers=0)": lambda: build_loader(ds, mode="fork", workers=0, batch_size=256, shuffle=False),
    }
    rates: dict[str, list[float]] = {k: [] for k in configs}
    for rep in range(repeats):
        for name in (list(configs) if rep % 2 == 0 else list(reversed(configs))):
            t0 = time.perf_counter()
            n = sum(len(b["id"]) for b in configs[name]())
            rates[name].append(n / (time.perf_counter() - t0))
    torch.set_num_threads(os.cpu_count() or 1)  # torchdata's workers set it to 1, process-wide
    lines = [f"torchdata knobs, list dataset ({records:,} records, batch 256, 2 workers), in one process, "
             f"{repeats} interleaved repeats, epoch wall time incl. start-up:", "",
             "| pipeline | items/s (median) | per repeat |", "|---|---:|---|"]
    for name, xs in rates.items():
        lines.append(f"| {name} | {statistics.median(xs):,.0f} | {', '.join(f'{x:,.0f}' for x in xs)} |")
    return "\n".join(lines + [""])


# -- reporting -----------------------------------------------------------------------------------

def _med(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def _gil_text(enabled: bool | None) -> str:
    return {True: "enabled", False: "disabled (free-threaded build)"}.get(enabled, "not recorded")


def _native_text(available: bool | None) -> str:
    if available is None:
        return "not recorded"
    return "measured as mode torch-thread" if available else "not in this torch (no torch-thread runs)"


def cell(results: dict, workload: str, label_: str, repeat: int, key: str) -> float | None:
    for r in results["runs"]:
        if (r["workload"], r["label"], r["repeat"]) == (workload, label_, repeat) and r["status"] == "ok":
            return r.get(key)
    return None


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    repeats = sorted({r["repeat"] for r in results["runs"]})
    lines = [f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['mem_total_gib']} GiB RAM; kernel {m['kernel']}; "
             f"Python {m['python']}, torch {m['torch']}, torchdata {m['torchdata']}, Pillow {m['pillow']}; "
             f"GIL {_gil_text(m.get('gil_enabled'))}; torch's native thread workers "
             f"{_native_text(m.get('torch_native_thread_workers'))}.",
             f"Command: `{results['command']}` ({results['wall_s']:.0f} s, {len(repeats)} repeats).",
             f"Noise: load average {results['loadavg_before']} before, {results['loadavg_after']} after; "
             f"other processes kept {results['others_busy_cores_before']:.2f} cores busy before and "
             f"{results['others_busy_cores_after']:.2f} after.", ""]
    for workload in WORKLOADS:
        if not any(r["workload"] == workload for r in results["runs"]):
            continue
        lines += [f"### {workload}: medians over {len(repeats)} repeats", "",
                  "| mode | items/s | x thread | CPU ms per item | minor faults per item | total PSS peak (MB) | "
                  "time to first batch (s) | CPU cores used | machine busy (cores) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        thread_rate = _med([cell(results, workload, "thread", r, "items_per_s") for r in repeats])
        for lab in ALL_LABELS:
            col = {k: _med([cell(results, workload, lab, r, k) for r in repeats])
                   for k in ("items_per_s", "pss_peak_mb", "ttfb_s", "cpu_cores_used", "machine_busy_cores",
                             "cpu_ms_per_item", "faults_per_item")}
            if col["items_per_s"] is None and col["pss_peak_mb"] is None:
                continue  # mode not in this workload
            rel = col["items_per_s"] / thread_rate if col["items_per_s"] and thread_rate else None
            small = ",.0f" if (col["items_per_s"] or 0) > 1000 else ",.1f"
            lines.append(f"| {lab} | {_fmt(col['items_per_s'], small)} | {_fmt(rel, '.2f')} | "
                         f"{_fmt(col['cpu_ms_per_item'], '.3f' if workload == 'list' else '.2f')} | "
                         f"{_fmt(col['faults_per_item'], '.0f')} | "
                         f"{_fmt(col['pss_peak_mb'])} | "
                         f"{_fmt(col['ttfb_s'], '.2f')} | {_fmt(col['cpu_cores_used'], '.2f')} | "
                         f"{_fmt(col['machine_busy_cores'], '.2f')} |")
        lines += ["", "Per repeat (same repeat = same few minutes of machine state):", "",
                  "| repeat | thread / best process mode | best process mode | thread / fork | "
                  "torchdata-thread / thread | CPU per item: thread / fork | PSS thread / fork | "
                  "PSS thread / spawn |", "|---|---:|---|---:|---:|---:|---:|---:|"]
        rows = []
        for r in repeats:
            rate = {lab: cell(results, workload, lab, r, "items_per_s") for lab in ALL_LABELS}
            pss = {lab: cell(results, workload, lab, r, "pss_peak_mb") for lab in ALL_LABELS}
            cpu = {lab: cell(results, workload, lab, r, "cpu_ms_per_item") for lab in ALL_LABELS}
            procs = {k: v for k, v in rate.items() if k in PROCESS_MODES and v}
            best = max(procs, key=procs.get) if procs else None
            rows.append((str(r + 1), best or "-", [
                _ratio(rate["thread"], procs.get(best)), _ratio(rate["thread"], rate["fork"]),
                _ratio(rate["torchdata-thread"], rate["thread"]), _ratio(cpu["thread"], cpu["fork"]),
                _ratio(pss["thread"], pss["fork"]), _ratio(pss["thread"], pss["spawn"])]))
        rows.append(("median", "", [_med([row[2][i] for row in rows]) for i in range(6)]))
        for name, best, vals in rows:
            cells = [_fmt(v, ".2f") for v in vals]
            lines.append(f"| {name} | {cells[0]} | {best} | " + " | ".join(cells[1:]) + " |")
        lines.append("")
    failed = [r for r in results["runs"] if r["status"] != "ok"]
    if failed:
        lines += ["Failed runs:", ""] + [f"* {r['run_id']}: {r['error']}" for r in failed] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pillow-length", type=int, default=768, help="items per pillow run (default 768)")
    ap.add_argument("--records", type=int, default=100_000, help="records in the list dataset (default 100000)")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default /tmp/bench-threads-<time>)")
    ap.add_argument("--report-only", action="store_true", help="re-render results.md from --out/results.json")
    ap.add_argument("--torchdata-variants", action="store_true",
                    help="only the in-process torchdata knobs comparison on the list dataset (~30 s)")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = Path("/tmp") / f"bench-threads-{datetime.now().strftime('%Y%m%dT%H%M%S')}"
    if args.torchdata_variants:
        print(torchdata_variants(args.records, max(args.repeats, 1)))
        return 0
    if args.report_only:
        results = json.loads((args.out / "results.json").read_text())
    else:
        results = run_matrix(args)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    text = report(results)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
