"""Does a decoder give Pillow's pixels? Checked by the tests and by the benchmarks before timing.

Tolerances (measured before choosing them, see tests/unit/test_decode.py): on 600 generated
640x408 JPEGs Pillow, nvImageCodec-CPU and simplejpeg agreed exactly (max |diff| 0), since all
run libjpeg-turbo's accurate integer IDCT with fancy upsampling. CPU backends may differ by at
most 1 level anywhere and 0.05 on average, so another libjpeg-turbo build passes while a real
change fails (fast upsampling: max 66 / mean 0.56; fast DCT: max 8 / mean 0.99; BGR: max 255).
nvJPEG on a GPU uses its own IDCT and chroma upsampling, so only a mean bound applies there
(2.0 levels; not measured, as no GPU was available when it was chosen).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memprobe.decode.decoders import Decoder

__all__ = [
    "CPU_MAX_ABS_DIFF",
    "CPU_MEAN_ABS_DIFF",
    "GPU_MEAN_ABS_DIFF",
    "Agreement",
    "check_against_pillow",
    "compare_to_pillow",
]

CPU_MAX_ABS_DIFF = 1
CPU_MEAN_ABS_DIFF = 0.05
GPU_MEAN_ABS_DIFF = 2.0


@dataclass(frozen=True)
class Agreement:
    """How far a decoder's pixels are from Pillow's over a set of JPEGs."""

    backend: str
    images: int
    max_abs_diff: int
    mean_abs_diff: float  # mean over all pixels of all images
    allowed_max: int | None  # None: no per-pixel bound (GPU backends)
    allowed_mean: float

    @property
    def ok(self) -> bool:
        within_max = self.allowed_max is None or self.max_abs_diff <= self.allowed_max
        return within_max and self.mean_abs_diff <= self.allowed_mean

    def __str__(self) -> str:
        bound = f"max <= {self.allowed_max}, " if self.allowed_max is not None else ""
        verdict = "ok" if self.ok else "MISMATCH"
        return (
            f"{self.backend} vs pillow on {self.images} JPEGs: max |diff| {self.max_abs_diff}, "
            f"mean {self.mean_abs_diff:.4f} (allowed: {bound}mean <= {self.allowed_mean}): {verdict}"
        )


def _pillow_pixels(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))


def compare_to_pillow(decoder: Decoder, jpegs: Sequence[bytes]) -> Agreement:
    """Decode every JPEG with ``decoder`` and with Pillow; the largest and mean differences."""
    if not jpegs:
        raise ValueError("compare_to_pillow needs at least one JPEG")
    worst, total, count = 0, 0.0, 0
    for data in jpegs:
        ref = _pillow_pixels(data)
        got = np.asarray(decoder.decode(data))
        if got.shape != ref.shape:
            raise ValueError(f"{decoder.backend} decoded a {ref.shape} JPEG to shape {got.shape}")
        diff = np.abs(ref.astype(np.int16) - got.astype(np.int16))
        worst = max(worst, int(diff.max()))
        total += float(diff.sum())
        count += diff.size
    on_gpu = decoder.backend.endswith("-gpu")
    return Agreement(
        backend=decoder.backend,
        images=len(jpegs),
        max_abs_diff=worst,
        mean_abs_diff=total / count,
        allowed_max=None if on_gpu else CPU_MAX_ABS_DIFF,
        allowed_mean=GPU_MEAN_ABS_DIFF if on_gpu else CPU_MEAN_ABS_DIFF,
    )


def check_against_pillow(decoder: Decoder, jpegs: Sequence[bytes]) -> Agreement:
    """:func:`compare_to_pillow`, raising ValueError when the decoder is outside the tolerance."""
    agreement = compare_to_pillow(decoder, jpegs)
    if not agreement.ok:
        raise ValueError(f"decoder output differs from Pillow's: {agreement}")
    return agreement
