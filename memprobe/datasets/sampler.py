"""``memprobe.ChunkedRandomSampler``: torch's shuffled order, without a Python int per record.

torch's ``RandomSampler`` (what ``DataLoader(shuffle=True)`` uses) and ``SubsetRandomSampler``
turn each epoch's permutation into one Python list (``torch.randperm(n).tolist()``) in the main
process: about 38 bytes per record, held for the whole epoch and built again at the next one.
With 6,000,000 records that is +230 MB of the main process's own memory as every epoch begins
(measured: docs/performance.md, "The sampler's index list"), a step that memprobe reports as the
main process growing of its own (pytorch#13246's demonstration shows it beside its workers'
copy-on-access). This sampler keeps the permutation as one int64 tensor (8 bytes per record) and
makes Python ints of it a chunk at a time: the same order for the same generator state, a new
one each epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

CHUNK = 65_536  # indices made Python ints at once: ~2.5 MB of them, whatever the dataset's size


class ChunkedRandomSampler:
    """Every index of ``data_source`` once per epoch, in a new random order each epoch; pass it as
    ``DataLoader(dataset, sampler=memprobe.ChunkedRandomSampler(dataset))`` in place of
    ``shuffle=True``. ``generator``: a ``torch.Generator`` for the order (else one seeded from
    torch's global generator at each epoch, as ``RandomSampler`` does, so ``torch.manual_seed``
    makes the order reproducible)."""

    def __init__(self, data_source: Sized, generator: Any = None, chunk: int = CHUNK) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        self.data_source = data_source
        self.generator = generator
        self.chunk = chunk

    def __len__(self) -> int:
        return len(self.data_source)

    def __iter__(self) -> Iterator[int]:
        import torch  # here: ``import memprobe`` alone never imports torch

        generator = self.generator
        if generator is None:
            generator = torch.Generator()
            generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        for part in torch.randperm(len(self.data_source), generator=generator).split(self.chunk):
            yield from part.tolist()
