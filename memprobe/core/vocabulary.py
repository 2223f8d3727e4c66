"""The words memprobe uses for how a run loads data and for what its processes are: modes, roles,
thread names, and the predicates on them, in one place.

It imports only the standard library, so the supervisor, the sampler, the report and the CLI use it
without importing torch, numpy or pandas (the supervisor never imports torch: it would measure
nothing of it, and pay seconds to start).

Modes (a scenario's ``modes``, ``profile(mode=...)``):

* process modes: torch's DataLoader with worker processes started by ``fork``, ``spawn`` or
  ``forkserver`` (its ``multiprocessing_context``);
* thread modes: ``thread`` (memprobe's ThreadDataLoader), ``torch-thread`` (torch's own thread
  workers, ``DataLoader(worker_method="thread")``, on torch's development branch only) and
  ``torchdata-thread`` (``torchdata.nodes.ParallelMapper(method="thread")``);
* ``single``: the mode label of a ``workers: 0`` run, which loads in its main process.

Roles (the ``role`` column of the samples): ``main``, ``worker K`` (and ``rank R``,
``rank R worker K`` in a recorded job; ``program K``, a program run beside the workers), the
helpers ``forkserver`` and ``resource tracker``, and labels for processes not yet known
(``worker (starting)``, ``spawn (starting)``, ``other``).
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Sequence

# -- modes ----------------------------------------------------------------------------------------

FORK = "fork"
SPAWN = "spawn"
FORKSERVER = "forkserver"
THREAD = "thread"
TORCH_THREAD = "torch-thread"
TORCHDATA_THREAD = "torchdata-thread"
SINGLE = "single"  # the mode label of a workers: 0 run (no worker processes or threads)

PROCESS_MODES: tuple[str, ...] = (FORK, SPAWN, FORKSERVER)
THREAD_MODES: tuple[str, ...] = (THREAD, TORCH_THREAD, TORCHDATA_THREAD)
MODES: tuple[str, ...] = PROCESS_MODES + THREAD_MODES


def is_process_mode(mode: str) -> bool:
    """Whether ``mode`` loads in worker processes (given workers)."""
    return mode in PROCESS_MODES


def is_thread_mode(mode: str) -> bool:
    """Whether ``mode`` loads in threads of the run's own process."""
    return mode in THREAD_MODES


def has_worker_processes(mode: str, workers: int) -> bool:
    """Whether a run has worker processes: a process mode with at least one worker. Such a run is
    judged on its workers' private memory; any other on its main process's."""
    return is_process_mode(mode) and workers > 0


# -- roles ----------------------------------------------------------------------------------------

MAIN = "main"
RESOURCE_TRACKER = "resource tracker"
# multiprocessing's helper processes: reported, not judged. The forkserver helper has its mode's name.
HELPER_ROLES: tuple[str, ...] = (FORKSERVER, RESOURCE_TRACKER)
# What a resource tracker's command line holds: multiprocessing's, and the copy joblib's loky
# backend runs beside its workers (``-c from joblib.externals.loky.backend.resource_tracker ...``).
RESOURCE_TRACKER_MODULES = ("multiprocessing.resource_tracker", "loky.backend.resource_tracker")


def is_resource_tracker(cmd: str) -> bool:
    return any(module in cmd for module in RESOURCE_TRACKER_MODULES)


WORKER_STARTING = "worker (starting)"  # a forkserver child not yet renamed by torch
SPAWN_STARTING = "spawn (starting)"  # a spawn worker before torch renames it
OTHER = "other"

_ROLE = re.compile(r"^(?:rank (\d+))? ?(?:worker (\d+))?$")


def worker_role(index: int) -> str:
    """The role of worker ``index``: 'worker 0'."""
    return f"worker {index}"


def program_role(owner_role: str, owner_rank: int, owner_is_worker: bool, index: int) -> str:
    """The role of the program ``index`` a process runs beside its workers: 'program 0',
    'rank 1 program 0', a worker's own 'worker 0 program 0'."""
    if owner_is_worker:
        return f"{owner_role} {PROGRAM} {index}"
    return f"rank {owner_rank} {PROGRAM} {index}" if owner_rank >= 0 else f"{PROGRAM} {index}"


def is_helper(role: str) -> bool:
    """The forkserver or the resource tracker."""
    return role in HELPER_ROLES


def role_parts(role: str) -> tuple[int, int] | None:
    """(rank, worker) for 'worker 2', 'rank 1', 'rank 1 worker 0' (0 and -1 where absent); None
    for main, helpers and unknown processes."""
    m = _ROLE.match(role)
    if role == MAIN or not m or not (m.group(1) or m.group(2)):
        return None
    return (int(m.group(1)) if m.group(1) else 0, int(m.group(2)) if m.group(2) else -1)


def is_worker_role(role: str) -> bool:
    """A worker process (of any rank)."""
    return (role_parts(role) or (0, -1))[1] >= 0


def is_loader_role(role: str) -> bool:
    """main, a rank process or a worker: the processes whose private memory matters."""
    return role == MAIN or role_parts(role) is not None


def role_order(roles: Sequence[str]) -> list[str]:
    """Distinct roles: main first, then ranks and workers (by rank, then index), then the rest
    alphabetically."""

    def key(role: str) -> tuple:
        parts = role_parts(role)
        return (0, 0, 0, role) if role == MAIN else (1, *parts, role) if parts else (2, 0, 0, role)

    return sorted(dict.fromkeys(roles), key=key)


# -- process kinds (a recorded job's tree) ----------------------------------------------------------

# What each process of a recorded job is (``kind`` in its meta's process list and the summary's
# per-process table): a parent (main, a launcher, a rank), a worker (by how it was started) or a
# helper (its kind is its role, FORKSERVER or RESOURCE_TRACKER); OTHER for the rest.
LAUNCHER = "launcher"
RANK = "rank"
DATALOADER = "dataloader"
EXEC = "exec"
# A program a process of the job ran for a moment and that ended (tree_rules.brief_commands):
# torch's CUDA build runs `ldconfig -p` at import (ctypes.util.find_library). Listed, not a worker.
COMMAND = "command"
# A program a process of the job exec'd beside the workers it forked or spawned (probe.tree): W&B's
# wandb-core started by a trainer's logger, a compiler, nvidia-smi polled by a callback. Listed as
# ``program K`` (:func:`program_role`), never a worker: no worker index, no generation. A process
# whose only children are programs has them as its workers (kind EXEC).
PROGRAM = "program"
WORKER_KINDS: tuple[str, ...] = (DATALOADER, FORK, SPAWN, EXEC)
PARENT_KINDS: tuple[str, ...] = (MAIN, LAUNCHER, RANK)
HELPER_KINDS = HELPER_ROLES  # a helper's kind is its role

# Each kind in words, one and many: the report's table and groups, the culprit's sentences.
KIND_WORDS: dict[str, tuple[str, str]] = {
    MAIN: ("main process", "main processes"),
    LAUNCHER: ("launcher", "launchers"),
    RANK: ("rank process", "rank processes"),
    DATALOADER: ("DataLoader worker", "DataLoader workers"),
    FORK: ("forked child", "forked children"),
    SPAWN: ("spawned child", "spawned children"),
    EXEC: ("child program", "child programs"),
    COMMAND: ("command run briefly", "commands run briefly"),
    PROGRAM: ("program run beside the workers", "programs run beside the workers"),
    FORKSERVER: ("helper (forkserver)", "helpers (forkserver)"),
    RESOURCE_TRACKER: ("helper (resource tracker)", "helpers (resource tracker)"),
    OTHER: ("other", "other"),
}


def kind_words(kind: str, n: int = 1, default: tuple[str, str] | None = None) -> str:
    """A kind in words for ``n`` processes ('forked child', 'DataLoader workers'); an unknown
    kind as ``default`` says, else as itself."""
    one, many = KIND_WORDS.get(kind) or default or (kind, kind)
    return one if n == 1 else many


# -- the sampler's reasons ------------------------------------------------------------------------

# A ``missing`` row's reason starts with one of these when the process ended (probe.sampler);
# any other reason is a process that was there but could not be read.
ENDED_REASONS: tuple[str, ...] = ("exited", "zombie", "exiting")


def ended(reason: str | None) -> bool:
    """Whether a missing row's ``reason`` says its process ended (rather than was unreadable)."""
    return bool(reason) and str(reason).startswith(ENDED_REASONS)


# A PSS read's reason starts with this when the kernel refused memprobe the process's memory map
# (another user's process, one not dumpable): never readable, so its PSS is left out of the
# totals, not a gap in them (probe.sampler.denied_reason, series.readable).
DENIED_REASON = "smaps_rollup: permission denied"
# ... and goes on so when the process runs as another user than memprobe (else it is one of
# memprobe's own user that is not dumpable: only root reads it).
DENIED_OTHER_USER = f"{DENIED_REASON}: another user's process"


def denied(reason: object) -> bool:
    """Whether a row's ``reason`` says memprobe may not read the process's memory map."""
    return isinstance(reason, str) and reason.startswith(DENIED_REASON)


# -- threads --------------------------------------------------------------------------------------

# The thread loader names its worker threads this way in the OS (/proc/PID/task/TID/comm, at most
# 15 bytes), so the sampler and the report can tell them from torch's and numpy's threads.
THREAD_NAME_PREFIX = "mp-tworker-"


def worker_thread_name(index: int) -> str:
    """The OS name of the thread loader's worker ``index``."""
    return f"{THREAD_NAME_PREFIX}{index}"


# Thread workers of a DataLoader, as a recorded job's threads are named: memprobe's, and torch's
# (its development branch names them "pt_thread_data_worker", which the kernel cuts to 15 bytes).
LOADER_THREAD_PREFIXES: tuple[str, ...] = (THREAD_NAME_PREFIX, "pt_thread_data_")


def is_loader_thread(name: str) -> bool:
    """Whether an OS thread name is a DataLoader's thread worker."""
    return name.startswith(LOADER_THREAD_PREFIXES)


def gil_enabled() -> bool | None:
    """Whether the GIL is active in this interpreter, as this process runs now.

    ``sys._is_gil_enabled()`` exists from Python 3.13 (meaningful on free-threaded builds, where an
    extension module imported later can turn the GIL back on); where it does not exist the build
    always has a GIL, so True. None means the check itself failed.
    """
    probe = getattr(sys, "_is_gil_enabled", None)
    if probe is None:
        return True
    try:
        return bool(probe())
    except Exception:  # noqa: BLE001  a private CPython probe: any failure means "not known"
        return None


# -- what a memory cgroup's charge is made of (memprobe.probe.cgroup.breakdown) ------------------

CGROUP_PARTS: dict[str, str] = {
    "anonymous": "anonymous memory (what PSS and USS count)",
    "page_cache": "page cache (files read or written; the kernel may reclaim it)",
    "shared_memory": "shared memory (/dev/shm, memfd, tmpfs)",
    "kernel_and_other": "kernel memory and the rest (page tables, slab, sockets)",
}


# -- signals and exit codes -----------------------------------------------------------------------


def signal_name(signum: int) -> str:
    """'SIGINT'; 'signal 34' for a real-time signal, which has no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def shell_exit_code(returncode: int) -> int:
    """A command's exit code as a shell gives it: 128+N for one killed by signal N (Python's
    ``returncode`` says -N)."""
    return 128 - returncode if returncode < 0 else returncode


def item_noun(workload: str) -> str:
    """What a run's loader yields, in words: images for the decode workload, items otherwise."""
    return "images" if workload == "decode" else "items"


# Where a copied page lies, as the worker's /proc/PID/maps tells (private writable mappings only:
# a shared mapping is never copied, a read-only one never written). Python's arenas and large
# buffers (malloc's, numpy's, torch's) are all anonymous mappings, which the kernel merges when
# they are adjacent: from outside they are not told apart.
COPY_KINDS = {
    "heap": "the heap (malloc's brk)",
    "anonymous": "anonymous mappings (Python's arenas, large buffers)",
    "file": "file mappings (libraries' writable data)",
    "stack": "the stack",
}
