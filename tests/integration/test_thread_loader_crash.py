"""A worker thread that crashes the interpreter: what a user sees (torch's process workers would
raise "DataLoader worker ... exited unexpectedly" instead; a thread cannot survive its process)."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
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
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in proc.stderr
    crashed = proc.stderr.split("Current thread", 1)[1].split("\n\n", 1)[0]  # the crashing thread's stack
    assert "in __getitem__" in crashed and "in _worker_loop" in crashed
