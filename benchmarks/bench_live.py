"""What `memprobe top`'s live view costs: memprobe's CPU on a real tree, with and without the view.

Not a test: it starts a torchrun job (2 ranks, each iterating a DataLoader with 4 fork workers,
new workers every epoch: launcher + 2 ranks + 8 workers = 11 processes), then follows it in turn
with `memprobe watch` (the sampler alone), `memprobe top` in a real terminal (a 200x50 tmux pane:
redrawn every second) and `memprobe top` with stdout a pipe (one line every 5 s). For each, after
a warm-up it reads memprobe's CPU time (utime + stime of every thread, /proc) over a window of
wall time, split into the main thread (the watch loop, the meta's checkpoints, and for top the
model and the screen) and the other threads (the sampler's; torch's and numpy's idle ones), and
prints each as a percentage of one core. The job runs on until the end, so each mode sees the same tree.

    python benchmarks/bench_live.py                       # 3 rounds of the 3 modes, 30 s each
    python benchmarks/bench_live.py --rounds 1 --window 20
    python benchmarks/bench_live.py --tree wide --children 64   # a 65-process tree instead

--tree wide: a main process holding a list of dicts and 64 forked children, each reading a slice
of it twice a second until the end (65 processes alive throughout: the view's model keeps a rate
and a held PSS for each, and the screen shows the rows that fit). Each line printed states the
load average (/proc/loadavg) at the end of its window: the machine is shared.

Needs torchrun (torch) for the default tree and tmux (`apt-get install tmux`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_record_tree as record_tree  # benchmarks/ is on the path of a script run from it

# bench_record_tree.py's rank (a list of dicts iterated by 4 fork workers), run until a stop file
# is there instead of for 2 epochs.
RANK = record_tree.RANK
for old, new in (
    (
        "records, pause = int(sys.argv[1]), float(sys.argv[2])",
        "records, pause, stop = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]",
    ),
    ("for epoch in range(2):", "while not os.path.exists(stop):"),
    ("epoch {epoch} done", "done"),
):
    assert old in RANK, f"bench_record_tree.RANK changed: {old!r} not in it"
    RANK = RANK.replace(old, new)
TICKS = os.sysconf("SC_CLK_TCK")

WIDE = """
import os, sys, time
children, stop = int(sys.argv[1]), sys.argv[2]
rows = [{"id": i, "label": i % 1000, "box": [float(i), 1.0]} for i in range(200_000)]
for c in range(children):
    if os.fork() == 0:
        mine, s = rows[c::children], 0
        while not os.path.exists(stop):
            for r in mine[:500]:
                s += r["id"] + r["label"]
            time.sleep(0.5)
        os._exit(0)
while not os.path.exists(stop):
    time.sleep(0.5)
for _ in range(children):
    os.wait()
"""


def load() -> str:
    """The 1-minute load average now."""
    return Path("/proc/loadavg").read_text().split()[0]


def cpu_by_thread(pid: int) -> tuple[float, float]:
    """(every thread but the main one: the sampler's, main thread) CPU seconds of ``pid`` so far.
    (Python 3.11 does not give the sampler thread's name to the OS: it is told from the main
    thread, whose id is the process's.)"""
    others = main = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
            if int(tid) == pid:
                main += cpu
            else:
                others += cpu
    return others, main


def measure(pid: int, warmup: float, window: float) -> tuple[float, float]:
    """Percent of one core over ``window`` s after ``warmup`` s: the sampler, the rest."""
    time.sleep(warmup)
    s0, r0 = cpu_by_thread(pid)
    t0 = time.monotonic()
    time.sleep(window)
    s1, r1 = cpu_by_thread(pid)
    wall = time.monotonic() - t0
    return 100 * (s1 - s0) / wall, 100 * (r1 - r0) / wall


def stop(proc_pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc_pid, signal.SIGINT)


def run_mode(
    mode: str, job: int, out: Path, tmux: list[str], warmup: float, window: float
) -> tuple[float, float]:
    memprobe = [sys.executable, "-m", "memprobe"]
    args = [str(job), "--no-report", "-o", str(out)]
    if mode == "top (terminal)":
        cmd = " ".join([*memprobe, "top", *args])
        subprocess.run([*tmux, "new-session", "-d", "-x", "200", "-y", "50", f"exec {cmd}"], check=True)
        pid = int(
            subprocess.run([*tmux, "display", "-p", "#{pane_pid}"], capture_output=True, text=True).stdout
        )
        try:
            got = measure(pid, warmup, window)
            stop(pid)
            deadline = time.monotonic() + 120
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True)
        return got
    verb = "watch" if mode == "watch" else "top"
    proc = subprocess.Popen([*memprobe, verb, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        got = measure(proc.pid, warmup, window)
    finally:
        stop(proc.pid)
        proc.communicate(timeout=120)
    return got


def end(job: subprocess.Popen, stop_file: Path) -> None:
    """The job ends at its next epoch once the stop file is there; else its ranks' process
    groups (torchrun starts each rank in a session of its own) and its own are killed."""
    stop_file.touch()
    with contextlib.suppress(subprocess.TimeoutExpired):
        job.wait(timeout=60)
        return
    ranks = []
    for tid in os.listdir(f"/proc/{job.pid}/task"):
        with contextlib.suppress(OSError):
            ranks += [int(p) for p in Path(f"/proc/{job.pid}/task/{tid}/children").read_text().split()]
    for group in [*ranks, job.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    job.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds before the window (default 10)")
    ap.add_argument("--window", type=float, default=30.0, help="seconds measured (default 30)")
    ap.add_argument("--records", type=int, default=200_000, help="records per rank (default 200,000)")
    ap.add_argument("--pause", type=float, default=0.02, help="seconds per batch (default 0.02)")
    ap.add_argument("--tree", choices=("torchrun", "wide"), default="torchrun")
    ap.add_argument("--children", type=int, default=64, help="--tree wide: forked children (default 64)")
    args = ap.parse_args()
    tmux_bin = shutil.which("tmux")
    if tmux_bin is None:
        sys.exit("tmux not found: apt-get install tmux")
    base = Path(tempfile.mkdtemp(prefix="bench-live-"))
    script, stop_file = base / "rank.py", base / "stop"
    if args.tree == "wide":
        script.write_text(WIDE)
        command = [sys.executable, str(script), str(args.children), str(stop_file)]
    else:
        script.write_text(RANK)
        torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
        command = [
            torchrun,
            "--nproc_per_node=2",
            str(script),
            str(args.records),
            str(args.pause),
            str(stop_file),
        ]
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
    tmux = [tmux_bin, "-S", str(base / "tmux.sock")]
    modes = ("watch", "top (terminal)", "top (not a terminal)")
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    try:
        time.sleep(15)  # the ranks build their records and start their workers
        for r in range(args.rounds):
            for m in modes:
                got = run_mode(m, job.pid, base / f"{r}-{modes.index(m)}", tmux, args.warmup, args.window)
                results[m].append(got)
                print(
                    f"round {r + 1} {m:22s} sampler {got[0]:.2f} %  main {got[1]:.2f} %  total {sum(got):.2f} %"
                    f"  (load {load()})",
                    flush=True,
                )
    finally:
        end(job, stop_file)
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\n{args.rounds} round(s), {args.window:g} s windows after {args.warmup:g} s, % of one core, median [min-max]:"
    )
    print("| mode | sampler (other threads) | main thread (loop, checkpoints, view) | memprobe in all |")
    print("|---|---|---|---|")
    for m in modes:
        cols = [[g[0] for g in results[m]], [g[1] for g in results[m]], [sum(g) for g in results[m]]]
        cells = [f"{statistics.median(c):.2f} [{min(c):.2f}-{max(c):.2f}]" for c in cols]
        print(f"| {m} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
