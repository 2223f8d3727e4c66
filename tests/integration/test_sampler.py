"""The sampler, on real subprocesses: rows per process per tick, a single 'missing' row when a
process goes away (never a drop to zero), PSS rounds within the CPU budget, and a clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from memprobe.probe.sampler import SAMPLE_COLUMNS, Sampler, SamplerSettings

# The root forks two children, 'reaped' and 'zombie', which live until the test sends them SIGUSR1
# (once the sampler has seen both): 'reaped' is reaped at once, 'zombie' only when the root exits,
# when the test closes its stdin (once the sampler has seen both children gone). Each step waits
# for what the sampler recorded, never for a fixed time: the same on a machine of any speed
# (before: the children lived 0.6 s and the root 2.5 s more, and the sampler had to see them).
ROOT = r"""
import os, signal, sys, time
blob = bytearray(40 * 1024 * 1024)          # some resident memory to measure
for i in range(0, len(blob), 4096):
    blob[i] = 1
kids = []
for name in ("reaped", "zombie"):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGUSR1, lambda *_: os._exit(0))
        while True:
            signal.pause()
    kids.append(pid)
print(*kids, flush=True)
os.waitpid(kids[0], 0)
sys.stdin.read()
"""


class Collect:
    def __init__(self) -> None:
        self.rows: dict[str, list[dict]] = {}
        self.lock = threading.Lock()

    def __call__(self, table: str, rows: list[dict]) -> None:
        with self.lock:
            self.rows.setdefault(table, []).extend(rows)

    def copy(self, table: str) -> list[dict]:
        with self.lock:
            return list(self.rows.get(table, []))


def _sample_until_exit(settings: SamplerSettings) -> tuple[Collect, Sampler, list[int], int, float]:
    """The sampler over ROOT's tree until the root has gone: (rows, sampler, the children, the
    root, the moment the children were told to exit on the sampler's clock)."""
    sink = Collect()
    root = subprocess.Popen(
        [sys.executable, "-c", ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    t0 = time.monotonic()
    sampler = Sampler(root.pid, sink, settings, t0=t0)
    sampler.start()

    def until(done, what: str) -> None:
        deadline = time.monotonic() + 60
        while not done(sink.copy("samples")):
            assert time.monotonic() < deadline and sampler.error is None, (what, sampler.error)
            time.sleep(settings.interval_s)

    def seen(pids: set[int], missing: bool):
        return lambda rows: pids <= {r["pid"] for r in rows if r["missing"] == missing}

    try:
        kids = [int(x) for x in root.stdout.readline().split()]
        until(seen({root.pid, *kids}, False), "the root and both children sampled")
        released = time.monotonic() - t0
        for pid in kids:
            os.kill(pid, signal.SIGUSR1)
        until(seen(set(kids), True), "both children seen gone")
        root.stdin.close()
        root.wait(30)
        until(seen({root.pid}, True), "the root seen gone")
        # At least 20 ticks and 1 s of system rows (MemAvailable is read once a second).
        until(lambda _: len(sink.copy("system")) >= 20 and time.monotonic() - t0 > 1.5, "20 ticks")
    finally:
        sampler.stop()
        if root.poll() is None:
            root.kill()
            root.wait()
        root.stdout.close()
    return sink, sampler, kids, root.pid, released


@pytest.fixture(scope="module")
def vanishing() -> tuple[Collect, Sampler, list[int], int, float]:
    return _sample_until_exit(SamplerSettings(interval_s=0.05, pss_min_interval_s=0.1, pss_cpu_budget=0.05))


def test_rows_have_every_column_and_sane_values(vanishing) -> None:
    sink, _, kids, root, _ = vanishing
    rows = sink.rows["samples"]
    assert rows and all(set(SAMPLE_COLUMNS) == set(r) for r in rows)
    present = [r for r in rows if not r["missing"]]
    assert {r["pid"] for r in present} >= {root, *kids}
    for r in present:
        assert r["rss_mb"] > 0 and r["cpu_s"] is not None
        if r["tier"] == "pss":
            assert r["pss_mb"] <= r["rss_mb"] + 1e-6 and r["uss_mb"] <= r["pss_mb"] + 1e-6
        else:
            assert r["tier"] == "cheap" and r["pss_mb"] is None
    assert max(r["rss_mb"] for r in present if r["pid"] == root) > 40
    assert any(r["tier"] == "pss" for r in present if r["pid"] == root)
    assert {r["role"] for r in present if r["pid"] == root} == {"main"}


# The reason depends on the moment the sampler first fails to read the process: mid-exit (memory
# released, not yet a zombie) it is "exiting"; the reaped child may be caught before its reaping.
@pytest.mark.parametrize("which, reasons", [(0, ("exited", "exiting", "zombie")), (1, ("zombie", "exiting"))])
def test_a_vanished_process_gets_one_missing_row_and_no_zeros(vanishing, which: int, reasons: tuple) -> None:
    sink, _, kids, _, released = vanishing
    pid = kids[which]
    rows = [r for r in sink.rows["samples"] if r["pid"] == pid]
    missing = [r for r in rows if r["missing"]]
    assert len(missing) == 1, missing
    assert missing[0]["reason"].startswith(reasons)
    assert missing[0]["tier"] == "gone"
    assert all(missing[0][c] is None for c in ("rss_mb", "pss_mb", "uss_mb", "cpu_s"))
    # Nothing after the missing row, and never a zero before it.
    assert rows[-1] is missing[0]
    assert all(r["rss_mb"] > 0 for r in rows[:-1])
    assert missing[0]["t"] >= released  # it exited when told to


def test_the_root_going_away_is_recorded_as_missing(vanishing) -> None:
    sink, _, _, root, _ = vanishing
    missing = [r for r in sink.rows["samples"] if r["pid"] == root and r["missing"]]
    # Seen just before pytest reaped it (zombie, or still in state X: exiting), or after it.
    assert len(missing) == 1 and missing[0]["reason"].startswith(("exited", "zombie", "exiting"))


def test_system_rows(vanishing) -> None:
    sink, sampler, _, _, _ = vanishing
    system = sink.rows["system"]
    assert len(system) >= 10
    # MemAvailable is read once a second (null on the ticks in between), never a made-up 0: at the
    # first tick and then at the first tick a second or more after the last read. Checked on the
    # sampler's own ticks (before: at least one read per second of rows, which ticks coming late
    # on a loaded machine broke: each read a second after the last one's late tick).
    read = [r for r in system if r["mem_available_mb"] is not None]
    assert read and all(r["mem_available_mb"] > 0 for r in read)
    assert read[0] is system[0]
    last = system[0]["t"]
    for r in system[1:]:
        since = r["t"] - last  # the times are rounded to 0.1 ms
        if r["mem_available_mb"] is None:
            assert since < 1.0 + 1e-3, (r["t"], last)
        else:
            assert since > 1.0 - 1e-3, (r["t"], last)
            last = r["t"]
    assert all(r["dev_shm_mb"] is not None for r in system)
    assert system[-1]["sampler_cpu_s"] == pytest.approx(sampler.cpu_s, abs=0.05)


def test_stop_ends_the_thread(vanishing) -> None:
    _, sampler, _, _, _ = vanishing
    assert not any(t.name == "memprobe-sampler" for t in threading.enumerate())
    assert sampler.error is None
    assert sampler.pss_round_costs and sampler.cheap_round_costs


# -- CPU budget --------------------------------------------------------------------------------

# Parent with 300 MB resident and two forked children sharing it (like DataLoader workers).
HOLDER = r"""
import os, time
blob = bytearray(300 * 1024 * 1024)
for i in range(0, len(blob), 4096):
    blob[i] = 1
for _ in range(2):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


def _sample_holder(budget: float, seconds: float, rounds: int = 0) -> tuple[Collect, Sampler, float, int]:
    """The sampler over HOLDER's tree for ``seconds``, and on (at most a minute) until it has
    taken ``rounds`` PSS rounds."""
    sink = Collect()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, process_group=0
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        settings = SamplerSettings(interval_s=0.1, pss_cpu_budget=budget, pss_min_interval_s=0.1)
        sampler = Sampler(holder.pid, sink, settings)
        t0 = time.monotonic()
        sampler.start()
        time.sleep(seconds)
        while len(sampler.pss_round_costs) < rounds and time.monotonic() - t0 < seconds + 60:
            time.sleep(0.05)
        sampler.stop(final_pss=False)
        elapsed = time.monotonic() - t0
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    return sink, sampler, elapsed, holder.pid


@pytest.mark.slow
def test_pss_rounds_stay_within_the_cpu_budget() -> None:
    """Measured on 2 shared cores, sampling ~900 MB RSS (~300 MB PSS) in three processes: a PSS
    round costs 14-37 ms; with the default 1.5% budget the sampler's CPU share over 4 s was
    0.0166-0.0181 (1-3 PSS rounds); with a 50% budget over 2 s, 17-19 PSS rounds.

    The rounds after the first (taken at the start, before anything is earned) cost no more than
    the budget earned: the sampler's whole CPU time counts against it. The whole share is bounded
    loosely: the cheap tier every 0.1 s is not the budget's to cut, and on this VM the first steps
    after each sleep are slow (docs/performance.md, "A tick's cost grows with the time between
    ticks"): 0.0598 once in the 3.13 suite, with 2 rounds. The test runs beside others (it ran
    alone before, which stalled every xdist worker while it waited for a long fixture of another
    to end)."""
    sink, sampler, elapsed, root = _sample_holder(0.015, 4.0)
    share = sampler.cpu_s / elapsed
    rounds = len(sampler.pss_round_costs)
    print(
        f"budget 0.015: cpu share {share:.4f}, pss rounds {rounds}, "
        f"mean cost {sum(sampler.pss_round_costs) / rounds * 1e3:.1f} ms"
    )
    assert rounds >= 1
    assert sum(sampler.pss_round_costs[1:]) <= 0.015 * elapsed, sampler.pss_round_costs
    assert share < 0.10  # a round every tick (~20 ms each, 10 a second) would be 0.2
    pss_rows = [r for r in sink.rows["samples"] if r["tier"] == "pss"]
    assert len({r["pid"] for r in pss_rows}) == 3
    assert all(r["uss_mb"] <= r["pss_mb"] <= r["rss_mb"] + 1e-6 for r in pss_rows)
    # The children share the parent's 300 MB: their PSS is well under their RSS.
    kids = [r for r in pss_rows if r["pid"] != root]
    assert all(r["rss_mb"] > 250 and r["pss_mb"] < 0.6 * r["rss_mb"] for r in kids)

    # The budget is what limits the rounds: a generous one buys many more.
    _, generous, elapsed2, _ = _sample_holder(0.5, 2.0, rounds=max(5, 2 * rounds))
    print(
        f"budget 0.5: cpu share {generous.cpu_s / elapsed2:.4f}, pss rounds {len(generous.pss_round_costs)}"
    )
    assert len(generous.pss_round_costs) >= max(5, 2 * rounds)
    # ... in less time: at least twice as many rounds a second.
    assert len(generous.pss_round_costs) / elapsed2 >= 2 * rounds / elapsed


def test_request_pss_forces_a_round_soon() -> None:
    """Whatever the machine's speed: with an hour between scheduled PSS rounds, any round after
    the first is the requested one (before: it had to come within 2 s, a latency under load)."""
    sink = Collect()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # An hour between scheduled rounds, at least and at most: only a requested round can
        # measure PSS after the first one, however long this process is kept off the CPU.
        # (Before: the 10 s default ceiling let a scheduled round in on a loaded CI machine.)
        hour = SamplerSettings(interval_s=0.05, pss_min_interval_s=3600.0, pss_max_interval_s=3600.0)
        sampler = Sampler(proc.pid, sink, hour)
        sampler.start()
        try:
            time.sleep(0.3)
            before = len(sampler.pss_round_costs)
            assert sampler.request_pss(wait_s=60.0)
            assert len(sampler.pss_round_costs) == before + 1
        finally:
            sampler.stop(final_pss=False)
    finally:
        proc.kill()
        proc.wait()


def test_a_failing_sink_is_recorded_not_lost() -> None:
    def sink(table: str, rows: list) -> None:
        raise OSError("disk full")

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = Sampler(proc.pid, sink, SamplerSettings(interval_s=0.05))
        sampler.start()
        sampler._thread.join(60)  # its first tick fails: within a minute on any machine (was 5 s)
        assert isinstance(sampler.error, OSError)
        sampler.stop()
    finally:
        proc.kill()
        proc.wait()


def test_request_pss_measures_after_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader pauses at 'warm' until a PSS round *after* that moment: that round is the
    start of the growth window. A round already in progress when the request comes sampled the
    processes before it and must not count. (Seen in real runs before the fix: a scheduled
    round at t=2.421, 'warm' at t=2.463, next PSS round at t=5.303 after the workers had copied
    the list: list-fork-w2 reported flat with worker USS start 129 MB, 2 of ~25 runs.)"""
    from memprobe.probe import procfs

    # What the sampler reads PSS with (before: read_pss was slowed, which the sampler no longer
    # calls since read_pss_or_denied: the first round was not slow and the case went untested).
    real = procfs.read_pss_or_denied
    reading = threading.Event()

    def slow_read_pss(pid: int):
        reading.set()
        time.sleep(0.4)
        return real(pid)

    monkeypatch.setattr(procfs, "read_pss_or_denied", slow_read_pss)
    sink = Collect()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        t0 = time.monotonic()
        # A huge min interval and the slow reads: no PSS round but the first and the requested.
        sampler = Sampler(proc.pid, sink, SamplerSettings(interval_s=0.05, pss_min_interval_s=9.0), t0=t0)
        sampler.start()  # its first round measures PSS and takes ~0.4 s
        # The request comes while that round reads (before: 0.15 s after the start, which on a
        # loaded machine could come before the round began, and the test failed).
        assert reading.wait(60)
        requested_at = time.monotonic() - t0
        assert sampler.request_pss(wait_s=60.0)  # two slow rounds: 0.8 s idle (was a 5 s limit)
        rounds_at_return = len(sampler.pss_round_costs)
        sampler.stop(final_pss=False)
    finally:
        proc.kill()
        proc.wait()
    # The round under way at the request (the first) did not satisfy it: a second one did.
    assert rounds_at_return >= 2, "request_pss returned on the round that started before the request"
    after = [r for r in sink.rows["samples"] if r["tier"] == "pss" and r["t"] >= requested_at]
    assert after


# The root (a group leader) forks 'middle', which forks 'orphan' and exits at once: the orphan is
# re-parented away from the root's tree (to pytest, the subreaper) but stays in the run's group.
ORPHANING = r"""
import os, sys, time
middle = os.fork()
if middle == 0:
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
    time.sleep(0.5)
    os._exit(0)
print(middle, flush=True)
os.waitpid(middle, 0)
time.sleep(30)
"""


def _sampled_after_it_left(rows: list[dict], root: int, middle: int) -> bool:
    gone = [r["t"] for r in rows if r["pid"] == middle and r["missing"]]
    return bool(gone) and any(r["pid"] not in (root, middle) and r["t"] > gone[0] for r in rows)


def test_an_orphan_is_found_soon_after_its_parent_exits() -> None:
    """A process that leaves the tree when its parent exits (a forkserver's workers after a
    crash) is looked for at once, not only at the periodic full /proc scan: counted in the
    sampler's ticks, whatever the machine's speed (before: within 0.5 s, after a fixed 2 s)."""
    sink = Collect()
    root = subprocess.Popen(
        [sys.executable, "-c", ORPHANING], stdout=subprocess.PIPE, text=True, process_group=0
    )
    try:
        middle = int(root.stdout.readline())
        sampler = Sampler(
            root.pid, sink, SamplerSettings(interval_s=0.05, group_scan_interval_s=3600.0), pgid=root.pid
        )
        sampler.start()
        deadline = time.monotonic() + 60
        while not _sampled_after_it_left(sink.copy("samples"), root.pid, middle):
            assert time.monotonic() < deadline and sampler.error is None, sampler.error
            time.sleep(0.05)
        sampler.stop(final_pss=False)
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
        root.stdout.close()
    rows = sink.rows["samples"]
    gone = [r["t"] for r in rows if r["pid"] == middle and r["missing"]]
    assert len(gone) == 1
    orphans = {r["pid"] for r in rows if r["pid"] not in (root.pid, middle) and not r["missing"]}
    assert len(orphans) == 1, orphans
    orphan = orphans.pop()
    after = [r["t"] for r in rows if r["pid"] == orphan and r["t"] > gone[0]]
    # Sampled within two ticks of the one that found its parent gone (the periodic scan is an
    # hour away); the root is sampled at every tick.
    ticks = sorted({r["t"] for r in rows if r["pid"] == root.pid} | {gone[0], after[0]})
    assert after and ticks.index(after[0]) - ticks.index(gone[0]) <= 2, (gone[0], after[0], ticks)


def test_request_pss_returns_at_once_when_the_sampler_died() -> None:
    """A dead sampler must not stall the run: the loader waits for a PSS round at 'warm' and
    'done', and no round will ever come. Asked to wait an hour, it returns within a minute,
    whatever the machine's speed (before: 1 s of a 20 s wait)."""
    failed = threading.Event()

    def sink(table: str, rows: list) -> None:
        if table == "system":
            failed.set()
            raise OSError("disk full")

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = Sampler(proc.pid, sink, SamplerSettings(interval_s=0.05))
        sampler.start()
        assert failed.wait(60)  # its first tick (was 5 s: a premise on the machine's load)
        sampler._thread.join(60)
        t = time.monotonic()
        assert sampler.request_pss(wait_s=3600.0) is False
        assert time.monotonic() - t < 60.0
        sampler.stop()
        assert isinstance(sampler.error, OSError)
    finally:
        proc.kill()
        proc.wait()
