"""Run your own command (e.g. a training script) and profile its DataLoader memory from outside.

The command runs with your terminal (its output is shown as usual, Ctrl-C and Ctrl-Z reach it as
if it ran alone). memprobe samples its whole process tree - the main process, every DataLoader
worker and every other child process (classified by how it was started: fork, spawn, exec;
each epoch's new workers are worker 0..N-1 again), torchrun ranks and their workers - until it
exits, then writes the results, summary.json and
report.html to reports/record-<name>-<UTC time>/ (or -o DIR) and prints each worker's private
memory (USS) growth over its lifetime, with the verdict flat/growing.

Items/s cannot be seen from outside. To get them, add one line to the training loop:

    import memprobe;  memprobe.mark(len(batch))

It does nothing (and costs nothing) when memprobe is not recording, and is safe to call from
DataLoader workers and threads. Without it, the report shows memory and CPU only.

memprobe exits with the command's exit code (128+N if the command was killed by signal N), or
with 3 where the command succeeded but the verdict is one --fail-on names (`--fail-on growing`
for CI: the job itself passed, its memory did not). A
SIGINT/SIGTERM sent to memprobe itself is forwarded to the command's process group (a second
Ctrl-C sends SIGTERM, a third SIGKILL); what was sampled is saved and memprobe exits 128+N
(130 for Ctrl-C). Processes the command leaves behind in its process group are ended after 3 s.
Processes that left its process group (setsid, start_new_session=True, a shell's job control) and
still run when it ends are not ended, as a shell would not end them: memprobe names them (pid and
command line), marks them "runs on" in the table and lists them in the run's meta.json.

memprobe's own trouble never ends the command: on a full disk or a results folder deleted
under it, memprobe stops sampling and says so, the command runs to its end, memprobe exits with
its exit code and says what was kept (`memprobe report DIR` finishes a folder once there is space).
A process that leaves the tree and the process group before memprobe first sees it (a daemon's
double fork within one tick, 0.2 s) is not seen.

--live shows `memprobe top`'s view while the job runs, at the foot of the terminal, under the
job's own output, which passes through unchanged (the terminal's scroll region, as apt draws its
progress line; see memprobe.cli.panel). The job keeps the terminal and the keyboard: Ctrl-C
stops it as without --live, and memprobe saves what was sampled. A full-screen view (top's
alternate screen) would hide the job's output, and the job's output redirected to a file would
change what it prints (no terminal: no progress bars, other buffering); so the job's output stays
where the user expects it, and the view takes the lines below. Where stderr is no terminal, one
line every --every seconds goes to stderr.

A terminal paused with Ctrl-S (or one that stops reading) holds the job's own output as it would
without memprobe, and never memprobe's sampling or its end: what memprobe writes while the job
runs is written by a thread of its own (memprobe.cli.outlet), the view's repaints the terminal
did not take dropped. memprobe's summary follows once the terminal takes output again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from memprobe.cli.flags import bounded
from memprobe.core.cures import CAUSES  # the words only: no torch, pandas or numpy

if TYPE_CHECKING:
    from memprobe.cli.outlet import Outlet
    from memprobe.cli.top import Live

NAME = "record"
HELP = "run your command (e.g. python train.py) and profile its workers' memory"
EPILOG = """examples:
  memprobe record -- python train.py --epochs 2
  memprobe record -o reports/mine -- torchrun --nproc-per-node 2 train.py
  memprobe record --pss-budget 0.05 -- python -m mypkg.train
  memprobe record --fail-on growing -- python train.py --max-steps 300   # CI: exit 3 if it grows
"""
# --fail-on: the exit code where the command succeeded but the verdict names what the flag lists.
VERDICT_EXIT = 3


NO_ITEMS = {
    "record": "items/s: not recorded (add memprobe.mark(n_items) to the loop to see them)",
    # watch cannot set MEMPROBE_MARK_FILE in a process that is already running.
    "watch": "items/s: not recorded (watch sees memprobe.mark() calls only from a job started with "
    "MEMPROBE_MARK_FILE set; `memprobe record -- COMMAND` sets it for you)",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument(
        "--live",
        action="store_true",
        help="a live view of the job's memory per process at the foot of the terminal, under the "
        "job's own output (which passes through unchanged); where stderr is no terminal, one line "
        "every --every seconds on stderr",
    )
    p.add_argument(
        "--every",
        type=float,
        default=5.0,
        metavar="S",
        help="with --live, when stderr is not a terminal: one line every S seconds (default: 5)",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS...]",
        help="the command to run (put it after --)",
    )


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o", "--output", metavar="DIR", help="results folder (default: reports/<kind>-<name>-<UTC time>)"
    )
    p.add_argument("--no-report", action="store_true", help="save results and summary only; skip report.html")
    p.add_argument(
        "--interval",
        type=float,
        default=0.2,
        metavar="S",
        help="seconds between cheap samples (RSS, CPU) of every process (default: 0.2)",
    )
    p.add_argument(
        "--pss-budget",
        type=float,
        default=0.01,
        metavar="SHARE",
        help="share of one CPU core the whole sampler may use, averaged over the run; exact "
        "PSS/USS readings go to the processes whose memory moved, as the share allows "
        "(default: 0.01)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        metavar="MB",
        help="worker USS growth (mean per worker) above which the verdict is 'growing' (default: 50)",
    )
    p.add_argument(
        "--fail-on",
        metavar="WHAT",
        help="exit 3 where the command succeeded but the verdict is 'growing', or names one of these "
        "causes (comma-separated: growing, " + ", ".join(CAUSES) + "), below the threshold too",
    )


def fail_on(args: argparse.Namespace) -> set[str]:
    """What --fail-on names, checked before anything runs (one line naming the flag, the value
    and what is allowed)."""
    from memprobe.core.errors import UsageError

    if not getattr(args, "fail_on", None):
        return set()
    wanted = {w.strip() for w in args.fail_on.split(",") if w.strip()}
    allowed = ("growing", *CAUSES)
    bad = sorted(wanted - set(allowed))
    if bad or not wanted:
        from memprobe.core.text import printable

        raise UsageError(
            f"--fail-on {printable(args.fail_on)!r}: {', '.join(map(repr, bad)) or 'nothing'} is not a "
            f"verdict or cause; allowed: {', '.join(allowed)} (comma-separated)"
        )
    return wanted


def verdict_exit(result, wanted: set[str], stream) -> int:
    """The exit code: the command's, unless it succeeded and the verdict names what ``wanted``
    lists (:data:`VERDICT_EXIT`, said in one line)."""
    from memprobe.cli.console import say

    if not wanted or result.exit_code != 0:
        return result.exit_code
    found = [
        w
        for s in result.summaries
        for w in ([s.verdict] if s.verdict == "growing" else []) + list(s.causes or [])
        if w in wanted
    ]
    if not found:
        return result.exit_code
    say(f"\nmemprobe: --fail-on {', '.join(dict.fromkeys(found))}: exit {VERDICT_EXIT}", stream)
    return VERDICT_EXIT


def settings_from(args: argparse.Namespace):
    """The sampler's settings and the verdict's threshold from the flags, each checked: finite
    and within the range a scenario file allows for the same setting (NaN as --interval made the
    sampler spin a core, 60,000 rows in 4 s)."""
    from memprobe.probe.sampler import SamplerSettings
    from memprobe.run.scenario import VerdictSpec

    interval = bounded("--interval", args.interval, 0.01, 60, unit="seconds")
    budget = bounded("--pss-budget", args.pss_budget, 0.001, 1)
    verdict = (
        VerdictSpec()
        if args.threshold is None
        else VerdictSpec(growth_threshold_mb=bounded("--threshold", args.threshold, 0, unit="MB"))
    )
    return SamplerSettings(interval_s=interval, pss_cpu_budget=budget), verdict


def main(args: argparse.Namespace) -> int:
    from memprobe.core.errors import UsageError

    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command given: memprobe record [-o DIR] -- COMMAND [ARGS...]")
    settings, verdict = settings_from(args)
    wanted = fail_on(args)
    every = bounded("--every", args.every, 0.1, 3600, unit="seconds")
    from memprobe.cli.outlet import Outlet
    from memprobe.record.command import record  # pandas and the rest, once the arguments are good

    outlet = Outlet()  # what memprobe says while the job runs never waits for the terminal

    def log(line: str) -> None:
        outlet.say(sys.stderr, line)

    live = live_view(every, log, outlet) if args.live else None
    try:
        result = record(
            command,
            Path(args.output) if args.output else None,
            settings=settings,
            verdict=verdict,
            render=not args.no_report,
            log=live.log if live else log,
            observer=live,
        )
    finally:
        if live is not None:
            live.close()
        outlet.wait()  # the results are saved: the summary follows memprobe's last lines
    print_result(result, sys.stderr)
    return verdict_exit(result, wanted, sys.stderr)


def live_view(every: float, log: Callable[[str], None], outlet: Outlet) -> Live:
    """``--live``: the view at the foot of the terminal the job shares (:mod:`memprobe.cli.panel`)
    where stderr is one, else one line every ``every`` seconds on stderr."""
    import os

    from memprobe.cli.panel import Panel
    from memprobe.cli.top import Lines, Live

    name = "memprobe record"
    display: Panel | Lines = (
        Panel(
            sys.stderr,
            outlet,
            color=not os.environ.get("NO_COLOR"),
            name=name,
            hint="Ctrl-C: stop the job, save",
        )
        if sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"
        else Lines(sys.stderr, every, outlet=outlet, name=name)
    )
    return Live(display, log=log)


def print_result(result, stream) -> None:
    """The summary table, each worker's lifetime growth, what the user must know besides
    (marks ignored, sampling stopped, processes still running) and where the results are.
    Through ``say``: a closed pipe or a terminal gone (SIGHUP) stops the output, nothing else."""
    from memprobe.cli.console import say, summary_table
    from memprobe.core import cures
    from memprobe.core.text import printable

    p = lambda text: say(text, stream)  # noqa: E731
    if result.summaries:
        p("")
        p(summary_table(result.summaries))
    for s in result.summaries:
        p(f"\n{s.explanation}")
        if s.items_per_s is None:
            p(NO_ITEMS.get(result.kind, NO_ITEMS["record"]))
        if s.memory_limit:
            p(limit_line(s.memory_limit))
        for line in cures.text_lines(cures.causes_of(s), cures.job_of(s)):
            p(line)
    rows = process_rows(result.processes, outlived={o["pid"] for o in result.outlived})
    if rows:
        p(
            "\nper process (own growth: from its start for a forked worker, after start-up for a spawned one, from its\n"
            "first worker for a parent; not growth: pages made private or shared by other processes):"
        )
        p(rows)
    for note in result.notes:
        p(f"\n{note}")
    if result.status == "interrupted" and result.saved:
        p("\nmemprobe: interrupted: what was sampled has been saved")
    if not result.saved and not result.root.exists():  # deleted or moved: said in the notes
        return
    p(
        f"\nresults: {printable(str(result.root))}"
        + (f"\nreport:  {printable(str(result.report))}" if result.report else "")
    )


def limit_line(limit: dict) -> str:
    """The job against its memory limit, in one line: the limit, whose the cgroup's charge is
    where other processes share it, the forecast of the time to it
    (:func:`memprobe.record.forecast_words.words`), the OOM kills (the record page says more)."""
    from memprobe.core.text import printable
    from memprobe.record import forecast_words
    from memprobe.report import format as fmt
    from memprobe.report.record_tables import whose_charge

    of = printable(str(limit.get("limit_of")))
    line = f"memory limit: {fmt.mb(limit.get('limit_mb'))}, {of}"
    if limit.get("cgroup_alone") is False:
        line += f" ({printable(whose_charge(limit))})"
    if isinstance(limit.get("forecast"), dict):
        line += f"; time to it: {forecast_words.words(limit['forecast'], limit.get('limit_mb'))}"
    if limit.get("oom_kills"):
        victims = [v for k in limit.get("oom_killed") or [] for v in k["victims"]]
        line += f"; OOM kills in its cgroup: {limit['oom_kills']}" + (
            f" ({printable(', '.join(victims))})" if victims else ""
        )
    if machine := limit.get("machine_oom_killed"):
        victims = [v for k in machine for v in k["victims"]]
        line += (
            f"; the machine's OOM killer (machine-wide) killed {sum(int(k.get('kills') or 1) for k in machine)}"
            f" right before the job lost {printable(', '.join(victims))}"
        )
    return line


def process_rows(processes: list[dict], limit: int = 24, outlived: Collection[int] = ()) -> str:
    """The per-process table: each process's life (its own start to its end, "runs on" for one
    still running when the command ended, ``outlived``), what it held when its growth window
    opened (and built between its worker generations), its own growth, and what moved without
    being its growth."""
    # Here, not at the top: this module's top imports the standard library only, so that
    # `memprobe record --help` and a bad argument answer at once (the recording loaded these).
    from memprobe.core.vocabulary import MAIN, PARENT_KINDS
    from memprobe.report.format import DASH, span

    def num(v: float | None, sign: bool = False) -> str:
        return "-" if v is None else (f"{v:+,.1f}" if sign else f"{v:,.1f}")

    def life(r: dict) -> str:
        start = r.get("start_t", r["first_t"])
        if r["pid"] in outlived and start is not None:
            return f"{max(start, 0.0) + 0.0:.1f}-, runs on"
        alive = span(start, r.get("end_t") or r["last_t"], dash="-")
        return "-" if alive == DASH else alive

    head = (
        "pid",
        "role",
        "kind",
        "alive",
        "exact",
        "built/start-up MB",
        "USS MB",
        "own growth MB",
        "not growth MB",
    )
    rows = [head]
    shown = [
        r
        for r in processes
        if r["worker"] >= 0
        or r.get("kind") in PARENT_KINDS
        or r["role"] == MAIN
        or r["role"].startswith("rank ")
        or r["pid"] in outlived
    ]
    for r in shown[:limit]:
        before = num(r.get("built_mb") if r.get("built_mb") is not None else r.get("startup_mb"))
        if r.get("built_between_mb") is not None and abs(r["built_between_mb"]) >= 1:
            before += f", {num(r['built_between_mb'], sign=True)} between generations"
        moved = [v for v in (r.get("released_mb"), r.get("written_mb"), r.get("shared_mb")) if v]
        est = " (est.)" if r.get("estimated") else ""
        rows.append(
            (
                str(r["pid"]),
                r["role"],
                str(r.get("kind") or "-"),
                life(r),
                str(r["pss_samples"]),
                before,
                f"{num(r['uss_start_mb'])} -> {num(r['uss_end_mb'])}",
                num(r["growth_mb"], sign=True) + est,
                num(sum(moved), sign=True) if moved else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    if len(shown) > limit:
        lines.append(f"... and {len(shown) - limit} more (summary.json has them all)")
    return "\n".join(lines) if len(rows) > 1 else ""
