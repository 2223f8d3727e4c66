"""Dataset factories for scenarios, imported by name in the run's process.

``list_records`` / ``numpy_records`` / ``arrow_records``: memprobe's built-in ``list`` / ``numpy`` /
``arrow`` records datasets, as factories.

``null_items``: items that cost nothing (the index itself, or one shared tiny tensor), for
measuring a loader's own cost per batch (``threads_inprocess.py``'s overhead probe).

``pillow_decode_resize``: a CPU-heavy image pipeline, as a torchvision-style training set does it
with Pillow: decode a 640x408 JPEG (real photographs, from :func:`memprobe.decode.jpeg_table`),
resize the short side to 256 (bilinear, antialiased), centre-crop 224x224, and return a
``3x224x224 uint8`` tensor. Pillow releases the GIL while it decodes and resizes, so thread workers
can run it in parallel; the Python glue around it (~0.2 ms of the ~5 ms an item costs on this
machine: header parsing, crop, the numpy copy) holds the GIL. With ``augment="affine"``, a random
affine transform of the resized image (rotation, shear, scale, translation; bicubic) comes before
the crop: the heavier per-item work of ``num_workers.yaml``.

Use it from a scenario (the factory is imported in the run process; spawn/forkserver workers
unpickle the dataset and import this module by name too). This module sits next to the shipped
scenarios (scenarios/, in the wheel memprobe/scenarios/), so a scenario there, or a copy made with
``memprobe scenarios copy threads_vs_processes``, finds it by name::

    datasets:
      - name: pillow
        factory: "workloads:pillow_decode_resize"
        kwargs: {images: 256, length: 2048}

The benchmarks import it from there too (``benchmarks/bench_threads.py`` puts scenarios/ on
``sys.path``).
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import Dataset

__all__ = [
    "NullDataset",
    "PillowDecodeResize",
    "arrow_records",
    "list_records",
    "null_items",
    "pillow_decode_resize",
    "random_affine",
]


class PillowDecodeResize(Dataset):
    """Item ``i``: JPEG ``i % images`` decoded, resized (short side ``short_side``) and centre-cropped
    to ``crop x crop``, as a ``3 x crop x crop`` uint8 tensor.

    The JPEGs sit in one Arrow buffer (no per-item Python objects), so forked workers do not copy
    the dataset on access; spawn/forkserver workers receive a pickled copy of the table.
    """

    def __init__(
        self,
        table: pa.Table,
        *,
        length: int | None = None,
        short_side: int = 256,
        crop: int = 224,
        augment: str = "none",
    ) -> None:
        if augment not in AUGMENTS:
            raise ValueError(f"augment must be one of {', '.join(AUGMENTS)}, not {augment!r}")
        self.augment = augment
        self.table = table.combine_chunks()
        self.images = self.table.num_rows
        if self.images == 0:
            raise ValueError("the table holds no images")
        self.length = self.images if length is None else int(length)
        self.short_side = short_side
        self.crop = crop
        self._views: tuple[np.ndarray, pa.Buffer] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_views"] = None  # derived views are rebuilt after unpickling
        return state

    def _encoded(self, index: int) -> memoryview:
        if self._views is None:
            arr = self.table.column("jpeg").chunk(0)
            _, offsets, data = arr.buffers()
            self._views = (
                np.frombuffer(offsets, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1],
                data,
            )
        offsets, data = self._views
        return memoryview(data)[int(offsets[index]) : int(offsets[index + 1])]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        from PIL import Image

        if not -self.length <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} items")
        with Image.open(io.BytesIO(self._encoded(index % self.images))) as img:
            img = img.convert("RGB") if img.mode != "RGB" else img
            w, h = img.size
            scale = self.short_side / min(w, h)
            size = (max(self.crop, round(w * scale)), max(self.crop, round(h * scale)))
            img = img.resize(size, Image.Resampling.BILINEAR)  # decodes, then resizes
        if self.augment == "affine":
            img = random_affine(img, index)
        left, top = (size[0] - self.crop) // 2, (size[1] - self.crop) // 2
        img = img.crop((left, top, left + self.crop, top + self.crop))
        hwc = torch.from_numpy(np.array(img))  # np.array: a writable copy of the crop
        return hwc.permute(2, 0, 1)  # CHW view; the collate's stack makes it contiguous


AUGMENTS = ("none", "affine")


def random_affine(img: Any, index: int) -> Any:
    """A random affine transform of ``img`` as torchvision's ``RandomAffine(degrees=15,
    translate=(0.1, 0.1), scale=(0.9, 1.1), shear=10)`` draws it, bicubic, seeded by the item's
    index (the same item is the same image in every run): the heavier per-item work of the
    num_workers exercise."""
    from PIL import Image

    rng = np.random.default_rng(index)
    angle, shear = np.radians(rng.uniform(-15, 15)), np.radians(rng.uniform(-10, 10))
    scale = rng.uniform(0.9, 1.1)
    w, h = img.size
    t = rng.uniform(-0.1, 0.1, 2) * (w, h)
    rotate = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    forward = scale * rotate @ np.array([[1.0, np.tan(shear)], [0.0, 1.0]])
    inverse = np.linalg.inv(forward)  # PIL maps each output pixel back to the input
    centre = np.array([w / 2, h / 2])
    offset = centre - inverse @ (centre + t)
    data = (inverse[0, 0], inverse[0, 1], offset[0], inverse[1, 0], inverse[1, 1], offset[1])
    return img.transform(img.size, Image.Transform.AFFINE, data, resample=Image.Resampling.BICUBIC)


def _cached_table(images: int, width: int, height: int, quality: int, seed: int) -> pa.Table:
    """:func:`memprobe.decode.jpeg_table`, cached as an Arrow IPC file (generation takes ~10 ms an image)."""
    from memprobe.decode import jpeg_table

    cache = Path(
        os.environ.get("MEMPROBE_WORKLOAD_CACHE", Path(tempfile.gettempdir()) / "memprobe-workloads")
    )
    path = cache / f"jpeg-{images}-{width}x{height}-q{quality}-s{seed}.arrow"
    try:
        with pa.OSFile(str(path), "rb") as f:
            return pa.ipc.open_file(f).read_all()  # read into memory, like a generated table
    except (OSError, pa.ArrowInvalid):
        pass
    table = jpeg_table(images, width=width, height=height, quality=quality, seed=seed)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, path)
    except OSError:
        pass  # no cache, no problem
    return table


def pillow_decode_resize(
    images: int = 256,
    length: int | None = 2048,
    width: int = 640,
    height: int = 408,
    quality: int = 90,
    short_side: int = 256,
    crop: int = 224,
    seed: int = 0,
    augment: str = "none",
) -> PillowDecodeResize:
    """The Pillow decode + resize + crop workload over ``images`` distinct real-photo JPEGs
    (``width x height``), ``length`` items long (images repeat); ``augment="affine"`` adds a
    random affine transform of the resized image (:func:`random_affine`) before the crop."""
    table = _cached_table(images, width, height, quality, seed)
    return PillowDecodeResize(table, length=length, short_side=short_side, crop=crop, augment=augment)


def list_records(records: int = 100_000, floats: int = 4, seed: int = 0) -> Any:
    """memprobe's built-in ``list`` records dataset (a Python list of dicts; cheap items), as a
    factory, so that one scenario can hold it next to :func:`pillow_decode_resize`."""
    from memprobe.datasets import RecordSpec, build_dataset

    return build_dataset("list", RecordSpec(records=records, floats=floats, seed=seed))


def numpy_records(records: int = 100_000, floats: int = 4, seed: int = 0) -> Any:
    """The same records in memprobe's ``numpy`` backend (columns of numpy arrays, each item built
    from them at its read), as a factory."""
    from memprobe.datasets import RecordSpec, build_dataset

    return build_dataset("numpy", RecordSpec(records=records, floats=floats, seed=seed))


def arrow_records(records: int = 100_000, floats: int = 4, seed: int = 0) -> Any:
    """The same records in memprobe's ``arrow`` backend (one ``pyarrow.Table``, read a row at a
    time, as a Hugging Face ``datasets`` table is), as a factory."""
    from memprobe.datasets import RecordSpec, build_dataset

    return build_dataset("arrow", RecordSpec(records=records, floats=floats, seed=seed))


class NullDataset(Dataset):
    """Item ``i``: ``i`` itself (``kind="int"``) or one shared 1-element tensor (``"tensor"``):
    nothing to load, so what a loader costs per batch is all there is to measure."""

    def __init__(self, length: int, kind: str = "int") -> None:
        if kind not in ("int", "tensor"):
            raise ValueError(f"kind must be 'int' or 'tensor', not {kind!r}")
        self.length = length
        self.kind = kind
        self._tensor = torch.zeros(1)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        return i if self.kind == "int" else self._tensor


def null_items(length: int = 100_000, kind: str = "int") -> NullDataset:
    return NullDataset(length, kind)
