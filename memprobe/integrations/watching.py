"""memprobe inside a training loop: :class:`Watching` records the training process's own tree (it
and its DataLoader workers, every generation) while it trains, and :func:`watching` is it as a
context manager around a plain loop::

    with memprobe.watching() as w:          # a line to stderr every 5 s; on_scalars= for a logger
        for epoch in range(3):
            for batch in loader:
                ...

The Lightning and Hugging Face callbacks (:mod:`memprobe.integrations.lightning`,
:mod:`memprobe.integrations.hf`) are this with the trainer's hooks and loggers.

Nothing here is a second sampler or a second model: the recording is
:class:`memprobe.record.recording.Recording` (the results folder of kind ``record`` that
``memprobe report DIR`` renders, the checkpoints of its meta, the finish), its
:class:`~memprobe.probe.tree_sampler.TreeSampler` follows this process's pid in a thread of its
own within its CPU budget (1 % of a core, as ``memprobe record``), and the figures are the live
view's (:class:`memprobe.live.model.LiveModel`, fed through :class:`memprobe.live.view.Live`,
whose display here keeps the latest view instead of drawing it). A thread of memprobe's polls the
recording once a second (its meta saved every 2 s or so, as ``record`` does); the trainer's
thread only reads the latest view when a log is due (:meth:`Watching.due`).

The scalars (:func:`scalars`), all in MB or MB/min, named ``memprobe/...``: each process's
``<role>/uss_mb`` and ``<role>/pss_mb`` (``main``, ``worker0``, ``worker1``, ...: the same names
on every rank; a worker's index is reused by the next epoch's workers, so each tag is one curve
across epochs),
``total_pss_mb`` (the processes read exactly at least once; ``unread`` counts the others), ``growth_mb_per_min`` (the
processes' own growth rates summed: a worker's USS, a parent's anonymous memory from its first
worker on), ``workers``, ``workers_grown_mb`` (the live workers' USS gained since their start,
on average) and ``growing`` (1 where that is above the verdict's threshold). Only this process's
rank is counted: under a launcher that starts the other ranks as children of rank 0 (Lightning's
``ddp`` on one machine), they are left to their own callback.

The sampler is a thread of the training process, so it is forked into every forked DataLoader
worker, where it does not run (a fork copies only the forking thread); its memory (the model's
series, bounded) is counted in the main process's own growth, as memprobe's cost.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memprobe.core.text import printable
from memprobe.core.verdict import VerdictSpec
from memprobe.core.vocabulary import WORKER_KINDS
from memprobe.record.recording import DEFAULT_SETTINGS, Recording, RecordResult, command_name
from memprobe.results.folder import default_out_dir

if TYPE_CHECKING:
    from memprobe.live.model import LiveRow, LiveView

EVERY_S = 5.0  # a log of the scalars this often at most
POLL_S = 1.0  # the recording polled (its meta saved, the view made) this often
PREFIX = "memprobe/"
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID")


class _Kept:
    """The display :class:`memprobe.live.view.Live` shows its view on: kept, not drawn."""

    outlet = None

    def __init__(self) -> None:
        self.view: LiveView | None = None

    def open_now(self) -> bool:
        return False

    def due(self) -> bool:
        return True

    def show(self, view: LiveView, title: str, held: str, quit: bool) -> None:
        self.view = view

    def key_pressed(self, keys: bytes) -> bool:
        return False

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass


def rank_from_environment(env: dict[str, str] | os._Environ[str] = os.environ) -> int | None:
    """This process's rank as its launcher set it (torchrun, Lightning, SLURM), or None."""
    for name in RANK_VARIABLES:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def tag(role: str) -> str:
    """A process's role as a scalar's name part: ``worker 0`` -> ``worker0``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "", role) or "process"


def scalars(view: LiveView, root_pid: int, threshold_mb: float) -> dict[str, float]:
    """The scalars of a view (see the module doc), for the process ``root_pid``'s rank only."""
    root = next((r for r in view.rows if r.pid == root_pid), None)
    rows: list[LiveRow] = [r for r in view.rows if root is None or r.rank == root.rank]
    out: dict[str, float] = {}
    for r in rows:
        # The same names on every rank: the process itself is main, its workers worker0, ...
        # (under a launcher that makes it "rank 0" and them "rank 0 worker 0").
        name = PREFIX + ("main" if r.pid == root_pid else tag(r.role.removeprefix(f"rank {r.rank} ")))
        if r.uss_mb is not None:
            out[f"{name}/uss_mb"] = round(r.uss_mb, 2)
        if r.pss_mb is not None:
            out[f"{name}/pss_mb"] = round(r.pss_mb, 2)
    # LiveTotals' rule: the PSS of every process read exactly, a process not read yet counted apart.
    read = [r.pss_mb for r in rows if r.pss_mb is not None]
    if read:
        out[PREFIX + "total_pss_mb"] = round(sum(read), 2)
    out[PREFIX + "unread"] = float(len(rows) - len(read))
    rates = [r.rate_mb_min for r in rows if r.rate_mb_min is not None]
    if rates:
        out[PREFIX + "growth_mb_per_min"] = round(sum(rates), 3)
    workers = [r for r in rows if r.kind in WORKER_KINDS]  # LiveModel.verdict's
    out[PREFIX + "workers"] = float(len(workers))
    grown = [r.grown_mb for r in workers if r.grown_mb is not None]
    if grown:
        mean = statistics.fmean(grown)
        out[PREFIX + "workers_grown_mb"] = round(mean, 2)
        # LiveModel.verdict's rule: the live workers' mean growth against the threshold.
        out[PREFIX + "growing"] = 1.0 if mean > threshold_mb else 0.0
    return out


def line(values: dict[str, float], verdict: str) -> str:
    """The scalars that matter most and the verdict so far, in one line (the plain loop's log)."""
    total = values.get(PREFIX + "total_pss_mb")
    rate = values.get(PREFIX + "growth_mb_per_min")
    parts = [
        f"total PSS {total:,.0f} MB" if total is not None else "total PSS not read yet",
        f"{values[PREFIX + 'unread']:.0f} process(es) not read yet" if values.get(PREFIX + "unread") else "",
        f"growing {rate:+,.1f} MB/min" if rate is not None else "",
        f"{values.get(PREFIX + 'workers', 0):.0f} worker(s)",
    ]
    return "memprobe: " + ", ".join(p for p in parts if p) + f"; {verdict}"


class Watching:
    """This process and its DataLoader workers recorded while it trains (see the module doc).

    ``out``: the results folder (new or empty; by default ``<base>/record-<name>-<UTC time>``,
    ``base`` by default ``reports``; ``name``: the script's, ``-rank<N>`` added where a launcher
    set this process's rank or ``rank`` is given);
    ``every_s``: the scalars at most this often (:meth:`due`); ``on_scalars``: called with them
    from memprobe's thread every ``every_s`` (the plain loop's logger; the callbacks log from
    the trainer's thread instead); ``log``: memprobe's lines (default: stderr); ``render``:
    report.html written at the end (else ``memprobe report DIR`` writes it)."""

    def __init__(
        self,
        out: str | Path | None = None,
        *,
        name: str | None = None,
        base: str | Path | None = None,
        rank: int | None = None,
        every_s: float = EVERY_S,
        growth_threshold_mb: float = VerdictSpec.growth_threshold_mb,
        cpu_budget: float = DEFAULT_SETTINGS.pss_cpu_budget,
        render: bool = True,
        on_scalars: Callable[[dict[str, float]], None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        rank = rank_from_environment() if rank is None else rank
        stem = name or (command_name(sys.argv) if sys.argv and sys.argv[0] else "training")
        self.name = f"{stem}-rank{rank}" if rank is not None else stem
        self.rank = rank
        self.out = Path(out) if out is not None else None
        self.base = None if base is None else Path(base)
        self.every_s = every_s
        self.verdict = VerdictSpec(growth_threshold_mb=growth_threshold_mb)
        self.settings = dataclasses.replace(DEFAULT_SETTINGS, pss_cpu_budget=cpu_budget)
        self.render = render
        self.on_scalars = on_scalars
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        self.recording: Recording | None = None
        self.result: RecordResult | None = None
        self._kept = _Kept()
        self._next = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the recording's life ----------------------------------------------------------------
    def start(self) -> Watching:
        """Start recording this process's tree (once; again after :meth:`finish` is refused)."""
        if self.recording is not None:
            return self
        from memprobe.live.view import Live  # pandas and the analysis: when memprobe starts

        pid = os.getpid()
        if self.out is None and self.base is not None:
            self.out = default_out_dir(f"record-{self.name}", self.base)
        rec = Recording(
            self.out,
            "record",
            self.name,
            f"memprobe.watching() in pid {pid}: " + " ".join(sys.argv),
            self.settings,
            self.verdict,
            self.log,
        )
        rec.info = {"command": [sys.executable, *sys.argv], "pid": pid, "in_process": True}
        rec.observer = Live(cast(Any, self._kept), log=self.log)
        self.recording = rec
        rec.start_sampling(pid, pgid=None)
        self._next = time.monotonic() + self.every_s
        self._thread = threading.Thread(target=self._poll, name="memprobe-poll", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)
        return self

    def _at_exit(self) -> None:
        """The interpreter ends before :meth:`finish` (the training raised where the trainer has
        no hook for it, a plain loop never finished): what was sampled is saved, ``interrupted``."""
        self.finish("interrupted")

    def _poll(self) -> None:
        rec = self.recording
        assert rec is not None
        while not self._stop.wait(POLL_S):
            rec.poll()  # never raises: memprobe's trouble stops the sampling, not the training
            if self.on_scalars is not None:
                values = self.due()
                if values is not None:
                    try:
                        self.on_scalars(values)
                    except Exception as exc:  # noqa: BLE001  (the user's logger never stops the recording)
                        self.log(f"memprobe: on_scalars failed: {printable(repr(exc))}; not called again")
                        self.on_scalars = None

    def finish(self, status: str = "ok", error: BaseException | None = None) -> RecordResult | None:
        """Stop sampling (a last exact reading of every process first), save the folder, its
        summary and report, and say the verdict in words once. Again: the same result."""
        rec = self.recording
        if rec is None or self.result is not None:
            return self.result
        atexit.unregister(self._at_exit)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.result = rec.finish(
            status=status,
            exit_code=None,
            error=None if error is None else {"type": type(error).__name__, "message": str(error)[:500]},
            final_pss=status == "ok",
            render=self.render,
        )
        self.log(self.verdict_words())
        return self.result

    # -- what the trainer's thread reads -------------------------------------------------------
    @property
    def view(self) -> LiveView | None:
        """The latest view (made about once a second), or None before the first."""
        return self._kept.view

    def scalars(self) -> dict[str, float]:
        """The scalars now (see the module doc); empty before the first view."""
        view = self._kept.view
        return {} if view is None else scalars(view, os.getpid(), self.verdict.growth_threshold_mb)

    def due(self) -> dict[str, float] | None:
        """The scalars when ``every_s`` has passed since they were last given, else None."""
        now = time.monotonic()
        if now < self._next or self._kept.view is None:
            return None
        self._next = now + self.every_s
        return self.scalars()

    def verdict_so_far(self) -> str:
        view = self._kept.view
        return view.verdict if view is not None else "no reading yet"

    def verdict_words(self) -> str:
        """The verdict at the end in words (the analysis's), and where the results are."""
        r = self.result
        if r is None:
            return "memprobe: still recording"
        where = printable(str(r.root))
        if not r.summaries:
            return " ".join([*(printable(n) for n in r.notes), f"memprobe: results: {where}"])
        s = r.summaries[0]
        words = printable(s.culprit or f"{s.verdict or 'no verdict'}: {s.explanation}")
        return f"memprobe: {words}\nmemprobe: results: {where} (memprobe report {where})"

    @property
    def results_dir(self) -> Path | None:
        return None if self.recording is None else self.recording.out


@contextmanager
def watching(
    out: str | Path | None = None,
    *,
    every_s: float = EVERY_S,
    on_scalars: Callable[[dict[str, float]], None] | None = None,
    growth_threshold_mb: float = VerdictSpec.growth_threshold_mb,
    render: bool = True,
    log: Callable[[str], None] | None = None,
) -> Iterator[Watching]:
    """This process and its DataLoader workers recorded around a plain training loop (see the
    module doc). Every ``every_s``: ``on_scalars(values)`` if given, else one line of them and
    the verdict so far on memprobe's log (stderr). At the end (an exception too: the folder is
    saved, status ``failed`` or ``interrupted``), the verdict in words and the results folder."""
    w = Watching(
        out,
        every_s=every_s,
        growth_threshold_mb=growth_threshold_mb,
        render=render,
        log=log,
        on_scalars=on_scalars,
    )
    if on_scalars is None:
        w.on_scalars = lambda values: w.log(line(values, w.verdict_so_far()))
    w.start()
    try:
        yield w
    except KeyboardInterrupt as exc:
        w.finish("interrupted", exc)
        raise
    except BaseException as exc:
        w.finish("failed", exc)
        raise
    w.finish()
