"""A map-style dataset that decodes JPEGs held in one Arrow buffer.

Transform, deliberately minimal because the benchmark measures decode:
JPEG bytes -> decoder -> ``HxWx3 uint8`` -> ``torch.uint8`` tensor ``3xHxW``.
The CHW tensor is a permuted (non-contiguous) view of the decoded HWC
memory: a contiguous CHW copy would cost ~15 % of a 640x408 Pillow decode,
and the DataLoader's collate (``torch.stack``) copies anyway. Read-only
decoder output (Pillow's arrays sit on an immutable ``bytes``) is copied
once, so the tensor never aliases immutable memory. Optionally a bilinear,
antialiased resize to ``output_size`` (off by default; the NVIDIA experiment
times decode only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import Dataset

from memprobe.decode.decoders import Decoder, make_decoder

__all__ = ["DecodeDataset"]


class DecodeDataset(Dataset):
    """Decode item ``i`` of an Arrow table's binary ``jpeg`` column.

    Holds only the table (one contiguous JPEG buffer) and a lazily-built
    decoder: pickling for spawn/forkserver workers sends the table's buffers
    and the decoder *settings*; every process and every thread builds its own
    native decoder on first use (see ``memprobe.decode.decoders``).

    ``decoder``: name for :func:`make_decoder` (``pillow``, ``nvimgcodec``,
    ``simplejpeg``) or a ready :class:`Decoder`. ``device``: ``auto|cpu|gpu``
    (nvimgcodec only). ``output_size``: ``(height, width)`` to resize to, or
    None for no resize. Items are CPU tensors, or CUDA tensors for the
    ``nvimgcodec-gpu`` backend.
    """

    def __init__(
        self,
        table: pa.Table,
        decoder: str | Decoder = "pillow",
        *,
        device: str = "auto",
        output_size: tuple[int, int] | None = None,
        column: str = "jpeg",
    ) -> None:
        if column not in table.column_names:
            raise ValueError(f"table has no column {column!r} (columns: {table.column_names})")
        col_type = table.schema.field(column).type
        if not (pa.types.is_binary(col_type) or pa.types.is_large_binary(col_type)):
            raise TypeError(f"column {column!r} must be binary, got {col_type}")
        # One chunk so item lookup is an offsets read, not a chunk search.
        self.table = table.combine_chunks() if table.column(column).num_chunks > 1 else table
        self.column = column
        self.decoder: Decoder = make_decoder(decoder, device=device) if isinstance(decoder, str) else decoder
        self.output_size = output_size
        self._views: tuple[np.ndarray, pa.Buffer] | None = None  # cache, rebuilt after unpickle

    # -- pickling: ship the table and settings, not derived views ---------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_views"] = None
        return state

    # -- encoded bytes ----------------------------------------------------------
    def _offsets_and_data(self) -> tuple[np.ndarray, pa.Buffer]:
        """Zero-copy numpy view of the column's offsets, and its data buffer."""
        if self._views is None:
            arr = self.table.column(self.column).chunk(0) if self.table.num_rows else None
            if arr is None:
                self._views = (np.zeros(1, np.int64), pa.py_buffer(b""))
            else:
                dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
                _, off_buf, data_buf = arr.buffers()
                offsets = np.frombuffer(off_buf, dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]
                self._views = (offsets, data_buf)
        return self._views

    def encoded(self, index: int) -> memoryview:
        """The JPEG bytes of item ``index`` as a zero-copy memoryview into the Arrow buffer."""
        offsets, data = self._offsets_and_data()
        start, end = int(offsets[index]), int(offsets[index + 1])
        return memoryview(data)[start:end]

    def bytes_for(self, index: int) -> int:
        """Encoded size in bytes of item ``index`` (for MB/s reporting)."""
        offsets, _ = self._offsets_and_data()
        return int(offsets[index + 1] - offsets[index])

    @property
    def total_bytes(self) -> int:
        """Encoded bytes of all items."""
        offsets, _ = self._offsets_and_data()
        return int(offsets[-1] - offsets[0])

    @property
    def total_mb(self) -> float:
        """Encoded size of all items in MB (10**6 bytes)."""
        return self.total_bytes / 1e6

    # -- decoding -----------------------------------------------------------------
    def __len__(self) -> int:
        return self.table.num_rows

    def _check_index(self, index: int) -> int:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} items")
        return index

    @property
    def _on_gpu(self) -> bool:
        return self.decoder.backend.endswith("-gpu")

    def _to_chw(self, image: Any) -> torch.Tensor:
        """HWC image (numpy, or nvimgcodec device image) -> CHW uint8 tensor (a view)."""
        if self._on_gpu:
            hwc = torch.as_tensor(image, device=f"cuda:{getattr(self.decoder, 'device_id', 0)}")
        else:
            # torch.from_numpy on a read-only array would alias immutable memory (and warn).
            hwc = torch.from_numpy(image if image.flags.writeable else image.copy())
        chw = hwc.permute(2, 0, 1)
        return self._resize(chw) if self.output_size is not None else chw

    def _resize(self, chw: torch.Tensor) -> torch.Tensor:
        size = tuple(self.output_size)  # type: ignore[arg-type]
        if tuple(chw.shape[1:]) == size:
            return chw
        x = chw.unsqueeze(0)
        if x.is_cuda:  # uint8 bilinear+antialias is CPU-only in torch
            x = x.float()
        y = torch.nn.functional.interpolate(
            x, size=size, mode="bilinear", antialias=True, align_corners=False
        )
        if y.dtype != torch.uint8:
            y = y.round_().clamp_(0, 255).to(torch.uint8)
        return y.squeeze(0)

    def __getitem__(self, index: int) -> torch.Tensor:
        """Decode item ``index`` to a ``3xHxW`` uint8 tensor."""
        data = self.encoded(self._check_index(index))
        if self._on_gpu:
            (image,) = self.decoder.decode_batch([data])  # stays on the device
        else:
            image = self.decoder.decode(data)
        return self._to_chw(image)

    def __getitems__(self, indices: Sequence[int]) -> list[torch.Tensor]:
        """Decode a whole batch; one batched nvimgcodec call on the GPU backend.

        torch's fetcher calls this instead of ``__getitem__`` per index; the
        default collate then stacks the list.
        """
        if not self._on_gpu:
            return [self[i] for i in indices]
        data = [self.encoded(self._check_index(i)) for i in indices]
        return [self._to_chw(img) for img in self.decoder.decode_batch(data)]

    def __repr__(self) -> str:
        return (
            f"DecodeDataset(n={len(self)}, decoder={self.decoder!r}, "
            f"output_size={self.output_size}, encoded_mb={self.total_mb:.1f})"
        )
