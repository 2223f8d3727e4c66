"""What ``memprobe record``, ``watch`` and ``top`` share: their common flags (the results folder,
the sampler's settings, the verdict's threshold, ``--fail-on``), the recording's output on the
terminal (the summary table, the verdict in words, the memory limit, what to do, the table per
process) and the exit code ``--fail-on`` asks for.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection

from memprobe.core.cures import CAUSES  # the words only: no torch, pandas or numpy
from memprobe.core.numbers import bounded

# --fail-on: the exit code where the command succeeded but the verdict names what the flag lists.
VERDICT_EXIT = 3


NO_ITEMS = {
    "record": "items/s: not recorded (add memprobe.mark(n_items) to the loop to see them)",
    # watch cannot set MEMPROBE_MARK_FILE in a process that is already running.
    "watch": "items/s: not recorded (watch sees memprobe.mark() calls only from a job started with "
    "MEMPROBE_MARK_FILE set; `memprobe record -- COMMAND` sets it for you)",
}


# The per-process table's columns in words (process_rows): what a newcomer reads first.
PROCESS_LEGEND = """\
  before MB: what a parent allocated before its first worker started (what its workers share), or
    what a spawned worker was given and imported as it started; not counted as growth
  own growth MB: what its private memory (USS) gained after that: for a forked worker from its
    start, for a spawned one from the end of its start-up, for a parent from its first worker
  not counted MB: pages it did not allocate that became its own or shared as other processes
    copied them or exited (a parent's pages stop being shared when its workers end)"""


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
    from memprobe.core.verdict import VerdictSpec
    from memprobe.probe.sampler import SamplerSettings

    interval = bounded("--interval", args.interval, 0.01, 60, unit="seconds")
    budget = bounded("--pss-budget", args.pss_budget, 0.001, 1)
    verdict = (
        VerdictSpec()
        if args.threshold is None
        else VerdictSpec(growth_threshold_mb=bounded("--threshold", args.threshold, 0, unit="MB"))
    )
    return SamplerSettings(interval_s=interval, pss_cpu_budget=budget), verdict


def print_result(result, stream) -> None:
    """The summary table, each worker's lifetime growth, what the user must know besides
    (marks ignored, sampling stopped, processes still running) and where the results are.
    Through ``say``: a closed pipe or a terminal gone (SIGHUP) stops the output, nothing else."""
    from memprobe.cli.console import TABLE_LEGEND, attribution_lines, say, summary_table
    from memprobe.core import cures
    from memprobe.core.text import printable

    p = lambda text: say(text, stream)  # noqa: E731
    if result.summaries:
        p("")
        p(summary_table(result.summaries))
        p(TABLE_LEGEND)
        several = len(result.summaries) > 1
        first = cures.first_lines(
            [(s.run_id if several else "", cures.advice_for(cures.causes_of(s))) for s in result.summaries]
        )
        if first:
            p("")
            for line in first:
                p(line)
    for s in result.summaries:
        p(f"\n{s.explanation}")
        if s.items_per_s is None:
            p(NO_ITEMS.get(result.kind, NO_ITEMS["record"]))
        if s.memory_limit:
            p(limit_line(s.memory_limit))
        for line in attribution_lines(s):
            p(line)
        if s.copied_by_kind:
            p(
                "\nwhere the forked workers' copied pages lie (read from outside; memprobe.mark_dataset names the structures):"
            )
            for k in s.copied_by_kind:
                p(f"  {k['sentence']}")
        for line in cures.text_lines(cures.causes_of(s), cures.job_of(s)):
            p(line)
    rows = process_rows(result.processes, outlived={o["pid"] for o in result.outlived})
    if rows:
        p("\nper process:")
        p(PROCESS_LEGEND)
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
    (:func:`memprobe.core.forecast_words.words`), the OOM kills (the record page says more)."""
    from memprobe.core import forecast_words
    from memprobe.core.text import printable
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
    from memprobe.core.vocabulary import MAIN, PARENT_KINDS, PROGRAM
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
        "before MB",
        "USS MB",
        "own growth MB",
        "not counted MB",
    )
    rows = [head]
    shown = [
        r
        for r in processes
        if r["worker"] >= 0
        or r.get("kind") in (*PARENT_KINDS, PROGRAM)  # a program beside the workers: its memory, named
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
