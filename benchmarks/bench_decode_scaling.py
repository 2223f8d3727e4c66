"""Decode throughput through DataLoaders: scaling over the single-core rate, thread vs process.

Not a test: it measures and prints markdown for docs/performance.md.

    python benchmarks/bench_decode_scaling.py [--repeats 3] [--images 512] [--workers 2]

Per repeat (configurations interleaved so that machine noise hits all of them alike):
  1. the single-core decode rate of each decoder: a subprocess pinned to one core first checks
     that the decoder gives Pillow's pixels on every JPEG (it stops otherwise), then decodes the
     same JPEGs in a loop (no DataLoader), images/s. Decoded images are held a batch at a time,
     as a loader worker holds them until collate: freeing each image at once makes Pillow
     ~1.45x slower (glibc gives the pages back and faults them in again: 606 minor faults per
     image against 210), which would understate the single-core rate and overstate scaling;
  2. the decode scenario (decoders x fork/spawn/thread x N workers) through memprobe's runner:
     loader images/s in the growth window (warm -> done), total PSS, CPU cores used.
Then: scaling = best mode's images/s / (N x single-core rate) and thread / best-process ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

SINGLE_CORE = r"""
import json, os, sys, time
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
from memprobe.decode import check_against_pillow, make_decoder
from memprobe.decode.images import cached_jpeg_table
names, images, batch = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
blobs = [b.as_py() for b in cached_jpeg_table(images).column("jpeg")]
out = {}
for name in names:
    dec = make_decoder(name, device="cpu", **({"max_num_cpu_threads": 1} if name == "nvimgcodec" else {}))
    check_against_pillow(dec, blobs)  # correctness first; also the warm-up
    t = time.perf_counter()
    for i in range(0, len(blobs), batch):
        held = [dec.decode(b) for b in blobs[i:i + batch]]  # until the batch is done, as in a worker
    out[name] = len(blobs) / (time.perf_counter() - t)
print(json.dumps(out))
"""
BATCH_SIZE = 64  # the loader runs' batch size; the single-core loop holds images in batches of it too


def single_core(decoders: list[str], images: int) -> dict[str, float]:
    res = subprocess.run(
        [sys.executable, "-c", SINGLE_CORE, ",".join(decoders), str(images), str(BATCH_SIZE)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def loader_runs(decoders: list[str], images: int, workers: int, repeat: int, base: Path) -> list[dict]:
    from memprobe.run.scenario import parse_scenario
    from memprobe.run.session import run_scenario

    text = (
        f"{{name: decode-bench, decode: {{images: {images}}}, decoders: [{', '.join(decoders)}], "
        f"modes: [fork, spawn, thread], workers: [{workers}], loader: {{batch_size: {BATCH_SIZE}, epochs: 4, shuffle: false, persistent_workers: true}}}}"
    )
    result = run_scenario(parse_scenario(text, "bench.yaml"), base / f"r{repeat}", render=False)
    return [s.to_dict() for s in result.summaries]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--decoders", default="pillow,nvimgcodec")
    args = p.parse_args()
    decoders = args.decoders.split(",")
    print(
        f"command: python {' '.join(sys.argv)}\nloadavg at start: {Path('/proc/loadavg').read_text().split()[:3]}"
    )
    singles: dict[str, list[float]] = defaultdict(list)
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, rate in single_core(decoders, args.images).items():
                singles[name].append(rate)
            for s in loader_runs(decoders, args.images, args.workers, r, Path(tmp)):
                runs[(s["backend"], s["mode"])].append(s)
    report(decoders, singles, runs, args.workers)
    print(f"\nloadavg at end: {Path('/proc/loadavg').read_text().split()[:3]}")


def _med(xs: list[float | None]) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def report(decoders: list[str], singles: dict, runs: dict, workers: int) -> None:
    print(
        "\n| decoder (backend) | single-core img/s | mode | loader img/s (median) | per repeat | "
        "CPU cores used | peak total PSS MB |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in decoders:
        one = _med(singles[name])
        for mode in ("fork", "spawn", "thread"):
            rs = runs[(name, mode)]
            rates = [s["items_per_s"] for s in rs]
            backend = rs[0].get("decoder_backend") if rs else "?"
            failed = [s["error"] for s in rs if s["status"] != "ok"]
            per = ", ".join(f"{x:,.0f}" for x in rates if x) or ("failed: " + failed[0] if failed else "-")
            print(
                f"| {name} ({backend}) | {one:,.0f} | {mode} | {_med(rates):,.0f} | {per} | "
                f"{_med([s['cpu_cores_used'] for s in rs]):.2f} | {_med([s['total_pss_peak_mb'] for s in rs]):,.0f} |"
            )
    print(f"\n| decoder | best mode | scaling = best / ({workers} x single-core) | thread / best process |")
    print("|---|---|---|---|")
    for name in decoders:
        med = {m: _med([s["items_per_s"] for s in runs[(name, m)]]) for m in ("fork", "spawn", "thread")}
        best_mode = max(med, key=lambda m: med[m] if med[m] == med[m] else -1)
        best_proc = max(med["fork"], med["spawn"])
        print(
            f"| {name} | {best_mode} | {med[best_mode] / (workers * _med(singles[name])):.2f} | "
            f"{med['thread'] / best_proc:.2f} |"
        )


if __name__ == "__main__":
    main()
