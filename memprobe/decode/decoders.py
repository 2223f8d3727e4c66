"""JPEG decoders behind one small interface: Pillow, nvImageCodec (CPU or GPU), simplejpeg.

Every decoder object is cheap to build and safe to pickle: the underlying
native decoder (nvimgcodec) is created lazily on first use, once per process
*and* per thread. That matters twice over: a decoder built in the parent would
carry executor threads that do not survive ``fork`` (and CUDA state that
cannot be used after it), and a single nvimgcodec decoder shared by worker
threads would serialise them.

Output of ``decode``: a C-contiguous ``HxWx3 uint8`` RGB numpy array, no
EXIF rotation, libjpeg's default (accurate integer) IDCT and fancy upsampling
for every CPU backend, so all CPU backends agree pixel-for-pixel on baseline
JPEGs (see tests/unit/test_decode.py for the measured tolerance).
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memprobe.core.vocabulary import FORK, MAIN, PROCESS_MODES, SINGLE, THREAD, THREAD_MODES
from memprobe.decode import nvimgcodec_load
from memprobe.decode.nvimgcodec_load import gpu_unavailable_reason

__all__ = [
    "DECODER_NAMES",
    "DEVICES",
    "MODES",
    "Decoder",
    "NvImageCodecDecoder",
    "PillowDecoder",
    "SimpleJpegDecoder",
    "available_decoders",
    "check_mode_supported",
    "gpu_unavailable_reason",
    "make_decoder",
]

DECODER_NAMES: tuple[str, ...] = ("pillow", "nvimgcodec", "simplejpeg")
DEVICES: tuple[str, ...] = ("auto", "cpu", "gpu")
# DataLoader worker start modes the runner may ask about; "main" = num_workers=0. Every thread
# mode decodes as threads of one process do.
MODES: tuple[str, ...] = (MAIN, *PROCESS_MODES, THREAD)
_MODE_ALIASES = {
    "threads": THREAD,
    "threading": THREAD,
    "none": MAIN,
    "sync": MAIN,
    SINGLE: MAIN,
    **dict.fromkeys(THREAD_MODES, THREAD),
}

Encoded = bytes | bytearray | memoryview | np.ndarray


@runtime_checkable
class Decoder(Protocol):
    """What the dataset and benchmark need from a decoder."""

    name: str  # "pillow" | "nvimgcodec" | "simplejpeg"
    backend: str  # "pillow" | "nvimgcodec-cpu" | "nvimgcodec-gpu" | "simplejpeg"

    def decode(self, data: Encoded) -> np.ndarray:
        """Decode one JPEG to a host ``HxWx3 uint8`` RGB array."""
        ...

    def decode_batch(self, data: Sequence[Encoded]) -> list[Any]:
        """Decode several JPEGs; host arrays, or device images for GPU backends."""
        ...


def _as_bytes_like(data: Encoded) -> bytes | bytearray | np.ndarray:
    """nvimgcodec/simplejpeg take bytes or a uint8 array, not a memoryview."""
    if isinstance(data, memoryview):
        return np.frombuffer(data, dtype=np.uint8)
    return data


class PillowDecoder:
    """Pillow (libjpeg-turbo) decode. Stateless; Pillow releases the GIL while decoding."""

    name = "pillow"
    backend = "pillow"

    def decode(self, data: Encoded) -> np.ndarray:
        """Decode one JPEG to ``HxWx3 uint8`` RGB."""
        from PIL import Image

        # numpy's stubs give ndarray the buffer protocol only from Python 3.12 on.
        with Image.open(io.BytesIO(data)) as img:  # type: ignore[arg-type]
            if img.mode != "RGB":
                img = img.convert("RGB")
            return np.asarray(img)

    def decode_batch(self, data: Sequence[Encoded]) -> list[np.ndarray]:
        """Decode one by one; Pillow has no batched API."""
        return [self.decode(d) for d in data]

    def __repr__(self) -> str:
        return "PillowDecoder()"


class SimpleJpegDecoder:
    """simplejpeg (bundled libjpeg-turbo) decode; optional dependency."""

    name = "simplejpeg"
    backend = "simplejpeg"

    def decode(self, data: Encoded) -> np.ndarray:
        """Decode one JPEG to ``HxWx3 uint8`` RGB (accurate DCT, fancy upsampling)."""
        import simplejpeg

        # fastdct/fastupsample off: same arithmetic as Pillow's libjpeg defaults.
        return simplejpeg.decode_jpeg(
            _as_bytes_like(data), colorspace="RGB", fastdct=False, fastupsample=False
        )

    def decode_batch(self, data: Sequence[Encoded]) -> list[np.ndarray]:
        """Decode one by one; simplejpeg has no batched API."""
        return [self.decode(d) for d in data]

    def __repr__(self) -> str:
        return "SimpleJpegDecoder()"


class NvImageCodecDecoder:
    """nvImageCodec decode on the CPU backend (libjpeg-turbo) or a GPU (nvJPEG).

    ``gpu=False``: ``Decoder(device_id=NVIMGCODEC_DEVICE_CPU_ONLY,
    backends=[Backend(BackendKind.CPU_ONLY)])``. ``gpu=True``: nvimgcodec's
    default backends on ``device_id`` (GPU first, hybrid/CPU fallback), and
    ``decode_batch`` leaves the images on the device.
    ``max_num_cpu_threads`` sizes each native decoder's executor pool
    (0 = one per core; default 1 on CPU, 0 on GPU). The native decoder is built lazily per process and
    per thread, never pickled.
    """

    name = "nvimgcodec"

    def __init__(
        self, *, gpu: bool = False, device_id: int = 0, max_num_cpu_threads: int | None = None
    ) -> None:
        self.gpu = gpu
        self.device_id = device_id
        # CPU: 1 thread per native decoder, because the DataLoader's workers
        # already supply the parallelism. GPU: nvimgcodec's default (0 = one
        # per core), since CPU threads feed the GPU (parsing, Huffman decode).
        if max_num_cpu_threads is None:
            max_num_cpu_threads = 0 if gpu else 1
        self.max_num_cpu_threads = max_num_cpu_threads
        self.backend = "nvimgcodec-gpu" if gpu else "nvimgcodec-cpu"
        self._local: threading.local | None = None

    # -- lazy native decoder -------------------------------------------------
    def _native(self) -> Any:
        """The nvimgcodec.Decoder of this (process, thread), created on first use."""
        if self._local is None:
            self._local = threading.local()
        local = self._local
        # After fork the child inherits the parent's thread-local slot; the pid
        # check makes the child build its own decoder instead of reusing one
        # whose executor threads and CUDA context did not survive the fork.
        if getattr(local, "pid", None) != os.getpid():
            local.decoder, local.params = self._build()
            local.pid = os.getpid()
        return local.decoder, local.params

    def _build(self) -> tuple[Any, Any]:
        nv = nvimgcodec_load.nvimgcodec()
        # Match Pillow: RGB, no EXIF rotation.
        params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.ColorSpec.SRGB)
        if self.gpu:
            dec = nv.Decoder(device_id=self.device_id, max_num_cpu_threads=self.max_num_cpu_threads)
        else:
            dec = nv.Decoder(
                device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY,
                max_num_cpu_threads=self.max_num_cpu_threads,
                backends=[nv.Backend(nv.BackendKind.CPU_ONLY)],
            )
        return dec, params

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = None  # native decoders are per process; rebuild in the worker
        return state

    # -- decoding ------------------------------------------------------------
    def decode(self, data: Encoded) -> np.ndarray:
        """Decode one JPEG to a host ``HxWx3 uint8`` RGB array (GPU results are copied back)."""
        dec, params = self._native()
        img = dec.decode(_as_bytes_like(data), params=params)
        if img is None:  # nvimgcodec returns None (and logs a warning) on bad input
            raise ValueError("nvimgcodec could not decode the input (not a valid image?)")
        if self.gpu:
            img = img.cpu()
        # The array keeps the nvimgcodec Image alive through .base: no copy needed.
        return np.asarray(img)

    def decode_batch(self, data: Sequence[Encoded]) -> list[Any]:
        """One batched nvimgcodec call. CPU: numpy arrays. GPU: nvimgcodec Images on device
        (``torch.as_tensor(img, device="cuda")`` wraps one without a copy)."""
        if not data:
            return []
        dec, params = self._native()
        images = dec.decode([_as_bytes_like(d) for d in data], params=params)
        bad = [i for i, img in enumerate(images) if img is None]
        if bad:
            raise ValueError(f"nvimgcodec could not decode batch items {bad[:10]}")
        if self.gpu:
            return list(images)
        return [np.asarray(img) for img in images]

    def __repr__(self) -> str:
        return (
            f"NvImageCodecDecoder(gpu={self.gpu}, device_id={self.device_id}, "
            f"max_num_cpu_threads={self.max_num_cpu_threads})"
        )


def _check_name(name: str) -> None:
    if name not in DECODER_NAMES:
        raise ValueError(f"unknown decoder {name!r}; allowed: {', '.join(DECODER_NAMES)}")


def _unavailable_reason(name: str) -> str | None:
    _check_name(name)
    if name == "pillow":
        try:
            import PIL.Image  # noqa: F401
        except ImportError as exc:
            return f"Pillow not importable ({exc}); pip install pillow"
        return None
    if name == "simplejpeg":
        try:
            import simplejpeg  # noqa: F401
        except ImportError as exc:
            return f"simplejpeg not importable ({exc}); pip install simplejpeg"
        return None
    return nvimgcodec_load.import_state().error


def available_decoders() -> dict[str, str | None]:
    """Decoder name -> None if usable here, else the reason and an install hint."""
    return {name: _unavailable_reason(name) for name in DECODER_NAMES}


def make_decoder(
    name: str, *, device: str = "auto", device_id: int = 0, max_num_cpu_threads: int | None = None
) -> Decoder:
    """Build a decoder by name (``pillow``, ``nvimgcodec``, ``simplejpeg``).

    ``device``: ``"auto"`` picks the GPU for nvimgcodec when one is usable
    (see :func:`gpu_unavailable_reason`, which never initialises CUDA), else
    the CPU backend; ``"cpu"``/``"gpu"`` force it. Pillow and simplejpeg are
    CPU-only; asking them for ``"gpu"`` is a ValueError. Raises ValueError for
    unknown names/devices, ImportError if the library is missing, RuntimeError
    for ``device="gpu"`` without a usable GPU.
    """
    _check_name(name)
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; allowed: {', '.join(DEVICES)}")
    reason = _unavailable_reason(name)
    if reason is not None:
        raise ImportError(reason)
    if name != "nvimgcodec":
        if device == "gpu":
            raise ValueError(f"decoder {name!r} is CPU-only; use nvimgcodec for device='gpu'")
        return PillowDecoder() if name == "pillow" else SimpleJpegDecoder()
    gpu_reason = gpu_unavailable_reason() if device != "cpu" else "cpu requested"
    if device == "gpu" and gpu_reason is not None:
        raise RuntimeError(f"nvimgcodec on GPU is not possible here: {gpu_reason}")
    return NvImageCodecDecoder(
        gpu=gpu_reason is None, device_id=device_id, max_num_cpu_threads=max_num_cpu_threads
    )


def _normalise_mode(mode: str) -> str:
    m = _MODE_ALIASES.get(mode, mode)
    if m not in MODES:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)} (or threads)")
    return m


def check_mode_supported(decoder_name: str, backend: str, mode: str) -> str | None:
    """None if ``decoder_name``/``backend`` can run in DataLoader workers started by ``mode``,
    else a message the runner can record as this run's failure.

    ``mode``: main | fork | spawn | forkserver | thread. GPU decoding cannot run
    in fork-started workers (CUDA cannot be initialised in a forked child); the
    working GPU paths are spawn and thread (forkserver also avoids the
    problem as long as the forkserver itself never touches CUDA).
    """
    _check_name(decoder_name)
    m = _normalise_mode(mode)
    is_gpu = backend.endswith("-gpu") or backend == "gpu"
    if is_gpu and decoder_name != "nvimgcodec":
        return f"decoder {decoder_name!r} has no GPU backend (got backend {backend!r})"
    # Structural limits first: they hold whatever hardware this machine has.
    if is_gpu and m == FORK:
        return (
            f"{backend} cannot run in fork-started DataLoader workers: CUDA cannot be used in a "
            "forked child once the parent process has initialised it (nvImageCodec then fails "
            "with cudaErrorInitializationError), and the main process initialises CUDA as soon "
            "as it receives GPU batches. Use the spawn or thread mode "
            "(multiprocessing_context='spawn' or worker threads), or decode device 'cpu'."
        )
    reason = _unavailable_reason(decoder_name)
    if reason is not None:
        return f"{decoder_name} unavailable: {reason}"
    if is_gpu:
        gpu_reason = gpu_unavailable_reason()
        if gpu_reason is not None:
            return f"{backend} needs a usable CUDA GPU: {gpu_reason}"
    return None
