"""Worker info and seeding for worker threads.

Every worker thread gets a :class:`WorkerInfo` (torch's own class) in a thread-local, readable
through :func:`get_worker_info` of this package and through ``torch.utils.data.get_worker_info()``:
when the first worker thread starts, torch's function object gets a thread-local lookup that falls
back to torch's global, so it behaves exactly as before outside these threads (process-wide and
permanent; see :func:`_patch_torch_get_worker_info`). Worker ``k``'s ``seed`` is ``base_seed + k``
where ``base_seed`` is drawn from the loader's ``generator`` (or torch's global RNG) exactly when
torch draws it, so seeds and shuffled orders match torch's.

Unlike torch's process workers, the threads do NOT reseed ``random``, ``numpy.random`` or
``torch``'s global RNGs: those are shared by every thread of the process, so reseeding them from N
threads would race and would also clobber the caller's RNG state. For the same reason
``torch.initial_seed()`` in a worker is the process's seed, not ``base_seed + k``. Per-worker
generators are in ``get_worker_info().rng`` on torch versions whose WorkerInfo has that field
(``torch.random.thread_safe_generator()`` returns the torch one inside these workers), seeded as
torch seeds its workers: the ``random`` and ``torch`` ones draw what a process worker's reseeded
globals draw, numpy's is ``default_rng`` on the state torch gives ``np.random.seed`` (as torch's own
thread workers do). :class:`RngWatch` notices a ``worker_init_fn`` that changes the shared global
generators and the loader says so (see ``worker.py``).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.utils.data._utils.worker as _torch_worker

__all__ = [
    "RngWatch",
    "WorkerInfo",
    "current",
    "get_worker_info",
    "hidden_from_torch",
    "make_worker_info",
    "set_worker_info",
    "torch_thread_local",
]

#: torch's own WorkerInfo, so code that type-checks it keeps working.
WorkerInfo = _torch_worker.WorkerInfo

_local = threading.local()
_hook_lock = threading.Lock()
_hook_tried = False
_torch_tls: threading.local | None = None
# Name of the module global the patched torch function reads (see below).
_HOOK_GLOBAL = "_memprobe_thread_worker_info"


def get_worker_info() -> WorkerInfo | None:
    """Return the :class:`WorkerInfo` of the calling ThreadDataLoader worker.

    Inside a worker thread this is that thread's info (``id``, ``num_workers``, ``seed``,
    ``dataset`` -- the worker's own copy of the dataset, see ``replicas.py``). Anywhere else it
    defers to ``torch.utils.data.get_worker_info()``, so a dataset can call this one function under
    torch's process workers too; in the main thread both return ``None``.
    """
    info = getattr(_local, "info", None)
    return info if info is not None else _torch_worker.get_worker_info()


def current() -> WorkerInfo | None:
    """The calling thread's ThreadDataLoader worker info (``None`` outside worker threads)."""
    return getattr(_local, "info", None)


def _torch_get_worker_info_body() -> Any:
    # Never called here: its code object replaces the body of torch's
    # get_worker_info and then runs with torch's module globals.
    info = getattr(_memprobe_thread_worker_info, "worker_info", None)  # type: ignore[name-defined]  # noqa: F821
    return info if info is not None else _worker_info  # type: ignore[name-defined]  # noqa: F821


def _patch_torch_get_worker_info() -> threading.local | None:
    """Give torch's get_worker_info a thread-local lookup; None if unsafe.

    torch (<= 2.13 release) keeps worker info in the process-global ``_worker_info``; setting it
    from threads would make every thread see the last writer. Rebinding
    ``torch.utils.data.get_worker_info`` would miss the aliases users already imported, so instead
    the *code* of the one function object is swapped: it first reads a thread-local (set only in
    our worker threads) and otherwise returns torch's global exactly as before, so torch's process
    workers and the main thread are unaffected. This mirrors what torch's development branch does
    natively.
    """
    fn = getattr(_torch_worker, "get_worker_info", None)
    if not isinstance(fn, types.FunctionType) or "_worker_info" not in vars(_torch_worker):
        return None
    existing = getattr(_torch_worker, _HOOK_GLOBAL, None)
    if isinstance(existing, threading.local) and _HOOK_GLOBAL in fn.__code__.co_names:
        return existing  # already patched (e.g. this module was reloaded)
    if fn.__code__.co_freevars or fn.__code__.co_argcount:
        return None  # not the simple zero-argument function we expect
    tls = threading.local()
    setattr(_torch_worker, _HOOK_GLOBAL, tls)
    code = _torch_get_worker_info_body.__code__.replace(co_name=fn.__code__.co_name)
    if sys.version_info >= (3, 11):
        code = code.replace(co_qualname=fn.__code__.co_qualname)
    fn.__code__ = code  # tracebacks keep torch's name
    return tls


def _torch_thread_local() -> threading.local | None:
    """Return the thread-local torch's get_worker_info consults, installing it once."""
    global _hook_tried, _torch_tls
    with _hook_lock:
        if not _hook_tried:
            native = getattr(_torch_worker, "_thread_local_worker_info", None)
            if isinstance(native, threading.local):
                _torch_tls = native  # torch already looks here first
            else:
                _torch_tls = _patch_torch_get_worker_info()
            _hook_tried = True
        return _torch_tls


def set_worker_info(info: WorkerInfo | None) -> None:
    """Make ``info`` the calling thread's worker info, for this package and for torch."""
    _local.info = info
    tls = _torch_thread_local()
    if tls is not None:
        tls.worker_info = info


def torch_thread_local() -> threading.local | None:
    """The thread-local torch's get_worker_info() consults (``worker_info``), once a worker thread
    has started; ``None`` before, or where torch's function could not be given one."""
    return _torch_tls


@contextmanager
def hidden_from_torch() -> Iterator[None]:
    """Within the block, torch's get_worker_info() in this thread sees no worker."""
    tls = _torch_tls
    if tls is None:
        yield
        return
    saved, tls.worker_info = getattr(tls, "worker_info", None), None
    try:
        yield
    finally:
        tls.worker_info = saved


def _forget_worker_info_after_fork() -> None:
    # A child forked from a worker thread must not think it is that worker.
    _local.info = None
    if _torch_tls is not None:
        _torch_tls.worker_info = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker_info_after_fork)


def _make_rng(base_seed: int, worker_id: int) -> Any:
    """Per-thread generators in torch's ``_RNG`` container, if torch has one."""
    try:
        from torch.utils.data._utils.worker import _RNG, _generate_state
    except ImportError:
        return None
    seed = base_seed + worker_id
    torch_gen = torch.Generator()
    torch_gen.manual_seed(seed)
    try:
        import numpy as np

        np_gen = np.random.default_rng(_generate_state(base_seed, worker_id))
    except ImportError:
        np_gen = None
    return _RNG(random.Random(seed), torch_gen, np_gen)


def make_worker_info(worker_id: int, num_workers: int, base_seed: int, dataset: Any) -> WorkerInfo:
    """Worker ``worker_id``'s info, seeded as torch seeds its workers."""
    fields = {"id": worker_id, "num_workers": num_workers, "seed": base_seed + worker_id, "dataset": dataset}
    rng = _make_rng(base_seed, worker_id)
    if rng is not None:  # torch versions with thread-aware WorkerInfo
        fields.update(rng=rng, worker_method="thread")
    return WorkerInfo(**fields)


class RngWatch:
    """The state of the process-wide ``random``, ``numpy.random`` and ``torch`` generators, to
    tell afterwards which of them something changed (seeded or drew from)."""

    def __init__(self) -> None:
        self._before = _global_rng_states()

    def changed(self) -> list[str]:
        after = _global_rng_states()
        return [name for name, state in self._before.items() if not _same_state(state, after.get(name))]


def _global_rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {"random": random.getstate(), "torch": torch.random.get_rng_state()}
    np = sys.modules.get("numpy")  # only if the program uses numpy: never import it here
    if np is not None:
        states["numpy.random"] = np.random.get_state()
    return states


def _same_state(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "shape") and hasattr(b, "shape"):  # numpy arrays in numpy's legacy state
        return a.shape == b.shape and bool((a == b).all())
    return a == b
