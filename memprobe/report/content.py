"""The words and tables of the report, derived from run summaries: verdict sentences, the matrix,
advice and the environment. Pure functions; no HTML here (the templates escape everything)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memprobe.core.summary import RunSummary
from memprobe.core.vocabulary import FORK, THREAD, has_worker_processes, item_noun
from memprobe.report import format as fmt


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "run"


def first_line(text: str | None, limit: int = 200) -> str:
    """An error's first line (a worker's error carries the whole remote traceback), shortened."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tone(s: RunSummary) -> str:
    """growing | flat | failed | unknown: the colour family of a run everywhere on the page."""
    if s.verdict in ("growing", "flat"):
        return s.verdict
    return "failed" if s.status != "ok" else "unknown"


def badge_text(s: RunSummary) -> str:
    return s.verdict or ("no verdict" if s.status == "ok" else s.status)


def process_workers(s: RunSummary) -> bool:
    return has_worker_processes(s.mode, s.workers)


# The decoder backend that ran, as recorded by the decode workload ("nvimgcodec-cpu"), by its suffix.
DECODER_BACKENDS = {"cpu": "CPU backend", "gpu": "GPU backend"}


def backend_label(s: RunSummary) -> str:
    """The backend as the scenario names it, plus the decoder backend that ran when that says more:
    'nvimgcodec (CPU backend)', 'nvimgcodec (GPU backend)'; 'pillow' and records backends as they are."""
    ran = s.decoder_backend
    if not ran or ran == s.backend:
        return s.backend
    suffix = ran.removeprefix(f"{s.backend}-")
    return f"{s.backend} ({DECODER_BACKENDS.get(suffix, suffix) if suffix != ran else ran})"


def row_label(backend: str, runs: list[RunSummary]) -> str:
    """A matrix row's name: the backend with the decoder backend(s) its runs used (runs that failed
    before choosing one do not count)."""
    labels = list(dict.fromkeys(backend_label(s) for s in runs if s.backend == backend and s.decoder_backend))
    if len(labels) <= 1:
        return labels[0] if labels else backend
    return f"{backend} ({', '.join(label.removeprefix(backend).strip(' ()') for label in labels)})"


def noun(s: RunSummary) -> str:
    """What a run's loader yields: images for the decode workload, items otherwise."""
    return item_noun(s.workload)


def rate_text(s: RunSummary) -> str:
    """'109 images/s · 6.5 MB/s' for a decode run (encoded MB/s), '53.8k items/s' otherwise."""
    text = fmt.rate(s.items_per_s, noun(s))
    if s.workload == "decode" and fmt.is_num(s.mb_per_s):
        text += f" · {s.mb_per_s:,.1f} MB/s"
    return text


# Page-fault churn: this many more minor faults per item than the run on the same data with the
# fewest (or than none, for a run alone with its data), paid for by this share of its CPU in the kernel.
CHURN_FAULTS_PER_ITEM = 100
CHURN_KERNEL_SHARE = 0.15


def cost_text(s: RunSummary) -> str | None:
    """'524 faults/image · 27% kernel CPU': what each item cost in page faults (None if unknown)."""
    if not fmt.is_num(s.faults_per_item):
        return None
    text = f"{s.faults_per_item:,.0f} faults/{noun(s).removesuffix('s')}"
    if fmt.is_num(s.kernel_cpu_share):
        text += f" · {s.kernel_cpu_share:.0%} kernel CPU"
    return text


def churning(summaries: list[RunSummary]) -> dict[str, RunSummary | None]:
    """Runs with page-fault churn, each with the run on the same data (backend and workload) that
    took the fewest faults per item (``None`` when it has no such peer)."""
    measured = [
        (s, s.faults_per_item) for s in summaries if s.status == "ok" and fmt.is_num(s.faults_per_item)
    ]
    out: dict[str, RunSummary | None] = {}
    for s, faults in measured:
        peers = [
            (p, f) for p, f in measured if p is not s and p.backend == s.backend and p.workload == s.workload
        ]
        best, fewest = min(peers, key=lambda pf: pf[1]) if peers else (None, 0.0)
        floor = min(fewest, faults) if best else 0.0
        if (
            faults - floor >= CHURN_FAULTS_PER_ITEM
            and fmt.is_num(s.kernel_cpu_share)
            and s.kernel_cpu_share >= CHURN_KERNEL_SHARE
        ):
            out[s.run_id] = best
    return out


@dataclass(frozen=True)
class CostRow:
    """One run's throughput next to what each item cost it."""

    run: RunSummary
    anchor: str
    churn: bool


def cost_rows(summaries: list[RunSummary], anchors: dict[str, str]) -> list[CostRow]:
    """Ok runs with a measured rate and per-item counters, in run order."""
    churn = churning(summaries)
    return [
        CostRow(s, anchors[s.run_id], s.run_id in churn)
        for s in summaries
        if s.status == "ok" and fmt.is_num(s.items_per_s) and fmt.is_num(s.cpu_ms_per_item)
    ]


def churn_note(summaries: list[RunSummary]) -> str | None:
    """Which runs churn page faults, and what the run on the same data with the fewest faults
    shows: the difference it makes, measured side by side."""
    churn = churning(summaries)
    if not churn:
        return None
    worst = max((s for s in summaries if s.run_id in churn), key=lambda s: s.faults_per_item or 0)
    one = noun(worst).removesuffix("s")
    text = (
        f"Page-fault churn in {_runs(len(churn))}: {short_label(worst)} took {worst.faults_per_item:,.0f} minor "
        f"faults per {one}, with {worst.kernel_cpu_share:.0%} of its CPU in the kernel."
    )
    best = churn[worst.run_id]
    if best is not None:
        text += (
            f" {short_label(best)} on the same data took {best.faults_per_item:,.0f}"
            + (f" ({best.kernel_cpu_share:.0%} in the kernel)" if fmt.is_num(best.kernel_cpu_share) else "")
            + (
                f", and {best.cpu_ms_per_item:.2f} ms of CPU per {one} against {worst.cpu_ms_per_item:.2f} ms"
                if fmt.is_num(best.cpu_ms_per_item) and fmt.is_num(worst.cpu_ms_per_item)
                else ""
            )
            + "."
        )
    return text + (
        " The usual cause: memory freed after each item goes back to the kernel and is faulted in "
        "again for the next, because glibc trims its heap when no large block is freed through "
        "malloc, e.g. in worker processes, whose batches go to shared memory. For worker processes, "
        "glibc can be told to keep freed memory (mallopt in a worker_init_fn, or "
        "MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ in the environment); docs/perf/threads.md "
        "measures it."
    )


def short_label(s: RunSummary) -> str:
    return f"{backend_label(s)} × {s.mode}"


def run_label(s: RunSummary) -> str:
    if s.workers == 0:
        return f"{short_label(s)} (no workers)"
    unit = "thread" if s.mode == THREAD else "worker"
    return f"{short_label(s)} ({s.workers} {unit}{'s' if s.workers != 1 else ''})"


def span(s: RunSummary, meta: dict) -> str:
    """'1 epoch (200,000 items)' when the run went through its epochs, else '123,456 items'
    (images for a decode run)."""
    loader = meta.get("spec", {}).get("loader", {})
    epochs = loader.get("epochs")
    if s.status == "ok" and loader.get("items") is None and epochs:
        return f"{epochs} epoch{'s' if epochs != 1 else ''} ({s.items:,} {noun(s)})"
    return f"{s.items:,} {noun(s)}"


def gc_copy_likely(s: RunSummary) -> bool:
    """A flat fork run whose workers still grew noticeably: the one-off copy of the interpreter's
    own objects when Python's cyclic GC first walks them (gc.freeze() avoids it)."""
    g = s.worker_uss_growth_mb
    return s.verdict == "flat" and s.mode == FORK and g is not None and g >= 10


def headline(s: RunSummary, meta: dict) -> str:
    """The verdict in one sentence, with the numbers."""
    label = run_label(s)
    if s.verdict is None and s.status != "ok":
        why = f"{s.status}" + (f" — {first_line(s.error)}" if s.error else "")
        return f"{label}: no verdict, the run ended {why}."
    if s.verdict is None:
        return (
            f"{label}: no verdict — the iteration window holds fewer than two PSS samples of the measured "
            f"processes; peak total PSS {fmt.mb(s.total_pss_peak_mb)}."
        )
    peak = f"peak total PSS {fmt.mb(s.total_pss_peak_mb)}"
    if process_workers(s):
        sentence = _workers_sentence(s, meta)
    else:
        who = (
            "one process"
            if s.workers == 0
            else f"one process, {s.workers} thread{'s' if s.workers != 1 else ''}"
        )
        grew = s.main_uss_growth_mb or 0.0
        sentence = (
            f"the process ({who}) grew {fmt.mb(grew)} of private memory over {span(s, meta)}"
            if s.verdict == "growing"
            else f"stayed flat ({fmt.signed_mb(grew)}, {who})"
        )
    tail = "" if s.status == "ok" else f" (run {s.status}: {first_line(s.error)})"
    return f"{label}: {sentence}; {peak}.{tail}"


def _workers_sentence(s: RunSummary, meta: dict) -> str:
    g = s.worker_uss_growth_mb or 0.0
    n = s.workers
    if s.verdict == "growing":
        cause = (
            "a private copy of the data it read (copy-on-access)"
            if s.mode == FORK
            else "private memory that grows with every item read"
        )
        most = (
            f" (the most: {fmt.mb(s.worker_uss_growth_max_mb)})"
            if (s.worker_uss_growth_max_mb or 0) - g > 0.2 * max(g, 1)
            else ""
        )
        each = f"each of {n} workers" if n > 1 else "the worker"
        return f"{each} grew {fmt.mb(g)}{most} over {span(s, meta)} — {cause}"
    out = f"stayed flat ({fmt.signed_mb(g)} per worker)"
    if gc_copy_likely(s):
        out += ", the one-off copy of the interpreter's objects (see “How to read”)"
    if upfront_copy(s):
        out += f", but each worker held {fmt.mb(s.worker_uss_start_mb)} of its own when iteration began"
    return out


def upfront_copy(s: RunSummary) -> bool:
    """A spawn/forkserver run whose workers each unpickled their own copy before iterating: flat,
    yet costly (its matrix cell says so, next to the green)."""
    start = s.worker_uss_start_mb
    return process_workers(s) and s.mode != FORK and start is not None and start > s.growth_threshold_mb


def overview(summaries: list[RunSummary]) -> str:
    """The first line of the page: how many runs copy memory, and which."""
    if not summaries:
        return "No runs in this results folder."
    growing = [s for s in summaries if s.verdict == "growing"]
    failed = [s for s in summaries if s.status != "ok"]
    unjudged = [s for s in summaries if s.verdict is None and s.status == "ok"]
    threshold = max(s.growth_threshold_mb for s in summaries)
    if growing:
        worst = max(growing, key=lambda s: measured_growth(s) or 0)
        head = (
            f"{len(growing)} of {len(summaries)} runs copy memory as they iterate; the worst is "
            f"{run_label(worst)}, {fmt.signed_mb(measured_growth(worst))} per "
            f"{'worker' if process_workers(worst) else 'process'}."
        )
    elif any(s.verdict for s in summaries):
        head = f"No run's memory grew beyond the {threshold:g} MB threshold."
    else:
        head = "No run has a verdict."
    if failed:
        head += f" {_runs(len(failed))} did not finish cleanly."
    if unjudged:
        head += f" {_runs(len(unjudged))} finished without enough PSS samples for a verdict."
    return head


def nothing_to_fix(summaries: list[RunSummary]) -> str:
    """What 'What to do' says when no run grows."""
    judged = [s for s in summaries if s.verdict]
    if not judged:
        return "No run has a verdict, so there is nothing to recommend."
    threshold = max(s.growth_threshold_mb for s in judged)
    some = " (among the runs with a verdict)" if len(judged) < len(summaries) else ""
    return f"Nothing to fix: no run's memory grew beyond {threshold:g} MB while iterating{some}."


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def measured_growth(s: RunSummary) -> float | None:
    return s.worker_uss_growth_mb if process_workers(s) else s.main_uss_growth_mb


def growth_text(s: RunSummary) -> str:
    """The growth the verdict is based on, with its unit: '+106 MB per worker' / '−0.4 MB (process)'."""
    return f"{fmt.signed_mb(measured_growth(s))} {'per worker' if process_workers(s) else '(process)'}"


# -- matrix --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    summary: RunSummary | None
    anchor: str | None = None
    style: str = ""
    bar: float = 0.0  # peak total PSS as a share of the largest on the page
    fit: tuple[bool, str] | None = None  # whether its peak total PSS fits the limit, in words
    runs: int = 1  # the runs of this configuration (repeats): the cell shows the first


def fit_words(peak_mb: float | None, limit: tuple[float | None, str]) -> tuple[bool, str] | None:
    """Whether a configuration's peak total PSS fits the memory its runs had to fit in, in
    words (None: a peak or limit not known)."""
    limit_mb, of = limit
    if peak_mb is None or not limit_mb:
        return None
    share = peak_mb / limit_mb
    if peak_mb <= limit_mb:
        return True, f"fits: {share:.0%} of the {fmt.mb(limit_mb)} limit ({of})"
    return False, f"over the {fmt.mb(limit_mb)} limit ({of}) by {fmt.mb(peak_mb - limit_mb)}"


@dataclass(frozen=True)
class Matrix:
    workers: int
    modes: list[str]
    rows: list[tuple[str, list[Cell]]]


def cell_style(s: RunSummary) -> str:
    """Background: red, deeper the further past the threshold; green when flat; grey otherwise."""
    t = tone(s)
    if t == "growing":
        over = min(((measured_growth(s) or 0) / max(s.growth_threshold_mb, 1e-9) - 1) / 3, 1.0)
        # Light enough at its deepest for the cell's dark text to stay readable.
        return f"background: hsl(0, 75%, {88 - 12 * max(over, 0):.0f}%)"
    if t == "flat":
        return "background: hsl(140, 45%, 91%)"
    return "background: #e9ecef"


def matrices(
    summaries: list[RunSummary], anchors: dict[str, str], limit: tuple[float | None, str] = (None, "")
) -> list[Matrix]:
    """One backend x mode table per worker count; axes come from the data, in run order; each
    configuration marked as fitting ``limit`` (MB, what it is) or not. A repeated configuration
    shows its first run and says how many it had (their medians: "How many workers")."""
    peak = max((s.total_pss_peak_mb or 0 for s in summaries), default=0) or 1
    out = []
    for workers in sorted({s.workers for s in summaries}):
        runs = [s for s in summaries if s.workers == workers]
        modes = list(dict.fromkeys(s.mode for s in runs))
        rows = []
        for backend in dict.fromkeys(s.backend for s in runs):
            cells = []
            for mode in modes:
                mine = [r for r in runs if r.backend == backend and r.mode == mode]
                s = mine[0] if mine else None
                cells.append(
                    Cell(None)
                    if s is None
                    else Cell(
                        s,
                        anchors[s.run_id],
                        cell_style(s),
                        (s.total_pss_peak_mb or 0) / peak,
                        fit_words(s.total_pss_peak_mb, limit),
                        len(mine),
                    )
                )
            rows.append((row_label(backend, runs), cells))
        out.append(Matrix(workers, modes, rows))
    return out


# -- throughput bars ---------------------------------------------------------------------------


def _workers_text(runs: list[RunSummary]) -> str:
    """'1 and 2 workers', '2 threads', 'no workers'."""
    counts = sorted({s.workers for s in runs})
    if counts == [0]:
        return "no workers"
    nums = str(counts[0]) if len(counts) == 1 else f"{', '.join(map(str, counts[:-1]))} and {counts[-1]}"
    unit = "thread" if all(s.mode == THREAD for s in runs) else "worker"
    return f"{nums} {unit}{'s' if counts != [1] else ''}"


def not_in_bars(summaries: list[RunSummary]) -> list[str]:
    """What the throughput bars leave out, and why: each backend all of whose runs failed, the
    failed runs of the other backends (by mode and error), and ok runs that measured no rate."""
    out = []
    for backend in dict.fromkeys(s.backend for s in summaries):
        runs = [s for s in summaries if s.backend == backend]
        failed = [s for s in runs if s.status != "ok"]
        groups: dict[tuple[str, str, str], list[RunSummary]] = {}
        for s in failed:
            groups.setdefault((s.mode, s.status, first_line(s.error, 400) or "no error recorded"), []).append(
                s
            )
        if failed and len(failed) == len(runs):
            whys = dict.fromkeys(f"{status}: {error}" for _, status, error in groups)
            every = "the run" if len(runs) == 1 else f"all {len(runs)} runs"
            out.append(f"{row_label(backend, runs)} ({every} {'; '.join(whys)})")
            continue
        for (_mode, status, error), group in groups.items():
            out.append(f"{short_label(group[0])}, {_workers_text(group)} ({status}: {error})")
        unmeasured = [s for s in runs if s.status == "ok" and s.items_per_s is None]
        for mode in dict.fromkeys(s.mode for s in unmeasured):
            group = [s for s in unmeasured if s.mode == mode]
            out.append(
                f"{short_label(group[0])}, {_workers_text(group)} (no throughput measured: the run "
                f"has no warm point or no last batch)"
            )
    return out


def run_facts(s: RunSummary, meta: dict) -> list[tuple[str, str]]:
    """The numbers behind a run's verdict, as label/value pairs."""
    spec = meta.get("spec", {})
    loader = spec.get("loader") or {}
    workload = spec.get("workload") or "records"
    section = spec.get("dataset" if workload == "records" else workload) or {}
    expect = (
        None
        if s.expectation is None
        else (
            f"{s.expectation} — {'met' if s.expectation_met else 'NOT met' if s.expectation_met is False else 'n/a'}"
        )
    )
    rows: list[tuple[str, str | None]] = [  # a None value leaves its row out
        ("status", s.status),
        (noun(s), fmt.count(s.items)),
        ("duration", fmt.seconds(s.duration_s)),
        ("time to first batch", fmt.seconds(s.time_to_first_batch_s)),
        (f"{noun(s)}/s (iteration)", fmt.rate(s.items_per_s, noun(s))),
        (
            "total PSS start → peak → end",
            f"{fmt.mb(s.total_pss_start_mb)} → {fmt.mb(s.total_pss_peak_mb)} → {fmt.mb(s.total_pss_end_mb)}",
        ),
        ("sum of RSS at peak", f"{fmt.mb(s.sum_rss_peak_mb)} (over-counts by {fmt.mb(s.rss_overcount_mb)})"),
    ]
    if process_workers(s):
        rows += [
            ("worker USS at start (mean)", fmt.mb(s.worker_uss_start_mb)),
            (
                "worker USS growth mean / max",
                f"{fmt.signed_mb(s.worker_uss_growth_mb)} / {fmt.signed_mb(s.worker_uss_growth_max_mb)}",
            ),
        ]
    # The analysis judges the main process on Private_Dirty (its Private_Clean moves when other
    # processes that shared its library pages exit), so the label says so.
    rows += [
        ("main process private dirty growth", fmt.signed_mb(s.main_uss_growth_mb)),
        (
            f"growth per 1,000 {noun(s)} per worker",
            fmt.known(s.growth_per_1k_items_per_worker_mb, "{:+.3f} MB"),
        ),
        ("verdict threshold", fmt.mb(s.growth_threshold_mb)),
        ("expectation", expect),
        (f"workload: {workload}", ", ".join(f"{k}={v}" for k, v in section.items()) if section else None),
        ("loader", ", ".join(f"{k}={v}" for k, v in loader.items()) if loader else None),
        ("CPU cores used (whole tree, in the window)", fmt.known(s.cpu_cores_used, "{:.2f}")),
        (
            f"CPU per {noun(s).removesuffix('s')} (whole tree, in the window)",
            fmt.known(s.cpu_ms_per_item, "{:.3f} ms"),
        ),
        (f"minor page faults per {noun(s).removesuffix('s')}", fmt.known(s.faults_per_item, "{:,.1f}")),
        ("kernel share of that CPU (page faults are paid there)", fmt.known(s.kernel_cpu_share, "{:.0%}")),
        ("decoder backend that ran", s.decoder_backend),
        ("encoded MB/s", fmt.known(s.mb_per_s, "{:,.1f}")),
        ("megapixels/s", fmt.known(s.megapixels_per_s, "{:,.1f}")),
        ("sampler CPU share", f"{s.sampler_cpu_share:.1%}" if s.sampler_cpu_share is not None else None),
    ]
    return [(k, v) for k, v in rows if v is not None]
