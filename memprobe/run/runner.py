"""The supervisor: run each RunSpec in a fresh child process and sample it from the outside.

Each run gets its own process group so that every process it starts (workers, the forkserver
and its workers, the resource tracker) can be found and ended together, whatever happens.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memprobe.core.errors import FactoryError, ResultsFolderGone, ResultsWriteError
from memprobe.core.vocabulary import is_thread_mode
from memprobe.probe.sampler import Sampler, SamplerSettings
from memprobe.results.files import RunWriter, folder_identity
from memprobe.run import factory
from memprobe.run.scenario import RunSpec
from memprobe.run.supervised import SUPERVISOR_ENV
from memprobe.session.group import OWN_PROCESS_GROUP, end_group, wait_exiting
from memprobe.session.signals import StopSignals

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
    # the first: each generation's growth window starts at its own (memprobe.analysis.scenario).
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
        kept = {
            k: v for k, v in ev.items() if k not in ("traceback", "attribution")
        }  # the latter: in the meta
        self.writer.append("events", [{"t": t, **kept}])
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
        elif name == "attribution":
            self.state.info["attribution"] = ev.get("attribution")
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
