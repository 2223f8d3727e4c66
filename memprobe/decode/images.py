"""Deterministic benchmark JPEGs made from real photographs.

The decode benchmark needs realistic JPEGs (natural-image entropy, not noise or
flat colour, because decode time depends on the coded content) without a
network download. scikit-image ships a handful of real RGB photographs inside
its wheel; we take random crops of those, resize them to exactly
``width x height`` (640x408 by default, as in NVIDIA's "Improved Data Loading
with Threads" experiment) and encode them with Pillow.

Encoding: baseline (non-progressive) JPEG, Pillow ``quality=90``, chroma
subsampling 4:2:0 unless told otherwise, no ``optimize`` pass, no EXIF.
Output is deterministic for a given seed and a given Pillow/libjpeg build.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

__all__ = [
    "PHOTO_NAMES",
    "SUBSAMPLING",
    "available_photos",
    "jpeg_table",
    "make_jpegs",
]

# Real RGB photographs bundled in the scikit-image wheel (checked against
# scikit-image 0.26: these load from the installed package, no pooch download).
# Left out on purpose: retina (mostly black border, unrealistically small
# JPEGs), colorwheel/logo (synthetic), and data that needs a download
# (lily, kidney, skin, brain, eagle).
PHOTO_NAMES: tuple[str, ...] = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "motorcycle",
    "hubble_deep_field",
    "immunohistochemistry",
)

# Pillow's ``subsampling`` argument codes.
SUBSAMPLING: dict[str, int] = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}

_INSTALL_HINT = (
    "scikit-image is needed to build benchmark JPEGs from its bundled photos: "
    "pip install 'torch-memprobe[images]'  (or: pip install scikit-image)"
)

# Smallest crop, as a fraction of the largest crop with the target aspect
# ratio that fits in the photo. Keeps crops photographic rather than a few
# upscaled pixels.
_MIN_CROP_FRACTION = 0.45


@dataclass(frozen=True)
class _Photo:
    name: str
    pixels: np.ndarray  # HxWx3 uint8


def _skimage_data():  # -> module; untyped because skimage may be absent
    try:
        import skimage.data as data
    except ImportError as exc:  # pragma: no cover - exercised only without skimage
        raise ImportError(_INSTALL_HINT) from exc
    return data


def _loaders(data) -> dict[str, Callable[[], np.ndarray]]:
    """Name -> zero-argument loader returning an RGB array."""
    return {
        "astronaut": data.astronaut,
        "coffee": data.coffee,
        "chelsea": data.chelsea,
        "rocket": data.rocket,
        # stereo_motorcycle() returns (left, right, disparity); left is a photo.
        "motorcycle": lambda: data.stereo_motorcycle()[0],
        "hubble_deep_field": data.hubble_deep_field,
        "immunohistochemistry": data.immunohistochemistry,
    }


@functools.lru_cache(maxsize=1)
def _load_photos() -> tuple[_Photo, ...]:
    """Load every bundled photo that is available offline, in PHOTO_NAMES order."""
    data = _skimage_data()
    loaders = _loaders(data)
    photos = []
    for name in PHOTO_NAMES:
        try:
            pixels = np.asarray(loaders[name]())
        except Exception:  # noqa: BLE001 - a missing/undownloaded photo is skipped
            continue
        if pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.dtype == np.uint8:
            photos.append(_Photo(name, np.ascontiguousarray(pixels)))
    if not photos:
        raise RuntimeError(
            "none of the scikit-image sample photos could be loaded offline "
            f"(tried {', '.join(PHOTO_NAMES)}); is the scikit-image install complete?"
        )
    return tuple(photos)


def available_photos() -> list[str]:
    """Names of the source photographs that load offline on this machine."""
    return [p.name for p in _load_photos()]


def _random_view(photo: np.ndarray, rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A random crop with the target aspect ratio, randomly mirrored."""
    ph, pw = photo.shape[:2]
    aspect = width / height
    # Largest crop of the target aspect ratio that fits.
    max_w = min(pw, int(ph * aspect))
    scale = rng.uniform(_MIN_CROP_FRACTION, 1.0)
    cw = max(8, round(max_w * scale))
    ch = max(8, min(ph, round(cw / aspect)))
    y0 = int(rng.integers(0, ph - ch + 1))
    x0 = int(rng.integers(0, pw - cw + 1))
    crop = photo[y0 : y0 + ch, x0 : x0 + cw]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return np.ascontiguousarray(crop)


def _encode(pixels: np.ndarray, width: int, height: int, quality: int, subsampling: str) -> bytes:
    from PIL import Image

    img = Image.fromarray(pixels)  # HxWx3 uint8 -> mode "RGB"
    if img.size != (width, height):
        img = img.resize((width, height), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(
        buf,
        format="JPEG",
        quality=quality,
        subsampling=SUBSAMPLING[subsampling],
        optimize=False,
        progressive=False,
    )
    return buf.getvalue()


def _generate(
    count: int, width: int, height: int, quality: int, subsampling: str, seed: int
) -> list[tuple[str, bytes]]:
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if width < 8 or height < 8:
        raise ValueError(f"width and height must be >= 8, got {width}x{height}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    if subsampling not in SUBSAMPLING:
        raise ValueError(f"subsampling must be one of {sorted(SUBSAMPLING)}, got {subsampling!r}")
    photos = _load_photos()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        photo = photos[int(rng.integers(len(photos)))]
        view = _random_view(photo.pixels, rng, width, height)
        out.append((photo.name, _encode(view, width, height, quality, subsampling)))
    return out


def make_jpegs(
    count: int,
    *,
    width: int = 640,
    height: int = 408,
    quality: int = 90,
    subsampling: str = "4:2:0",
    seed: int = 0,
) -> list[bytes]:
    """Return ``count`` baseline JPEGs of exactly ``width x height`` RGB pixels.

    Each image is a random crop (45-100 % of the largest crop with the target
    aspect ratio, random horizontal mirror) of a scikit-image sample photograph,
    bicubic-resized to the target size and encoded by Pillow at ``quality`` with
    ``subsampling`` chroma subsampling. Same arguments -> same bytes (for a
    given Pillow/libjpeg build). Raises ImportError with an install hint if
    scikit-image is missing.
    """
    return [data for _, data in _generate(count, width, height, quality, subsampling, seed)]


def jpeg_table(
    count: int,
    *,
    width: int = 640,
    height: int = 408,
    quality: int = 90,
    subsampling: str = "4:2:0",
    seed: int = 0,
) -> pa.Table:
    """The images of :func:`make_jpegs` as an Arrow table.

    Columns: ``index`` (int64), ``source`` (string: photo the crop came from),
    ``jpeg`` (binary; ``large_binary`` only if the total exceeds 2 GiB). Each
    column is a single chunk, so all JPEG bytes live in one contiguous Arrow
    buffer: no per-record Python objects, which is the point for fork/COW
    memory measurements.
    """
    records = _generate(count, width, height, quality, subsampling, seed)
    blobs = [data for _, data in records]
    total = sum(len(b) for b in blobs)
    # 32-bit offsets of pa.binary() cap one array at 2 GiB of payload.
    jpeg_type = pa.binary() if total < 2**31 - 1 else pa.large_binary()
    table = pa.table(
        {
            "index": pa.array(np.arange(count, dtype=np.int64)),
            "source": pa.array([name for name, _ in records], pa.string()),
            "jpeg": pa.array(blobs, jpeg_type),
        }
    )
    return table.combine_chunks()


def cached_jpeg_table(
    count: int,
    *,
    width: int = 640,
    height: int = 408,
    quality: int = 90,
    subsampling: str = "4:2:0",
    seed: int = 0,
    cache_dir: Path | None = None,
) -> pa.Table:
    """:func:`jpeg_table`, generated once per parameter set and kept as an Arrow IPC file.

    The table is read fully into memory (not memory-mapped), so a run holds the same in-heap
    buffer as a freshly generated one; only the generation time (seconds per run) is saved.
    ``cache_dir`` defaults to ``$XDG_CACHE_HOME/memprobe`` (``~/.cache/memprobe``). The file is
    opened by Python and handed to pyarrow as a file object: pyarrow refuses a path it cannot
    encode as UTF-8 (a home whose name is not, on every pyarrow from 14 to 26).
    """
    base = cache_dir or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memprobe"
    path = base / f"jpegs-v1-{count}-{width}x{height}-q{quality}-{subsampling.replace(':', '')}-s{seed}.arrow"
    if path.exists():
        try:
            with open(path, "rb") as source:
                return ipc.open_file(source).read_all().combine_chunks()
        except (pa.ArrowInvalid, OSError):
            pass  # a torn or foreign file: generate again
    table = jpeg_table(count, width=width, height=height, quality=quality, subsampling=subsampling, seed=seed)
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as sink, ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home is fine: the table is still returned
    return table
