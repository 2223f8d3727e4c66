"""memprobe.core.vocabulary imports nothing heavy, in a fresh interpreter (moved from
tests/unit/test_vocabulary.py: it starts a process)."""

from __future__ import annotations

import subprocess
import sys


def test_the_vocabulary_imports_no_torch_numpy_or_pandas() -> None:
    code = (
        "import sys, memprobe.core.vocabulary; print(sorted({'torch', 'numpy', 'pandas'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
