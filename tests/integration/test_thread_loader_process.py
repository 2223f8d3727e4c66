"""ThreadDataLoader behaviours that only a fresh process shows: a worker thread that crashes the
interpreter, and glibc's heap thresholds, which are set once per process."""

from __future__ import annotations

import signal
import subprocess
import sys
import sysconfig
import textwrap

import pytest

CRASH = textwrap.dedent("""
    import ctypes, faulthandler
    from torch.utils.data import Dataset
    from memprobe import ThreadDataLoader
    class Crashes(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i == 5:
                ctypes.string_at(0)  # a native library reading address 0
            return i

    assert not faulthandler.is_enabled()
    for batch in ThreadDataLoader(Crashes(), num_workers=2):
        print("batch", int(batch), flush=True)
""")


@pytest.mark.slow
def test_a_segfault_in_a_worker_thread_prints_the_workers_python_stack() -> None:
    """torch's process workers would raise "DataLoader worker ... exited unexpectedly" instead; a
    thread cannot survive its process, but its stack is printed."""
    proc = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in proc.stderr
    crashed = proc.stderr.split("Current thread", 1)[1].split("\n\n", 1)[0]  # the crashing thread's stack
    assert "in __getitem__" in crashed and "in _worker_loop" in crashed


HEAP = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from torch.utils.data import Dataset
    from memprobe.loaders.thread import ThreadDataLoader, keep_freed_memory

    if sys.argv[1] == "off":
        keep_freed_memory(False)

    class Decodes(Dataset):
        # Like an image decoder: ~2.8 MB of buffers per item, freed before the next item.
        def __len__(self):
            return 200

        def __getitem__(self, i):
            buffers = [np.ones(n, np.uint8) for n in (1 << 20, 1 << 20, 800_000)]  # all alive at once
            return int(sum(b[-1] for b in buffers))

    loader = ThreadDataLoader(Decodes(), batch_size=8, num_workers=2, persistent_workers=True)
    list(loader)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    list(loader)
    print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / len(Decodes())))
""")


def _faults_per_item(setting: str) -> float:
    proc = subprocess.run([sys.executable, "-c", HEAP, setting], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return float(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(
    bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    reason="free-threaded build: with the worker threads running at once, the freed buffers are reused "
    "without the priming too (0.0 page faults per item with it and without it, measured on 3.13t), so "
    "there is no faulting in again to show",
)
def test_worker_threads_reuse_freed_item_buffers_instead_of_faulting_them_in_again() -> None:
    """glibc would trim each worker's heap after every item (~2.8 MB: ~680 page faults per item);
    the loader primes its thresholds so the buffers are reused, unless the program opts out."""
    kept, trimmed = _faults_per_item("on"), _faults_per_item("off")
    assert kept < 10 and trimmed > 300, (kept, trimmed)
