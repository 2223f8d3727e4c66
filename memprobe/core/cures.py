"""What to do about each cause memprobe finds: the fixes, the one-line change that applies each,
what each costs, where to look next, and a pytest guard to paste. The one place these words
live: the terminal (``record``, ``watch``, ``run``), the pytest failure message, the record page
and the scenario report all render :func:`advice_for` (as text with :func:`text_lines`, or
through the templates, which escape it).

The causes are named by the analyses: a recorded job's by :func:`memprobe.analysis.culprit.judge`
(from each process's own growth), a scenario run's by :func:`scenario_causes` (from its mode: a
scenario run does not split a forked worker's growth into copied and allocated memory, so a
growing fork run gets both). What a fix costs is a figure measured in docs/performance.md (its
section named) or "measure it": nothing here is a guess.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memprobe.core.vocabulary import FORK, FORKSERVER, MODES, SPAWN, has_worker_processes

if TYPE_CHECKING:
    from memprobe.core.summary import RunSummary

# The causes, as summary.json's ``causes`` names them.
COPY_ON_ACCESS = "copy-on-access"  # forked workers copying the Python objects their parent built
WORKERS_ALLOCATE = "workers-allocate"  # workers (or the dataset in them) allocating memory of their own
MAIN_GROWS = "main-grows"  # the main process (or a rank) growing of its own, in neither shape below
MAIN_KEEPS = "main-keeps"  # ... steadily while its loop runs: the loop keeps something every step
MAIN_INDEX = "main-index"  # ... in steps as each epoch's workers start: the sampler's index list
STARTUP_COPY = "startup-copy"  # spawn/forkserver workers each starting with a copy of the data
SHARED_GROWS = "shared-grows"  # /dev/shm growing while the workers run: batches handed over, kept
CAUSES = (SHARED_GROWS, COPY_ON_ACCESS, WORKERS_ALLOCATE, MAIN_KEEPS, MAIN_INDEX, MAIN_GROWS, STARTUP_COPY)

PERF = "docs/performance.md"
WIDTH = 100  # the terminal's lines of words (code is never wrapped)


@dataclass(frozen=True)
class Cure:
    """One fix: what it is, the change that applies it (code, one line), what it costs."""

    name: str
    what: str
    change: str
    cost: str


@dataclass(frozen=True)
class CauseAdvice:
    """What to do about one cause: the fixes in the order to try them, and where to look next
    (its pytest guard: :func:`guard`)."""

    cause: str
    title: str
    why: str
    cures: tuple[Cure, ...]
    next_step: str = ""


MEMRAY = (
    "memray run --follow-fork -o job.bin train.py (one capture file per forked worker, named with its "
    "pid: memprobe's table gives the pids), then memray flamegraph on that worker's file; --follow-fork "
    "follows fork workers only"
)

_BUFFER = Cure(
    "one serialized buffer",
    "pickle the records once into one byte buffer plus an offsets array, and unpickle the one an "
    "item needs: one Python object for the workers' reference counts and the GC to touch, whatever "
    "the number of records",
    "self.records = memprobe.SharedList(self.records)",
    f'{PERF}, "SharedList against the other containers" (200,000 records, fork, 2 workers, medians '
    "of 5 rounds): each worker +0.5 MB against the list's +67.7 MB; one pickle.loads per item (6.3 us "
    "against a list read's 4.7 us in one process), in the loader 91,218 items/s against the list's "
    "58,131 within a wide spread: measure yours",
)
_COLUMNS = Cure(
    "numpy or Arrow columns",
    "hold the records in numpy arrays or an Arrow table (no Python object per record): workers "
    "read them without writing to their pages",
    "self.table = pyarrow.Table.from_pylist(self.records)  # or numpy arrays, one per field",
    f'{PERF}, "The default scenario" (500,000 records, fork, 2 workers): each worker grew +37 MB '
    "with numpy and +2 MB with Arrow against +195 MB with a list; 54,159 and 55,874 items/s against "
    "57,354",
)
_FREEZE = Cure(
    "gc.freeze() before the workers start",
    "moves every object alive then out of the cyclic GC's reach, so the workers' first collection "
    "does not write into the pages of the interpreter's own objects (and the dataset's)",
    "import gc; gc.freeze()  # the line before DataLoader(...); memprobe.profile(..., gc_freeze=True) does it",
    f'nothing per item. {PERF}, "Why numpy/arrow fork workers grow ~36 MB": numpy workers 8 -> 9 MB '
    "instead of 8 -> 45 MB; it does not stop reference counts written by reading a list's records "
    '(list workers 22 -> 135 MB either way); "gc.freeze() on a Hugging Face datasets table": '
    "workers +16 MB instead of +76 to +79 MB",
)
_THREADS = Cure(
    "worker threads",
    "load in threads of one process: one address space, nothing to copy",
    "loader = memprobe.ThreadDataLoader(dataset, batch_size=..., num_workers=N)  # DataLoader's arguments",
    f'{PERF}, "Thread loaders" (2 workers): 111,448 items/s on a list of dicts against fork\'s 39,492, '
    "Pillow decoding 333 against 230; threads keep up only where the per-item work releases the GIL "
    "(or on a free-threaded Python): measure it",
)
_CACHE = Cure(
    "bound or drop the cache",
    "a dict or functools.lru_cache filled per item (decoded images, tokenized text, opened files) "
    "grows in every worker, each its own copy",
    "@functools.lru_cache(maxsize=1024)  # instead of maxsize=None, or no cache",
    "the cache's hits: measure items/s with it bounded",
)
_REFERENCES = Cure(
    "keep numbers, not tensors",
    "a loss summed as a tensor keeps every step's graph alive; batches or outputs appended to a "
    "list keep every batch",
    "total_loss += loss.item()  # not += loss; outputs.append(out.detach().cpu()) if kept at all",
    "one .item() per step (a GPU sync on CUDA): measure it",
)
_INDEX_CHUNKS = Cure(
    "the shuffled order in chunks",
    "where the main process grew in one step as an epoch began and then stayed flat, the step is "
    "the sampler's index list: torch's RandomSampler (shuffle=True) makes the epoch's whole shuffled "
    "order a Python list in the main process, about 38 bytes per record, each epoch, and a DDP "
    "job's DistributedSampler the same in every rank; memprobe.ChunkedRandomSampler and, for a "
    "rank, memprobe.ChunkedDistributedSampler (its rank's share, set_epoch as DistributedSampler's) "
    "keep it as one tensor (8 bytes per record), in torch's order",
    "loader = DataLoader(dataset, sampler=memprobe.ChunkedRandomSampler(dataset), ...)  # not shuffle=True; "
    "in a DDP rank sampler=memprobe.ChunkedDistributedSampler(dataset), not DistributedSampler, and "
    "sampler.set_epoch(epoch) each epoch",
    f'{PERF}, "The sampler\'s index list" (6,000,000 records): the main process +230 MB as each epoch '
    "began against +48 MB, and less CPU for the epoch's indices (0.93-0.97 against 1.15-1.22 CPU-s); "
    "a rank of 2 +207 MB against +48 MB",
)
_SHARED_SPAWN = Cure(
    "memprobe.SharedList",
    "the records pickled once into one shared buffer: a spawn or forkserver worker gets the "
    "buffer's descriptor, not a copy, so every worker maps the same pages",
    "self.records = memprobe.SharedList(self.records)",
    f'{PERF}, "SharedList against the other containers" (200,000 records, spawn, 2 workers): total '
    "PSS 625 MB against 948 MB with a list and 719 MB with a serialized list pickled into each worker",
)
_MEMMAP = Cure(
    "shared memory or a memory-mapped file",
    "write the data once to a file (or shared memory) that every worker maps: one copy, in the page "
    "cache, shared by all",
    'numpy.save("records.npy", records)  # once; then in the dataset: numpy.load("records.npy", mmap_mode="r")',
    "reads through the page cache: measure items/s",
)
_PRELOAD = Cure(
    "forkserver with preloaded modules",
    "the forkserver imports the modules once and forks each worker from itself: the workers share "
    "those modules' pages (the dataset itself is still pickled into each worker)",
    'ctx = multiprocessing.get_context("forkserver"); ctx.set_forkserver_preload(["torch", "your_package.data"])'
    "  # and DataLoader(..., multiprocessing_context=ctx)",
    "measure it: the start-up copy of the modules goes; the dataset's copy stays",
)
_FORK_COLUMNS = Cure(
    "fork with numpy or Arrow data",
    "forked workers share their parent's pages; with no Python object per record they stay shared",
    'DataLoader(dataset, num_workers=N, multiprocessing_context="fork")  # data in numpy / Arrow',
    f'{PERF}, "The default scenario": numpy peak total PSS 391 MB under fork against 711 MB under '
    "spawn (2 workers)",
)

GUARD = """def test_dataset_stays_flat(memprobe):  # memprobe's pytest fixture
    result = memprobe.profile("{factory}",{kwargs} mode="{mode}", workers={workers})
    {check}"""
# A training loop's own growth: memprobe.profile() runs the DataLoader alone, so the guard records
# a short run of the user's own command (memprobe.record_command, the fixture's ``record``).
LOOP_GUARD = """def test_training_loop_stays_flat(memprobe):  # memprobe's pytest fixture
    result = memprobe.record(["python", "train.py", "--max-steps", "300"])  # your command, a short run
    result.assert_flat(max_main_growth_mb=20)  # fails naming the process and the shape of its growth"""
FACTORY = "your_package.data:build_dataset"  # what the guard profiles when memprobe does not know it

ADVICE = {
    COPY_ON_ACCESS: CauseAdvice(
        COPY_ON_ACCESS,
        "copy-on-access of Python objects",
        "forked workers read Python objects their parent built (lists, dicts, strings, pandas object "
        "columns); reading one writes its reference count, so each page read is copied into the worker",
        (_BUFFER, _COLUMNS, _FREEZE, _THREADS),
        next_step=f"measure these fixes on your own dataset, side by side: memprobe cure {FACTORY} (the "
        "module and the function or class that builds it; --kwargs for its arguments)",
    ),
    WORKERS_ALLOCATE: CauseAdvice(
        WORKERS_ALLOCATE,
        "workers allocating memory of their own",
        "the growth is memory the workers allocated, not pages copied from their parent: a cache or a "
        "leak in the dataset or the worker",
        (_CACHE,),
        next_step=f"find what allocates: {MEMRAY}; for spawn or forkserver workers, "
        "tracemalloc.start() in worker_init_fn and compare two tracemalloc snapshots",
    ),
    MAIN_KEEPS: CauseAdvice(
        MAIN_KEEPS,
        "the training loop keeping something every step",
        "the main process rose steadily while its loop ran: the loop keeps references each step "
        "(a loss summed as a tensor with its graph, outputs or batches appended to a list), and it "
        "grows with the steps",
        (_REFERENCES,),
        next_step="find what it keeps: memray run -o main.bin train.py; then memray flamegraph main.bin",
    ),
    MAIN_INDEX: CauseAdvice(
        MAIN_INDEX,
        "the sampler's list of the epoch's indices",
        "the main process (or a rank) grew in steps as each epoch's workers started: the sampler "
        "makes the epoch's shuffled order one Python list, about 38 bytes per record",
        (_INDEX_CHUNKS,),
    ),
    MAIN_GROWS: CauseAdvice(
        MAIN_GROWS,
        "the main process growing",
        "the training loop keeps references: batches, outputs, or losses with their graph (a rise "
        "while the loop runs); or the sampler's list of the epoch's indices (a step as an epoch begins)",
        (_REFERENCES, _INDEX_CHUNKS),
        next_step="find what it keeps: memray run -o main.bin train.py; then memray flamegraph main.bin",
    ),
    SHARED_GROWS: CauseAdvice(
        SHARED_GROWS,
        "shared memory growing",
        "each batch a worker process hands over is a tensor in shared memory (/dev/shm); the training "
        "loop keeps them (a list of batches or outputs, a loss with its graph), and their pages, which "
        "no process has read, are in no process's memory figures",
        (_REFERENCES,),
        next_step="find what keeps them: count the tensors alive after a step, "
        "sum(torch.is_tensor(o) for o in gc.get_objects()), and watch it rise",
    ),
    STARTUP_COPY: CauseAdvice(
        STARTUP_COPY,
        "spawn/forkserver start-up copies",
        "every spawn or forkserver worker starts with its own copy of the dataset (pickled into it) "
        "and of the modules it imports: flat, but paid once per worker",
        (_SHARED_SPAWN, _MEMMAP, _PRELOAD, _FORK_COLUMNS),
    ),
}


def advice_for(causes: list[str] | tuple[str, ...] | None) -> list[CauseAdvice]:
    """The advice for each cause named, in the order given (unknown names skipped)."""
    return [ADVICE[c] for c in dict.fromkeys(causes or ()) if c in ADVICE]


def causes_of(s: RunSummary) -> list[str]:
    """The causes of a run's verdict: a recorded job's as its analysis named them, a scenario
    run's by :func:`scenario_causes`."""
    if s.causes is not None:
        return list(s.causes)
    return scenario_causes(s)


def scenario_causes(s: RunSummary) -> list[str]:
    """A scenario or profile() run's causes, from its mode and what its workers allocated: a
    growing fork run copies what its parent built, or allocates its own (told apart by the rise
    of its workers' anonymous RSS, :func:`forked_causes`; both, copy first, where that is not
    known), a growing spawn/forkserver run allocates its own, a growing thread or single-process
    run's dataset allocates in the main process; a flat spawn/forkserver run whose workers started
    with more than the threshold each pays a start-up copy."""
    if s.verdict == "growing":
        return grown_causes(s)
    if (
        s.verdict == "flat"
        and has_worker_processes(s.mode, s.workers)
        and s.mode in (SPAWN, FORKSERVER)
        and (s.worker_uss_start_mb or 0) > s.growth_threshold_mb
    ):
        return [STARTUP_COPY]
    return []


# A scenario fork run's growth where what its workers allocated is not known (an older folder):
# copied or allocated, not told apart (scenario_causes).
UNSPLIT_CAUSES = (COPY_ON_ACCESS, WORKERS_ALLOCATE)
UNSPLIT = (
    "memprobe run does not tell what fork workers copied from what they allocated: try the "
    "copy-on-access fixes first; memprobe record -- python your_script.py tells the two apart"
)
# A forked worker's growth: allocated at least this share of it, it is its own memory; below both
# of the next two, what it allocated goes unsaid (the rest is pages copied from its parent).
MOSTLY_NEW_SHARE = 0.5
NEW_MEMORY_WORTH_MB, NEW_MEMORY_SHARE = 10.0, 0.15


def new_memory_part(growth_mb: float, allocated_mb: float) -> str:
    """How much of a forked worker's growth is memory it allocated (the rest it copied):
    ``"most"``, ``"part"`` (worth saying) or ``"little"``."""
    new = min(allocated_mb, growth_mb)
    if growth_mb > 0 and new >= MOSTLY_NEW_SHARE * growth_mb:
        return "most"
    return "part" if new >= NEW_MEMORY_WORTH_MB and new >= NEW_MEMORY_SHARE * growth_mb else "little"


def forked_causes(growth_mb: float, allocated_mb: float) -> list[str]:
    """A growing forked worker's causes by :func:`new_memory_part`."""
    part = new_memory_part(growth_mb, allocated_mb)
    return {
        "most": [WORKERS_ALLOCATE],
        "part": [COPY_ON_ACCESS, WORKERS_ALLOCATE],
        "little": [COPY_ON_ACCESS],
    }[part]


def is_unsplit(s: RunSummary) -> bool:
    """Whether a run's two causes of a fork run's growth are named untold apart (its workers'
    allocated memory not known)."""
    return s.causes is None and s.worker_allocated_mb is None and s.mode == FORK and s.workers > 0


def grown_causes(s: RunSummary) -> list[str]:
    """What a scenario run's growth comes from, whatever its verdict (a pytest guard's own limit
    may be below the threshold): told apart for a fork run whose workers' allocated memory is
    known (:func:`forked_causes`), else by its mode (:func:`growth_causes`)."""
    if s.mode == FORK and s.workers > 0 and s.worker_allocated_mb is not None:
        return forked_causes(s.worker_uss_growth_mb or 0.0, s.worker_allocated_mb)
    return growth_causes(s.mode, s.workers)


def growth_causes(mode: str, workers: int) -> list[str]:
    """What a scenario run's growth in ``mode`` may come from, where what its workers allocated
    is not known (:func:`scenario_causes`)."""
    return list(UNSPLIT_CAUSES) if mode == FORK and workers > 0 else [WORKERS_ALLOCATE]


@dataclass(frozen=True)
class Job:
    """What the guard profiles: the dataset's factory ("module:callable", None when memprobe does
    not know it: a recorded job), its keyword arguments, the mode, workers and threshold."""

    factory: str | None = None
    kwargs: dict | None = None
    mode: str = FORK
    workers: int = 2
    threshold: float = 50.0
    start_mb: float | None = None  # what each worker started with (a start-up copy's guard)
    # What each worker grew where that is below the threshold (copy-on-access named on a short
    # trial): the guard's limit is half of it, so the copy coming back fails it.
    below_mb: float | None = None


def job_of(s: RunSummary, factory: str | None = None, kwargs: dict | None = None) -> Job:
    """The guard's job for a run: its mode (a recorded job's start method; fork when unknown),
    workers and threshold."""
    mode = s.mode if s.mode in MODES else FORK
    grew = s.worker_uss_growth_mb
    below = grew if s.verdict == "flat" and grew is not None and grew <= s.growth_threshold_mb else None
    return Job(factory, kwargs, mode, max(s.workers, 1), s.growth_threshold_mb, s.worker_uss_start_mb, below)


# The causes in the training loop, not the dataset: their guard records the user's own command.
LOOP_CAUSES = (MAIN_KEEPS, MAIN_INDEX, MAIN_GROWS, SHARED_GROWS)


def guard(a: CauseAdvice, job: Job) -> str:
    """The pytest test to paste for this cause's fix: a short run of the user's own command for
    a cause in the training loop (:data:`LOOP_CAUSES`), else a profile of the dataset."""
    if a.cause in LOOP_CAUSES:
        return LOOP_GUARD
    if a.cause == STARTUP_COPY:
        # Below what each worker started with here: the copy the fix removes (a spawned worker's
        # own imports stay, so no fixed figure fits every job).
        limit = f"{job.start_mb:.0f}" if job.start_mb else f"{job.threshold:g}"
        check = f"assert result.summary.worker_uss_start_mb < {limit}  # MB each worker started with here"
    elif job.below_mb is not None:
        half = max(5, round(job.below_mb / 2))
        check = (
            f"result.assert_flat(max_worker_growth_mb={half})  # each worker grew ~{job.below_mb:.0f} MB here, "
            f"below the {job.threshold:g} MB threshold"
        )
    else:
        check = "result.assert_flat()  # fails, naming the worker, when one grows past the threshold"
    return GUARD.format(
        factory=job.factory or FACTORY,
        kwargs=f" kwargs={job.kwargs!r}," if job.kwargs else "",
        mode=job.mode,
        workers=job.workers,
        check=check,
    )


def guards(advice: list[CauseAdvice], job: Job) -> list[str]:
    """The distinct pytest guards for these causes' fixes (a growing fork run's two causes share one)."""
    return list(dict.fromkeys(g for g in (guard(a, job) for a in advice) if g))


@dataclass(frozen=True)
class RunGroup:
    """Runs whose verdicts name the same causes: the advice for them (said once), the pytest
    guards (one per dataset, mode and worker count: the first run's), and whether a scenario
    fork run's two causes are among them untold apart (``unsplit``)."""

    runs: list[RunSummary]
    advice: list[CauseAdvice]
    guards: list[str]
    unsplit: bool


def by_causes(summaries: list[RunSummary], factories: dict[str, dict] | None = None) -> list[RunGroup]:
    """The runs grouped by the causes their verdicts name (:func:`causes_of`), in the runs'
    order; ``factories``: a run's ``{"factory", "kwargs"}`` where its dataset is a user's."""
    groups: dict[tuple[str, ...], list[RunSummary]] = {}
    for s in summaries:
        if causes := tuple(causes_of(s)):
            groups.setdefault(causes, []).append(s)
    out = []
    for causes, runs in groups.items():
        advice = advice_for(causes)
        jobs: dict[str, Job] = {}
        for s in runs:
            f = (factories or {}).get(s.run_id) or {}
            job = job_of(s, f.get("factory"), f.get("kwargs"))
            jobs.setdefault(repr((job.factory, job.kwargs, job.mode, job.workers)), job)
        said = [g for job in jobs.values() for g in guards(advice, job)]
        out.append(RunGroup(runs, advice, list(dict.fromkeys(said)), any(is_unsplit(s) for s in runs)))
    return out


def guard_lines(codes: list[str]) -> list[str]:
    """The pytest guards as terminal lines, each under its heading."""
    lines: list[str] = []
    for code in codes:
        lines += ["", "pytest guard for the fix (paste into a test file; memprobe's fixture runs it):"]
        lines += [f"    {line}" for line in code.splitlines()]
    return lines


def text_lines(
    causes: list[str] | tuple[str, ...] | None, job: Job | None = None, *, scenario: bool = False
) -> list[str]:
    """The advice as terminal lines (the terminal and the pytest message): per cause, each fix
    with its change and its cost, where to look next; then the pytest guard for the fix (none
    without ``job``: the pytest message is printed by that guard). ``scenario``: the causes are
    a scenario run's (:func:`scenario_causes`), whose two causes of a fork run's growth are said
    to be untold apart."""
    advice = advice_for(causes)
    lines: list[str] = []
    if scenario and set(UNSPLIT_CAUSES) <= {a.cause for a in advice}:
        lines += ["", *_wrapped(UNSPLIT + ".", "", "")]
    for a in advice:
        lines += ["", f"what to do: {a.title}", *_wrapped(f"why: {a.why}", "  ", "       ")]
        for i, c in enumerate(a.cures, 1):
            lines += _wrapped(f"{i}. {c.name}: {c.what}", "  ", "     ")
            lines.append(f"     change: {c.change}")  # code: never wrapped
            lines += _wrapped(f"cost: {c.cost}", "     ", "           ")
        if a.next_step:
            step = (
                a.next_step.replace(FACTORY, job.factory) if job is not None and job.factory else a.next_step
            )
            lines += _wrapped(f"next: {step}", "  ", "        ")
    return lines + (guard_lines(guards(advice, job)) if job is not None else [])


def _wrapped(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
