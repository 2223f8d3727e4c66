"""What the attribution of copied pages costs (memprobe.probe.attribution): the object walk's
objects per second and peak memory, and the pagemap reads and the join per worker.

Not a test. A parent builds a torchvision DatasetFolder-shaped dataset of N records (``samples``:
(path, class) tuples, ``targets``: ints, ``classes``: 1,000 names), forks 2 workers that read
every sample's path and wait, then takes the attribution as a run's process does: each worker's
pages read, the dataset walked, the join. The walk's peak memory is the rise of this process's
peak RSS (VmHWM, reset just before through /proc/self/clear_refs).

    python benchmarks/bench_attribution.py --records 1000000
    python benchmarks/bench_attribution.py --records 5000000
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from memprobe.probe.attribution import attribute
from memprobe.probe.copied_pages import copied_pages
from memprobe.probe.object_map import walk


class FolderLike:
    def __init__(self, n: int) -> None:
        self.classes = [f"n{c:08d}" for c in range(1000)]
        self.samples = [
            (f"/data/train/{self.classes[i % 1000]}/img_{i:08d}.JPEG", i % 1000) for i in range(n)
        ]
        self.targets = [s[1] for s in self.samples]


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _worker(ds: FolderLike) -> int:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        n = 0
        for path, _ in ds.samples:
            n += len(path)
        os.write(w, b"r")
        time.sleep(3600)
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
    return pid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    t = time.monotonic()
    ds = FolderLike(args.records)
    print(
        f"built {args.records:,} records in {time.monotonic() - t:.1f} s; RSS {_status('VmRSS') / 1e6:,.0f} MB"
    )
    workers = [_worker(ds), _worker(ds)]
    try:
        for pid in workers:
            c = copied_pages(pid, os.getpid())
            assert c is not None
            print(
                f"pagemap of worker {pid} against its parent: {c.seconds * 1000:.0f} ms, {c.copied_bytes / 1e6:,.1f} MB copied ({c.method})"
            )
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the RSS now
        before = _status("VmRSS")
        t, cpu = time.monotonic(), time.process_time()
        omap = walk(ds)
        walk_s, walk_cpu = time.monotonic() - t, time.process_time() - cpu
        peak = _status("VmHWM") - before
        print(
            f"walk: {omap.objects:,} objects ({omap.stopped or 'complete'}) in {walk_s:.2f} s, {walk_cpu:.2f} CPU-s ({omap.objects / walk_cpu:,.0f} objects per CPU-s), "
            f"{len(omap.starts):,} blocks; peak memory +{peak / 1e6:,.0f} MB; map kept {sum(a.nbytes for a in (omap.starts, omap.ends, omap.path_ids)) / 1e6:,.0f} MB"
        )
        c = copied_pages(workers[0], os.getpid())
        assert c is not None
        t, cpu = time.monotonic(), time.process_time()
        a = attribute(omap, c.pages)
        print(
            f"join for one worker: {(time.monotonic() - t) * 1000:.0f} ms, {(time.process_time() - cpu) * 1000:.0f} CPU-ms"
        )
        for path, mb in zip(omap.paths, a.per_path / 1e6, strict=True):
            print(f"  {path}: {mb:,.1f} MB copied")
        print(f"  outside: {a.outside / 1e6:,.1f} MB; copied total {a.copied / 1e6:,.1f} MB")
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
