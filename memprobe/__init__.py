"""memprobe: see and test how much memory torch DataLoader workers really use."""
from __future__ import annotations

__version__ = "0.1.0"
