"""Try the fixes for copy-on-access on your own dataset, side by side.

Given a dataset factory (MODULE:CALLABLE, as `memprobe run --dataset` takes), runs a DataLoader
over the dataset as it is (fork), then with each fix applied automatically: its large list and
tuple attributes pickled into one shared buffer (memprobe.SharedList) and a pandas frame's
object columns of strings held as Arrow strings (fork); gc.freeze() before the workers start
(fork); thread workers; spawn. Each run is sampled from the outside as `memprobe run` does. It
prints, per variant, each worker's USS growth, USS at start, the peak of the total PSS, items/s
and the verdict; what was converted (and what could not be, with why); and, for each fix that
stayed flat, the one-line change that applies it in your code, then a pytest test that keeps it
flat once made.

The module is imported from the current folder as `run --dataset` does, and never in memprobe's
own process: first in a process of its own, within --timeout, where a module that cannot be
imported (it raises, has a SyntaxError, calls sys.exit, ends its process, or does not return)
stops cure with nothing written; then in each run's process, which builds the dataset and
iterates it within --timeout. The first run is the check that the factory builds a dataset: one
that raises, ends the process, returns something that is not a dataset, or does not return
within --timeout stops cure there, once, before any other variant runs.

Results go to reports/cure-<name>-<UTC time>/ (or -o DIR), one folder per run (`memprobe report`
renders one). Exit codes: 0 done (whatever the verdicts; a variant that failed is shown failed),
1 the runs could not be made, 2 bad input: a flag, or your module or factory failing as above
(one line naming MODULE:CALLABLE, what went wrong and where in your code; the first run's folder
keeps the whole traceback), 130 interrupted by Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from memprobe.core.errors import UsageError
from memprobe.core.rounds import median_of
from memprobe.core.text import clip, columns, pad, printable

NAME = "cure"
HELP = "try the fixes for copy-on-access on your own dataset, side by side, with the change to make"
EPILOG = """examples:
  memprobe cure mypkg.data:build_dataset
  memprobe cure mypkg.data:build_dataset --kwargs '{"split": "train"}' --items 50000 --rounds 3
  memprobe cure user_datasets:coco_style --kwargs '{"images": 160000}' --items 60000 -o reports/coco-cure
  memprobe cure mypkg.data:build_dataset --only as-is,converted   # two of the variants
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dataset",
        metavar="MODULE:CALLABLE",
        help="a factory returning a torch Dataset, imported by name (e.g. mypkg.data:build)",
    )
    p.add_argument(
        "--kwargs", metavar="JSON", default="{}", help="keyword arguments for the factory, as JSON"
    )
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default: 2)")
    p.add_argument("--items", type=int, help="stop each run after this many items (default: one pass)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default: 64)")
    p.add_argument(
        "--rounds", type=int, default=1, help="runs of each variant, interleaved (default: 1); medians shown"
    )
    p.add_argument(
        "--min-elements",
        type=int,
        default=1_000,
        metavar="N",
        help="convert lists and tuples of at least N elements (default: 1,000)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=50.0,
        metavar="MB",
        help="a worker growing more than MB is 'growing' (default: 50)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="per-run timeout in seconds, which also bounds importing your module and building the "
        "dataset (default: 300)",
    )
    p.add_argument(
        "--only",
        metavar="VARIANTS",
        # The names are run/cure.py's VARIANTS' keys (a unit test holds them equal): importing it
        # here would slow every memprobe command's start.
        help="run only these variants, comma-separated: as-is, converted, gc-freeze, threads, spawn "
        "(default: all)",
    )
    p.add_argument(
        "-o", "--output", metavar="DIR", help="results folder (default: reports/cure-<name>-<UTC time>)"
    )


def main(args: argparse.Namespace) -> int:
    from memprobe.cli.flags import json_kwargs
    from memprobe.core.numbers import bounded

    kwargs = json_kwargs("--kwargs", args.kwargs)
    bounded("--workers", args.workers, 1)
    bounded("--rounds", args.rounds, 1)
    bounded("--batch-size", args.batch_size, 1)
    bounded("--min-elements", args.min_elements, 1)
    bounded("--timeout", args.timeout, 1)
    bounded("--threshold", args.threshold, 0)
    if args.items is not None:
        bounded("--items", args.items, 1)
    only = variant_keys(args.only)
    from memprobe.run.limits import Machine

    most = Machine.here().max_workers
    if args.workers > most:
        raise UsageError(
            f"--workers: got {args.workers}; allowed: at most {most} on this machine (docs/limits.md)"
        )
    from memprobe.cli.console import say
    from memprobe.results.folder import check_output, default_out_dir
    from memprobe.run.cure import run_variants
    from memprobe.run.import_check import check_imports

    # The user's module, from here, as `run --dataset` finds it: in each run's process (profile()
    # passes this path on); never imported in this one, where it could hang memprobe.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    # A name or module that cannot be imported stops here, nothing written (exit 2).
    check_imports([args.dataset], [p for p in sys.path if p], args.timeout, "--timeout")
    name = args.dataset.rsplit(":", 1)[-1].split(".")[-1] or "dataset"
    if args.output:
        out = Path(args.output)
        check_output(out)
    else:
        out = default_out_dir(f"cure-{name}")
    say(f"memprobe cure: {args.dataset}, {args.workers} workers, {args.rounds} round(s) -> {out}", sys.stderr)
    outcomes = run_variants(
        args.dataset,
        kwargs,
        out,
        workers=args.workers,
        items=args.items,
        batch_size=args.batch_size,
        rounds=args.rounds,
        min_elements=args.min_elements,
        timeout_s=args.timeout,
        growth_threshold_mb=args.threshold,
        only=only,
        log=lambda line: say(f"  {line}", sys.stderr),
    )
    say(render(outcomes, args.dataset, kwargs, out))
    return 0


def variant_keys(text: str | None) -> tuple[str, ...] | None:
    """``--only``'s variants in the table's order (None: all), or a UsageError naming the one
    that is not a variant."""
    if text is None:
        return None
    from memprobe.run.cure import VARIANTS

    keys = [k.strip() for k in text.split(",")]
    allowed = [v.key for v in VARIANTS]
    for key in keys:
        if key not in allowed:
            raise UsageError(f"--only: unknown variant {key!r}; allowed: {', '.join(allowed)}")
    return tuple(k for k in allowed if k in keys)


def render(outcomes: list[Any], dataset: str, kwargs: dict, out: Path) -> str:
    """The side-by-side table, what was converted, and the changes to make."""
    lines = [f"memprobe cure {dataset}" + (f" --kwargs '{json.dumps(kwargs)}'" if kwargs else ""), ""]
    lines += _conversion_lines(outcomes)
    rounds = max((len(o.results) for o in outcomes), default=0)
    if rounds > 1:
        lines.append(f"medians of {rounds} rounds, run interleaved:")
    head = f"{'variant':<28}{'worker growth':>15}{'USS at start':>14}{'total PSS peak':>16}{'items/s':>11}  verdict"
    lines += [head]
    for o in outcomes:
        lines.append(_row(o))
    lines += _attribution_lines(outcomes)
    lines += ["", *_changes(outcomes), *_guard(outcomes, dataset, kwargs), "", f"results: {out}"]
    return "\n".join(lines)


def _conversion_lines(outcomes: list[Any]) -> list[str]:
    conv = next((o.conversion for o in outcomes if o.conversion is not None), None)
    if conv is None:
        return []
    lines = []
    if conv.converted:
        lines.append("converted for the SharedList / Arrow variant:")
        lines += [f"  {c.attribute}: {c.was} -> {c.now}" for c in conv.converted]
    else:
        lines.append("converted for the SharedList / Arrow variant: nothing (not run)")
    if conv.refused:
        lines.append("not converted:")
        lines += [f"  {r.attribute} ({r.was}): {r.why}" for r in conv.refused]
    return [*lines, ""]


ATTRIBUTION_ROWS = 8  # paths shown in cure's table of what each variant's workers copied
ATTRIBUTION_PATH_COLUMNS = 48


def _attribution_lines(outcomes: list[Any]) -> list[str]:
    """Which of the dataset's structures each fork variant's workers copied, MB per worker (the
    median of the rounds; the analysis' table, summary.json's ``attribution``), side by side:
    which attribute each fix moved; then each attribute the conversion refused, by name, with
    its share of what the workers copied as is."""
    tables = []
    for o in outcomes:
        found = [a for r in o.results if (a := getattr(r.summary, "attribution", None))]
        found = [a for a in found if not a.get("error")]
        if found:
            tables.append((o, found))
    if not tables:
        return []
    order: list[str] = []
    for _, found in tables:
        for a in found:
            order += [r["path"] for r in a["rows"] if r["kind"] == "path" and r["path"] not in order]
    rest = [r["path"] for r in tables[0][1][0]["rows"] if r["kind"] != "path"]
    shown = order[:ATTRIBUTION_ROWS] + rest
    names = [clip(printable(p), ATTRIBUTION_PATH_COLUMNS) for p in [*shown, "copied (the total)"]]
    width = max(columns(n) for n in names)
    lines = ["", "which structure each worker copied (MB per worker; summary.json's attribution):"]
    lines.append("  " + pad("path", width) + "".join(f"{o.variant.label:>28}" for o, _ in tables))
    for name, path in zip(names, shown, strict=False):
        cells = "".join(f"{_num1(_path_mb(found, path)):>28}" for _, found in tables)
        lines.append("  " + pad(name, width) + cells)
    totals = [median_of([a["copied_mean_mb"] for a in found]) for _, found in tables]
    lines.append("  " + pad(names[-1], width) + "".join(f"{_num1(t):>28}" for t in totals))
    base = next((found for o, found in tables if o.variant.key == "as-is"), None)
    conv = next((o.conversion for o in outcomes if o.conversion is not None), None)
    if base and conv and conv.refused:
        total = median_of([a["copied_mean_mb"] for a in base])
        for r in conv.refused:
            path = "dataset" + r.attribute.removeprefix("self")  # cure's names start at self
            mine = _path_mb(base, path)
            if mine is not None and total:
                lines.append(
                    f"  not converted: {printable(path)} holds {mine:,.1f} of the {total:,.1f} MB each "
                    f"worker copied as is ({mine / total:.0%})"
                )
    return lines


def _path_mb(found: list[dict], path: str) -> float | None:
    """A path's MB per worker, the median over the rounds that name it."""
    return median_of([r["mean_mb"] for a in found for r in a["rows"] if r["path"] == path])


def _num1(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _row(o: Any) -> str:
    label = o.variant.label
    if o.skipped or not o.results:
        return f"{label:<28}  not run" + (f": {o.skipped}" if o.skipped else "")
    ok = [r.summary for r in o.results if r.summary.status == "ok"]
    if not ok:
        errors = {r.summary.error or r.summary.status for r in o.results}
        return f"{label:<28}  failed: {_one_line('; '.join(sorted(errors)))}"
    thread = o.variant.mode == "thread"
    growth = median_of([s.main_uss_growth_mb if thread else s.worker_uss_growth_mb for s in ok])
    start = None if thread else median_of([s.worker_uss_start_mb for s in ok])
    pss = median_of([s.total_pss_peak_mb for s in ok])
    rate = median_of([s.items_per_s for s in ok])
    verdicts = [s.verdict or "no window" for s in ok]
    verdict = verdicts[0] if len(set(verdicts)) == 1 else ", ".join(verdicts)
    if len(ok) < len(o.results):
        verdict += f" ({len(o.results) - len(ok)} of {len(o.results)} runs failed)"
    return (
        f"{label:<28}{_mb(growth, sign=True) + (' (main)' if thread else ''):>15}{_mb(start):>14}"
        f"{_mb(pss):>16}{_num(rate):>11}  {verdict}"
    )


# A fix whose total PSS peak is more than this share above the dataset as it is costs memory in
# all: it is no fix where memory is what runs out (spawn's copy per worker, 3,424 MB against 1,563).
MORE_MEMORY_SHARE = 0.05


def _changes(outcomes: list[Any]) -> list[str]:
    """The one-line change for each fix whose every run stayed flat, least total PSS first, with
    its items/s and total PSS against the dataset as it is; a flat fix whose total PSS peak is
    above the dataset's as it is (:data:`MORE_MEMORY_SHARE`) is set apart, not offered as a fix."""
    base = next((o for o in outcomes if o.variant.key == "as-is"), None)
    base_ok = [r.summary for r in base.results if r.summary.status == "ok"] if base else []
    base_rate = median_of([s.items_per_s for s in base_ok])
    base_pss = median_of([s.total_pss_peak_mb for s in base_ok])
    fixes, costlier = [], []
    for o in outcomes:
        if o.variant.key == "as-is" or o.skipped or not o.results:
            continue
        if not all(r.summary.status == "ok" and r.summary.verdict == "flat" for r in o.results):
            continue
        rate = median_of([r.summary.items_per_s for r in o.results])
        pss = median_of([r.summary.total_pss_peak_mb for r in o.results])
        costs = []
        if rate and base_rate:
            costs.append(f"{rate / base_rate:.2f}x the items/s as is")
        if pss is not None and base_pss is not None:
            costs.append(f"total PSS peak {_mb(pss)} against {_mb(base_pss)}")
        if pss is not None and base_pss is not None and pss > base_pss * (1 + MORE_MEMORY_SHARE):
            costlier.append(
                f"{o.variant.label}: flat, but {_mb(pss - base_pss)} more in all ({'; '.join(costs)})"
            )
            continue
        changes = [c.change for c in o.conversion.converted] if o.conversion else [o.variant.change()]
        said = [f"{o.variant.label}: flat ({'; '.join(costs)}); the change:", *[f"    {c}" for c in changes]]
        fixes.append((pss if pss is not None else float("inf"), said))
    lines = [line for _, said in sorted(fixes, key=lambda f: f[0]) for line in said]
    head = "what to change (the fixes that stayed flat, least memory in all first):"
    if base_ok and all(s.verdict == "flat" for s in base_ok):
        head = "the dataset as it is stayed flat: no fix is needed; what each would cost:"
    out = (
        [head, *lines]
        if lines
        else ["no fix stayed flat here" + (" without more memory in all" if costlier else "")]
    )
    if costlier:
        out += ["", "flat, but more memory in all than the dataset as it is (no fix where memory runs out):"]
        out += [f"  {line}" for line in costlier]
    return out


def _guard(outcomes: list[Any], dataset: str, kwargs: dict) -> list[str]:
    """The pytest guard (memprobe/core/cures.py's) that keeps the first flat fix made in the
    user's own code flat, where the dataset as it is grew: the conversion's under fork, else
    threads'. gc.freeze() and spawn get none here (the guard profiles the factory as it is, in
    one mode)."""
    from memprobe.core import cures

    base = [r.summary for o in outcomes if o.variant.key == "as-is" for r in o.results]
    if not any(s.verdict == "growing" for s in base):
        return []  # nothing to fix, nothing to keep fixed
    for o in outcomes:
        if o.variant.key not in ("converted", "threads") or not o.results:
            continue
        runs = [r.summary for r in o.results]
        if all(s.status == "ok" and s.verdict == "flat" for s in runs):
            job = cures.Job(
                dataset, kwargs or None, runs[0].mode, runs[0].workers, runs[0].growth_threshold_mb
            )
            text = cures.guard(cures.ADVICE[cures.COPY_ON_ACCESS], job)
            return ["", f"once the change is made ({o.variant.label}), a pytest test keeps it so:", text]
    return []


def _mb(v: float | None, *, sign: bool = False) -> str:
    return "-" if v is None else f"{v:+.1f} MB" if sign else f"{v:,.0f} MB"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _one_line(text: str) -> str:
    from memprobe.cli.console import short_error

    return short_error(text)
