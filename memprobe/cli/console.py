"""Terminal output: live progress per run and the summary table.

The progress is written by :class:`memprobe.live.outlet.Outlet`'s thread: a terminal paused with
Ctrl-S (or a pipe nobody reads) held the supervisor in a write of its progress line, and with it
the run it measures (its events, its acks, its timeout): a 30 s pause made a run's items/s a
third of what it was. Now a run never waits for the terminal; between two runs, memprobe waits
for it to take what it was told (nothing runs then), so the lines stay in order."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from memprobe.core.rounds import spread_text
from memprobe.core.summary import RunSummary
from memprobe.core.text import clip, columns, pad, printable, printable_lines
from memprobe.core.units import mb
from memprobe.core.vocabulary import signal_name
from memprobe.live.outlet import Outlet
from memprobe.run.runner import RunState
from memprobe.run.scenario import RunSpec
from memprobe.run.session import Console

MARK = {True: "met", False: "NOT MET", None: ""}


class TerminalConsole(Console):
    """One live line per run on a terminal; a line at start and end (and every 5 s) otherwise."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream: TextIO | None = stream  # None once writing to it failed
        self.live = stream.isatty()
        self.outlet = Outlet()
        self._last = 0.0

    def run_started(self, spec: RunSpec, index: int, total: int) -> None:
        self._prefix = f"[{index + 1}/{total}] {spec.run_id}"
        self._target = self._items_target(spec)
        self._last = time.monotonic()
        if not self.live:
            self._print(f"{self._prefix}: starting")

    @staticmethod
    def _items_target(spec: RunSpec) -> int | None:
        lo = spec.loader
        if getattr(spec, "factory", None):
            return lo.items
        # decode is set for the decode workload only
        per_epoch = spec.decode.images if spec.decode is not None else spec.dataset.records
        total = per_epoch * lo.epochs
        if lo.items is not None:
            total = min(total, lo.items)
        return total

    def run_progress(self, state: RunState) -> None:
        now = time.monotonic()
        if not self.live and now - self._last < 5.0:
            return
        self._last = now
        of = f"/{self._target:,}" if self._target else ""
        phase = (
            "loading dataset"
            if "dataset_built" not in state.milestones
            else ("starting workers" if "first_batch" not in state.milestones else "iterating")
        )
        line = f"{self._prefix}: {state.items:,}{of} items, {state.elapsed_s:5.1f} s, {phase}"
        # A progress line the terminal has not taken yet is replaced by the next.
        if self.live:
            self._write("\r\033[K" + printable(line), frame=True)
        else:
            self._write(printable(line) + "\n", frame=True)

    def run_finished(self, state: RunState) -> None:
        if self.live:
            self._write("\r\033[K", frame=True, keep=True)
        err = f" - {short_error(state.error['type'] + ': ' + state.error['message'])}" if state.error else ""
        self._print(f"{self._prefix}: {state.status} ({state.items:,} items, {state.elapsed_s:.1f} s){err}")
        self.outlet.wait()  # the run is over: the terminal takes its lines before the next starts

    def signal_received(self, signum: int, count: int) -> None:
        # Called from a signal handler, maybe in the middle of a print: a raw write to the
        # stream's descriptor, never the (non-reentrant) buffered stream itself.
        name = signal_name(signum)
        text = (
            f"\nmemprobe: {name}: stopping; saving what was measured and the report (a few seconds)\n"
            if count == 1
            else f"\nmemprobe: {name} again: still saving the results; memprobe exits once "
            "they are complete (a few seconds)\n"
        )
        if self.stream is None:  # writing to it failed already
            return
        # Queued from a thread of its own: the handler may have interrupted the outlet's own
        # bookkeeping in this (the main) thread, and a paused terminal must not hold the stop.
        threading.Thread(target=self.outlet.put, args=(self.stream, text), daemon=True).start()

    def _print(self, line: str) -> None:
        self._write(printable_lines(line) + "\n")  # a dataset's error message is foreign text

    def _write(self, text: str, *, frame: bool = False, keep: bool = False) -> None:
        """Progress is a courtesy: a terminal that went away (SIGHUP) or a closed pipe must not
        stop the run; output just stops. Queued (see the module's docstring)."""
        if self.stream is None:
            return
        self.outlet.put(self.stream, text, frame="progress" if frame else None, keep=keep)
        if not self.outlet.alive(self.stream):
            self.stream = None


def short_error(text: str) -> str:
    """An error in one line: a worker's error carries its whole remote traceback ("Caught
    ValueError in DataLoader worker process 0. Original Traceback ..."); its first and last lines
    say what and where. The whole text stays in the run's meta.json and the report."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return text.strip()
    return f"{lines[0]} ... {lines[-1]}"


def say(text: str, stream: TextIO | None = None) -> None:
    """print(), except that a closed pipe (``memprobe run ... | head``) or a terminal that went
    away ends the output, not memprobe: the results are what matters, and they are saved. Each
    line is shown :func:`~memprobe.core.text.printable`: control characters escaped."""
    stream = stream or sys.stdout
    text = printable_lines(text)  # a foreign string's control characters never reach the terminal
    try:
        try:
            print(text, file=stream, flush=True)
        except UnicodeEncodeError:  # a path with bytes that are not UTF-8, on a strict stream
            encoding = getattr(stream, "encoding", None) or "utf-8"
            print(text.encode(encoding, "backslashreplace").decode(encoding), file=stream, flush=True)
    except (OSError, ValueError):
        with contextlib.suppress(
            OSError, ValueError
        ):  # the interpreter's final flush finds a harmless descriptor
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def summary_table(summaries: list[RunSummary]) -> str:
    """The terminal summary: one row per run (decode runs add the decoder that ran and MB/s)."""
    decode = any(s.workload == "decode" for s in summaries)
    head = (
        "run",
        "status",
        *(("decoder",) if decode else ()),
        "PSS start",
        "PSS peak",
        "sum RSS",
        "worker growth",
        "items/s",
        *(("MB/s",) if decode else ()),
        "verdict",
        "expected",
    )
    rows = [head]
    for s in summaries:
        # No worker processes (thread mode, workers=0): the main process's growth, marked as such.
        growth = (
            _mb(s.worker_uss_growth_mb, sign=True)
            if s.worker_uss_growth_mb is not None
            else f"{_mb(s.main_uss_growth_mb, sign=True)} (main)"
            if s.main_uss_growth_mb is not None
            else "-"
        )
        rows.append(
            (
                s.run_id,
                s.status,
                *((s.decoder_backend or "-",) if decode else ()),
                _mb(s.total_pss_start_mb),
                _mb(s.total_pss_peak_mb),
                _mb(s.sum_rss_peak_mb),
                growth,
                _num(s.items_per_s),
                *((_num(s.mb_per_s, 1),) if decode else ()),
                s.verdict or "-",
                f"{s.expectation} {MARK[s.expectation_met]}" if s.expectation else "",
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _mb(v: float | None, sign: bool = False) -> str:
    return mb(v, sign=sign, small=0, true_minus=False, missing="-")


def _num(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def workers_table(sweep: Any) -> str:
    """After the runs' table, where runs were repeated or the worker count swept
    (:class:`memprobe.analysis.workers.Sweep`): a row per dataset, mode and worker count, each
    figure the median ± std (min-max) of its runs, then the analysis' answer in words. Empty
    otherwise."""
    if sweep is None or not (sweep.curves or sweep.repeated):
        return ""
    head = (
        "dataset",
        "mode",
        "workers",
        "runs",
        "s per 100 batches",
        "items/s",
        "CPU ms/item",
        "PSS peak",
        "fits",
    )
    rows = [head]
    for g in sweep.groups:
        rows.append(
            (
                g.backend,
                g.mode,
                str(g.workers),
                str(len(g.run_ids)),
                *(spread_text(g.figures.get(f), d) for f, d in SPREAD_COLUMNS),
                "-" if g.fits is None else ("yes" if g.fits else "NO"),
            )
        )
    lines = ["", "medians ± std (min-max) of each group's runs:", *_columns(rows)]
    said = sweep.sentences()
    if said:
        lines += ["", "how many workers:", *[f"  {line}" for line in said]]
    return "\n".join(lines)


SPREAD_COLUMNS = (
    ("time_per_100_batches_s", 2),
    ("items_per_s", 0),
    ("cpu_ms_per_item", 3),
    ("total_pss_peak_mb", 0),
)


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


ATTRIBUTION_PATH_COLUMNS = 48  # a path wider than this is cut, marked


def attribution_lines(s: RunSummary) -> list[str]:
    """Which of the dataset's structures the run's workers copied (``--attribute``): the
    analysis' table (:func:`memprobe.analysis.attribution.attribution`), each worker's MB up to
    four workers (their mean beyond), together and the share of the copied total."""
    a = s.attribution
    if not a:
        return []
    if a.get("error"):
        return [f"{s.run_id}: which structure was copied: not known ({a['error']})"]
    workers = a["workers"]
    each = len(workers) <= 4
    per_head = [f"worker {w['worker']}" for w in workers] if each else ["mean"]
    head = ("path", "held MB", *per_head, "together", "share")
    rows: list[tuple[str, ...]] = [head]
    for r in a["rows"]:
        per = [_num(x, 1) for x in r["workers_mb"]] if each else [_num(r["mean_mb"], 1)]
        share = "-" if r["share"] is None else f"{r['share']:.0%}"
        rows.append(
            (
                clip(printable(r["path"]), ATTRIBUTION_PATH_COLUMNS),
                _num(r["held_mb"], 1),
                *per,
                _num(r["together_mb"], 1),
                share,
            )
        )
    copied = [_num(x, 1) for x in a["copied_mb"]] if each else [_num(a["copied_mean_mb"], 1)]
    rows.append(("copied (the total)", "", *copied, _num(a["copied_together_mb"], 1), "100%"))
    widths = [max(columns(r[i]) for r in rows) for i in range(len(head))]
    out = [
        f"\n{s.run_id}: which structure the workers copied ({_method(a['method'])}):",
        f"  {a['sentence']}",
    ]
    for k, r in enumerate(rows):
        out.append(
            "  " + "  ".join(pad(c, w, right=i > 0) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
        if k == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    if a.get("incomplete"):
        out.append(
            f"  the walk of the dataset {a['incomplete']}: what it did not reach is counted outside it"
        )
    out += [f"  {printable(line)}" for line in a.get("also_held") or []]
    if (a.get("marked_by") or 0) > 1:
        out.append(
            f"  {a['marked_by']} processes marked their dataset; shown: pid {a['parent']}'s workers, the most copied"
        )
        out += [f"  {printable(p['sentence'])}" for p in a.get("by_process") or []]
    return out


def _method(method: str) -> str:
    return (
        "pages whose frame differs from the parent's"
        if method == "frames"
        else "pages each worker maps alone (pagemap bit 56)"
    )
