"""The supervisor: run each RunSpec in a fresh child process and sample it from the outside.

Each run gets its own process group so that every process it starts (workers, the forkserver
and its workers, the resource tracker) can be found and ended together, whatever happens.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import memprobe
from memprobe.core.errors import FactoryError, MemprobeError, ResultsWriteError
from memprobe.core.vocabulary import gil_enabled, is_thread_mode, signal_name
from memprobe.probe import procfs
from memprobe.probe.sampler import Sampler, SamplerSettings
from memprobe.results.files import RunWriter
from memprobe.run import factory
from memprobe.run.child import SUPERVISOR_ENV
from memprobe.run.ending import OWN_PROCESS_GROUP, end_group, wait_exiting
from memprobe.run.limits import mem_total_mb, memory_limit_mb
from memprobe.run.scenario import RunSpec

ProgressCallback = Callable[["RunState"], None]
FINAL_PSS_WAIT_S = 30.0
# After its last event the run's process exits by itself: within EXIT_GRACE_S, or later while it
# still uses CPU (freeing a dataset of millions of Python objects at exit, on a machine whose
# cores others hold, took longer than 10 s: the CI's first run was ended by SIGTERM, "failed",
# after it had finished), up to EXIT_BUSY_S.
EXIT_GRACE_S = 10.0
EXIT_BUSY_S = 120.0
# The loader process waits at these for a PSS round: growth window start and end (warm, done),
# and the birth and end of each later generation of workers (epoch_warm, epoch_end).
SYNC_EVENTS = ("warm", "done", "epoch_warm", "epoch_end")
# One turn of the event loop takes at most 0.5 s (plus a PSS round at a sync point); a longer
# gap is time memprobe was stopped, which does not count toward the run's timeout.
PAUSED_S = 5.0


class StopSignals:
    """SIGINT (Ctrl-C), SIGTERM and SIGHUP end a session gracefully, whenever they come.

    The handlers only take note (and wake the supervisor through a pipe): the run in progress
    is ended at the supervisor's next step, within a fraction of a second, and what follows -
    ending its process group, saving the results, writing the report - is never cut short, not
    even by a second Ctrl-C. Handlers can only be set in the main thread; elsewhere this notes
    nothing and signals act as they would without it.
    """

    def __init__(
        self, signums: Iterable[int] = (signal.SIGINT,), on_signal: Callable[[int, int], None] | None = None
    ) -> None:
        self.signums = tuple(signums)
        self.on_signal = on_signal
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._pipe = (r, w)
            self._previous = {s: signal.signal(s, self._note) for s in self.signums}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        if self._pipe:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def _note(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if self._pipe:
            with contextlib.suppress(OSError):  # the pipe is full: the supervisor has been woken already
                os.write(self._pipe[1], b"!")
        if self.on_signal:
            self.on_signal(signum, len(self.received))

    def fileno(self) -> int | None:
        """Readable once a signal came: for select() next to the run's event pipe."""
        return self._pipe[0] if self._pipe else None

    @property
    def first(self) -> str | None:
        return signal_name(self.received[0]) if self.received else None


@dataclass
class RunState:
    """What the supervisor knows about a run while it goes (and when it ended)."""

    spec: RunSpec
    index: int
    total: int
    status: str = "running"  # running | ok | failed | timeout | interrupted
    error: dict | None = None
    items: int = 0
    batches: int = 0
    milestones: dict[str, float] = field(default_factory=dict)  # event -> t it first came (s since start)
    # Every later generation's warm (each epoch's workers have all delivered a batch), not only
    # the first: each generation's growth window starts at its own (memprobe.run.analysis).
    epoch_warms: list[float] = field(default_factory=list)
    started_wall: float = field(default_factory=time.time)
    elapsed_s: float = 0.0
    exit_code: int | None = None
    sampler: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)  # facts the loader process reported about its dataset
    # A user's factory being imported or called (ref, phase: memprobe.run.factory's), until it
    # has returned a dataset: what a timeout or the process's end is then named by.
    factory_at: tuple[str, str] | None = None

    def meta(self) -> dict:
        return {
            "run_id": self.spec.run_id,
            "index": self.index,
            "status": self.status,
            "error": self.error,
            "items": self.items,
            "batches": self.batches,
            "milestones": self.milestones,
            "epoch_warms": self.epoch_warms,
            "started": self.started_wall,
            "elapsed_s": round(self.elapsed_s, 3),
            "exit_code": self.exit_code,
            "sampler": self.sampler,
            "dataset_info": self.info,
            "spec": self.spec.to_dict(),
        }


class ResultsFolderGone(MemprobeError):
    """The results folder was deleted or moved while a run was writing into it."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"the results folder {path} was deleted or moved while memprobe was running; the "
            "run in progress was ended (no process of it is left) and nothing more could be saved"
        )


class _Supervisor:
    def __init__(
        self,
        state: RunState,
        run_dir: Path,
        on_progress: ProgressCallback | None,
        *,
        sample: bool = True,
        stop: StopSignals | None = None,
    ) -> None:
        self.state = state
        self.sample = sample
        self.stop = stop
        self.writer = RunWriter(run_dir)
        self.run_dir = run_dir
        self.root = run_dir.parent.parent  # <results>/runs/<run_id>
        self._dir_id = folder_identity(run_dir)
        self.on_progress = on_progress or (lambda s: None)
        self._buf = b""

    def run(self) -> RunState:
        spec = self.state.spec
        self.writer.write_meta(self.state.meta())
        read_fd, write_fd = os.pipe()
        log = open(self.run_dir / "child.log", "wb")  # noqa: SIM115  (the child's output, closed once it is started)
        self.t0 = time.monotonic()
        env = {
            **os.environ,
            "MEMPROBE_EVENT_FD": str(write_fd),
            "PYTHONUNBUFFERED": "1",
            SUPERVISOR_ENV: str(os.getpid()),
        }
        # This thread starts the child and waits for it to end: PR_SET_PDEATHSIG, which the
        # child sets, fires when the *thread* that forked it ends, so no other thread may.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memprobe.run.child"],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            env=env,
            **OWN_PROCESS_GROUP,
        )
        os.close(write_fd)
        log.close()
        settings = SamplerSettings(
            interval_s=spec.sampling.interval_s,
            pss_cpu_budget=spec.sampling.pss_cpu_budget,
            pss_min_interval_s=spec.sampling.pss_min_interval_s,
            threads_of_main=is_thread_mode(spec.mode),
            enabled=self.sample,
        )
        self.sampler = Sampler(self.proc.pid, self.writer.append, settings, t0=self.t0, pgid=self.proc.pid)
        self.sampler.start()
        try:
            self._send(json.dumps(spec.to_dict()))
            self._event_loop(read_fd)
        except KeyboardInterrupt:  # no StopSignals (a library caller): Ctrl-C raises where it lands
            self._interrupted("Ctrl-C")
            raise
        finally:
            os.close(read_fd)
            self._finish()
        return self.state

    def _interrupted(self, how: str) -> None:
        self.state.status = "interrupted"
        self.state.error = {
            "type": "Interrupted",
            "message": f"by {how} after "
            f"{time.monotonic() - self.t0:.1f} s; what was measured until then is kept",
        }

    def _send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child is gone; its exit status tells the story

    def _event_loop(self, fd: int) -> None:
        deadline = self.t0 + self.state.spec.timeout_s
        last = time.monotonic()
        stop_fd = self.stop.fileno() if self.stop else None
        wake = [stop_fd] if stop_fd is not None else []
        while True:
            now = time.monotonic()
            if now - last > PAUSED_S:
                # memprobe itself was stopped (SIGSTOP, Ctrl-Z) or starved: not the run's time.
                deadline += now - last
            last = now
            if self.stop and (how := self.stop.first):  # a signal was received
                self._interrupted(how)
                return
            if folder_identity(self.run_dir) != self._dir_id:
                self.state.status = "failed"
                self.state.error = {"type": "ResultsFolderGone", "message": str(ResultsFolderGone(self.root))}
                return
            remaining = deadline - now
            if remaining <= 0:
                self.state.status = "timeout"
                self.state.error = self._timed_out()
                return
            if self.sampler.error is not None:
                # Without its sampler a run measures nothing: end it now, saying why (often a
                # full disk, which would also stop every later run).
                self.state.status = "failed"
                self.state.error = {
                    "type": "SamplerError",
                    "message": f"sampling stopped: {self.sampler.error}; the run was ended",
                }
                return
            ready, _, _ = select.select([fd, *wake], [], [], min(remaining, 0.5))
            if fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return  # every holder of the write end closed: the child exited
                self._feed(chunk)
            self.state.elapsed_s = time.monotonic() - self.t0
            self.on_progress(self.state)

    def _feed(self, chunk: bytes) -> None:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if line.strip():
                self._handle(json.loads(line))

    def _handle(self, ev: dict) -> None:
        name = ev["event"]
        t = round(ev.pop("mono") - self.t0, 4)
        self.writer.append("events", [{"t": t, **{k: v for k, v in ev.items() if k != "traceback"}}])
        if name not in self.state.milestones:
            self.state.milestones[name] = t
        if name == "epoch_warm":
            self.state.epoch_warms.append(t)
        if name == "dataset_built":
            self.state.info = {
                **(ev.get("info") or {}),
                "length": ev.get("length"),
                "build_s": round(ev.get("seconds", 0.0), 3),
            }
        elif name == "epoch_start":
            self.sampler.roles.set_workers(ev.get("workers", []))
            if "gil_enabled" in ev:
                self.state.info["gil_enabled"] = ev["gil_enabled"]
        elif name in ("progress", "done", "warm", "first_batch"):
            self.state.items, self.state.batches = ev["items"], ev["batches"]
            self.writer.append(
                "progress",
                [{"t": t, "items": ev["items"], "batches": ev["batches"], "epoch": ev.get("epoch")}],
            )
        elif name == "factory":
            ref, phase = str(ev.get("ref")), str(ev.get("phase"))
            self.state.factory_at = None if phase == factory.BUILT else (ref, phase)
        elif name == "error":
            self.state.error = {
                "type": ev["type"],
                "message": ev["message"],
                "traceback": ev.get("traceback"),
            }
        if name in SYNC_EVENTS:
            self.sampler.request_pss(wait_s=FINAL_PSS_WAIT_S)
            self._send("ack")

    def _finish(self) -> None:
        if self.state.status == "running":
            # The event pipe closes a moment before the process exits: let it exit by itself
            # (not reaped yet: end_group reaps it once its group is empty).
            wait_exiting(self.proc, EXIT_GRACE_S, EXIT_BUSY_S)
        end_group(self.proc)
        self.sampler.stop(final_pss=False)
        self.state.exit_code = self.proc.returncode
        self.state.elapsed_s = time.monotonic() - self.t0
        self.state.sampler = self.sampler.stats(self.state.elapsed_s)
        self._settle_status()
        try:
            self.writer.write_meta(self.state.meta())
        except ResultsWriteError as exc:
            if folder_identity(self.run_dir) != self._dir_id and exc.errno == errno.ENOENT:
                raise ResultsFolderGone(self.root) from None
            raise
        finally:
            self.writer.close()
        if self.state.error and self.state.error.get("type") == "ResultsFolderGone":
            raise ResultsFolderGone(self.root)

    def _settle_status(self) -> None:
        if self.state.status != "running":
            return
        code = self.proc.returncode
        if self.state.error is None and code == 0 and "done" in self.state.milestones:
            self.state.status = "ok"
            return
        self.state.status = "failed"
        if self.state.error is None:
            how = (
                f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
            )
            log = self.run_dir / "child.log"
            if self.state.factory_at:  # the user's module or factory ended it (os._exit, a crash)
                ref, phase = self.state.factory_at
                self.state.error = {
                    "type": FactoryError.__name__,
                    "message": f"dataset factory {ref!r}: the run's process ended ({how}) while "
                    f"{factory.doing(ref, phase)}; its output: {log}",
                }
                return
            self.state.error = {
                "type": "ChildExited",
                "message": f"the run's process ended ({how}) before finishing; see {log}",
            }

    def _timed_out(self) -> dict:
        """The timeout's error: the user's module or factory named where it had not returned."""
        limit = f"timeout_s={self.state.spec.timeout_s:g}"
        if self.state.factory_at:
            ref, phase = self.state.factory_at
            return {
                "type": FactoryError.__name__,
                "message": f"dataset factory {ref!r}: {factory.doing(ref, phase)} did not return within "
                f"{limit}; the dataset was never built",
            }
        return {"type": "Timeout", "message": f"run did not finish within {limit}"}


def folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``: changes when the folder is deleted, moved or replaced."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def execute(
    spec: RunSpec,
    run_dir: Path,
    *,
    index: int = 0,
    total: int = 1,
    on_progress: ProgressCallback | None = None,
    sample: bool = True,
    stop: StopSignals | None = None,
) -> RunState:
    """Run ``spec`` in a fresh child process, sampled from the outside; results go to ``run_dir``.

    ``sample=False`` runs it unobserved (progress only): the baseline for the sampler's overhead.
    With ``stop``, a signal it notes ends the run (status ``interrupted``); without it, Ctrl-C
    ends the run and raises KeyboardInterrupt once the run's processes are gone.
    """
    state = RunState(spec=spec, index=index, total=total)
    return _Supervisor(state, run_dir, on_progress, sample=sample, stop=stop).run()


def environment() -> dict[str, Any]:
    """The facts a reader needs to interpret the numbers."""
    try:  # the installed version, without importing torch into the supervisor (seconds)
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = None

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in (procfs.read_text("/proc/cpuinfo") or "").splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "memprobe": memprobe.__version__,
        "torch": torch_version,
        "python": platform.python_version(),
        "python_build": sys.version,
        "gil_enabled": gil_enabled(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "mem_total_mb": mem_total_mb(),
        # The memory the runs must fit in where below the machine's: memprobe's memory cgroup's
        # limit (a container, a scheduler's job), None without one (the report draws either).
        "cgroup_limit_mb": _below(memory_limit_mb(), mem_total_mb()),
        "hostname": platform.node(),
    }


def _below(limit: int, total: int) -> int | None:
    return limit if limit and (not total or limit < total) else None


def writer_identity() -> dict:
    """Who writes a results folder: this memprobe (:func:`memprobe.probe.procfs.process_identity`)."""
    return procfs.process_identity(os.getpid())
