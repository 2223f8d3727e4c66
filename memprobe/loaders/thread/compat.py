"""What this interpreter and this torch offer thread workers."""

from __future__ import annotations

from memprobe.core.vocabulary import gil_enabled
from memprobe.loaders.extra import torch_native_thread_workers_available

__all__ = ["gil_enabled", "torch_native_thread_workers_available"]
