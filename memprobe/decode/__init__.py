"""Image-decode building blocks for the Pillow vs nvImageCodec DataLoader benchmark.

``images``: deterministic benchmark JPEGs from scikit-image's bundled photos.
``decoders``: Pillow / nvImageCodec (CPU or GPU) / simplejpeg behind one interface.
``correctness``: does a decoder give Pillow's pixels (within a stated tolerance)?
``dataset``: ``DecodeDataset``, a torch map-style dataset over an Arrow table of JPEGs
(imported lazily here so that decoder-only users do not pay for importing torch).
"""

from __future__ import annotations

from typing import Any

from memprobe.decode.correctness import check_against_pillow, compare_to_pillow
from memprobe.decode.decoders import (
    Decoder,
    available_decoders,
    check_mode_supported,
    gpu_unavailable_reason,
    make_decoder,
)
from memprobe.decode.images import jpeg_table, make_jpegs

__all__ = [
    "DecodeDataset",
    "Decoder",
    "available_decoders",
    "check_against_pillow",
    "check_mode_supported",
    "compare_to_pillow",
    "gpu_unavailable_reason",
    "jpeg_table",
    "make_decoder",
    "make_jpegs",
]


def __getattr__(name: str) -> Any:
    if name == "DecodeDataset":
        from memprobe.decode.dataset import DecodeDataset

        return DecodeDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
