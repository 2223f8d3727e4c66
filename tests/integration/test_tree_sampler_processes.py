"""The record/watch sampler (memprobe.probe.tree_sampler) on real small trees: the rows it writes,
the facts of each process, a requested full round, DataLoader thread workers seen by name."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

from memprobe.probe.sampler import SamplerSettings
from memprobe.probe.tree_sampler import TreeSampler

TREE = r"""
import os, sys, time
blob = bytearray(8 * 1024 * 1024)
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        for i in range(0, len(blob), 4096):
            blob[i] = 1  # copy-on-write: each child's USS grows
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
print(*kids, flush=True)
time.sleep(30)
"""


THREADS = r"""
import ctypes, sys, threading, time
libc = ctypes.CDLL(None)
go = threading.Event()
def worker():
    libc.prctl(15, b"pt_thread_data_worker", 0, 0, 0)  # torch's name for a thread worker, cut to 15 bytes
    go.wait()
threads = [threading.Thread(target=worker) for _ in range(2)]
[t.start() for t in threads]
print("ready", flush=True)
sys.stdin.readline()
go.set()
[t.join() for t in threads]
time.sleep(30)
"""


@contextlib.contextmanager
def _sampled_tree(
    rows: list[dict], settings: SamplerSettings, t0: float
) -> Iterator[tuple[TreeSampler, int, list[int]]]:
    """TREE started, and a TreeSampler of it whose samples go to ``rows``, not yet started:
    (sampler, root's pid, its two children's); the sampler stopped and the tree killed after."""
    root = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None
    kids: list[int] = []
    sampler = TreeSampler(
        root.pid, lambda table, r: rows.extend(r) if table == "samples" else None, settings, t0=t0
    )
    try:
        kids = [int(x) for x in root.stdout.readline().split()]
        yield sampler, root.pid, kids
    finally:
        sampler.stop(final_pss=False)
        root.kill()
        root.wait()
        for k in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(k, 9)
        root.stdout.close()


def _until(sampler: TreeSampler, done, what: str) -> dict:
    """The sampler's one process's facts, once ``done(facts)`` (within a minute)."""
    deadline = time.monotonic() + 60
    while True:
        facts = sampler.process_list()
        if facts and done(facts[0]):
            return facts[0]
        assert time.monotonic() < deadline and sampler.error is None, (what, facts, sampler.error)
        time.sleep(0.05)


def test_a_process_s_dataloader_thread_workers_are_seen_by_their_names() -> None:
    root = subprocess.Popen(
        [sys.executable, "-c", THREADS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    sampler = TreeSampler(
        root.pid, lambda table, r: None, SamplerSettings(interval_s=0.05), t0=time.monotonic()
    )
    try:
        assert root.stdout is not None and root.stdin is not None
        root.stdout.readline()
        sampler.start()
        # Each step waits for what the sampler recorded, not a fixed 0.3 s (a premise that it
        # ticks within that time, which a loaded machine broke).
        _until(sampler, lambda p: p["threads_max"] == 2, "both thread workers seen")
        root.stdin.write("\n")
        root.stdin.flush()  # the thread workers end
        _until(sampler, lambda p: p["last_t"] > p["threads_last_t"], "a tick without them")
    finally:
        sampler.stop(final_pss=False)
        root.kill()
        root.wait()
    (info,) = sampler.process_list()
    assert info["threads_max"] == 2 and info["threads_first_t"] is not None
    assert info["threads_last_t"] < info["last_t"]  # not seen once they ended


def test_rows_carry_kind_and_estimates_and_a_requested_round_reads_everyone() -> None:
    rows: list[dict] = []
    settings = SamplerSettings(interval_s=0.05, pss_cpu_budget=0.001)
    with _sampled_tree(rows, settings, time.monotonic()) as (sampler, root, kids):
        sampler.start()
        time.sleep(0.3)
        assert sampler.request_pss(wait_s=60.0)  # returns when it has run (was a 2 s limit)
    live = [r for r in rows if not r["missing"]]
    assert {r["pid"] for r in live} == {root, *kids}
    assert {r["kind"] for r in live if r["pid"] in kids} == {"fork"}
    assert {r["role"] for r in live if r["pid"] in kids} == {"worker 0", "worker 1"}
    last_t = max(r["t"] for r in live if r["tier"] == "pss")
    assert {r["pid"] for r in live if r["tier"] == "pss" and r["t"] == last_t} == {root, *kids}
    cheap_kids = [r for r in live if r["pid"] in kids and r["tier"] == "cheap"]
    assert cheap_kids and all(r.get("uss_est_mb") is not None for r in cheap_kids)  # from their fork
    assert all(r.get("uss_est_mb") is None for r in live if r["tier"] == "pss")
    info = {p["pid"]: p for p in sampler.process_list()}
    assert info[kids[0]]["forked"] and info[kids[0]]["kind"] == "fork" and info[root]["role"] == "main"
    assert info[root]["exact_readings"] >= 2 and info[kids[0]]["start_t"] is not None


def test_forked_children_are_read_from_the_reserve_when_the_rest_of_the_sampler_overspent() -> None:
    """A tick that costs more than the budget earns (a slow machine, a wide tree, a small
    budget) once left a watched job's two workers unread for a minute, until the final round:
    the reserve for the readings that cannot wait was counted against everything the sampler
    spent. It is theirs now. Here the sampler has (it says) spent 10 CPU-s of the 1 s it earned."""
    rows: list[dict] = []
    settings = SamplerSettings(interval_s=0.05, pss_cpu_budget=0.01)
    # 1 CPU-s earned at 1 %, its reserve 0.1
    with _sampled_tree(rows, settings, time.monotonic() - 100.0) as (sampler, _, kids):
        sampler.cpu_spent = lambda: 10.0  # type: ignore[method-assign]  (overspent, whatever it does)
        sampler.start()
        deadline = time.monotonic() + 60
        read = lambda: {r["pid"] for r in list(rows) if r["tier"] == "pss"}  # noqa: E731
        while not set(kids) <= read() and time.monotonic() < deadline and sampler.error is None:
            time.sleep(0.05)
    assert sampler.error is None
    assert set(kids) <= read(), (kids, read())
    assert 0 < sampler.urgent_spent <= 0.1  # their own share of the 1 s earned
