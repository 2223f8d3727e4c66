"""``memprobe.ChunkedRandomSampler`` and ``memprobe.ChunkedDistributedSampler``: torch's shuffled
orders, without a Python int per record.

torch's ``RandomSampler`` (what ``DataLoader(shuffle=True)`` uses), ``SubsetRandomSampler`` and
``DistributedSampler`` (what a DDP job passes, in every rank) turn each epoch's permutation into
one Python list (``torch.randperm(n).tolist()``): about 38 bytes per record, held for the whole
epoch and built again at the next one. With 6,000,000 records that is +230 MB of the main
process's (or each rank's) own memory as every epoch begins (measured: docs/performance.md, "The
sampler's index list"), a step that memprobe reports as the main process growing of its own
(pytorch#13246's demonstration shows it beside its workers' copy-on-access). These samplers keep
the permutation as one int64 tensor (8 bytes per record) and make Python ints of it a chunk at a
time, in the order torch's sampler gives for the same generator, seed and epoch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized
from typing import Any

CHUNK = 65_536  # indices made Python ints at once: ~2.5 MB of them, whatever the dataset's size


def _chunks(indices: Any, chunk: int) -> Iterator[int]:
    """An int64 tensor's values as Python ints, ``chunk`` of them made at a time."""
    for part in indices.split(chunk):
        yield from part.tolist()


def _checked_chunk(chunk: int) -> int:
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    return chunk


class ChunkedRandomSampler:
    """Every index of ``data_source`` once per epoch, in a new random order each epoch; pass it as
    ``DataLoader(dataset, sampler=memprobe.ChunkedRandomSampler(dataset))`` in place of
    ``shuffle=True``. ``generator``: a ``torch.Generator`` for the order (else one seeded from
    torch's global generator at each epoch, as ``RandomSampler`` does, so ``torch.manual_seed``
    makes the order reproducible). Epoch after epoch, the orders are RandomSampler's for the same
    generator or seed. One process's order: in a DDP job, :class:`ChunkedDistributedSampler`."""

    def __init__(self, data_source: Sized, generator: Any = None, chunk: int = CHUNK) -> None:
        self.data_source = data_source
        self.generator = generator
        self.chunk = _checked_chunk(chunk)

    def __len__(self) -> int:
        return len(self.data_source)

    def __iter__(self) -> Iterator[int]:
        import torch  # here: ``import memprobe`` alone never imports torch

        n = len(self.data_source)
        generator = self.generator
        if generator is None:
            generator = torch.Generator()
            generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        yield from _chunks(torch.randperm(n, generator=generator), self.chunk)
        # RandomSampler draws a second permutation at the end of each epoch (the empty remainder
        # of num_samples % n): drawn here too, so a given generator's next epoch is RandomSampler's.
        torch.randperm(n, generator=generator)


class ChunkedDistributedSampler:
    """A DDP rank's share of every epoch, in torch ``DistributedSampler``'s order (the same
    indices for the same ``seed``, epoch, ``num_replicas``, ``rank`` and ``drop_last``), without
    its list of every record's index in each rank: pass it as
    ``DataLoader(dataset, sampler=memprobe.ChunkedDistributedSampler(dataset))`` and call
    ``sampler.set_epoch(epoch)`` before each epoch, as with DistributedSampler (without it every
    epoch has the first epoch's order). ``num_replicas`` and ``rank`` default to the initialised
    process group's world size and rank."""

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        chunk: int = CHUNK,
    ) -> None:
        if num_replicas is None or rank is None:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                raise RuntimeError(
                    "ChunkedDistributedSampler needs num_replicas and rank, or an initialised "
                    "torch.distributed process group to take them from"
                )
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(
                f"rank must be in [0, {num_replicas - 1}] and num_replicas at least 1, got rank {rank}"
            )
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.chunk = _checked_chunk(chunk)
        self.epoch = 0
        n = len(dataset)
        # DistributedSampler's split: every rank the same count, the tail dropped or padded.
        self.num_samples = math.ceil(
            (n - num_replicas) / num_replicas if drop_last and n % num_replicas else n / num_replicas
        )
        self.total_size = self.num_samples * num_replicas

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration gives (seeded with ``seed + epoch``)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        import torch

        n = len(self.dataset)
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(n, generator=generator)
        else:
            indices = torch.arange(n, dtype=torch.int64)
        if self.total_size > n:  # padded with the order's own start, repeated as often as needed
            indices = torch.cat([indices] * math.ceil(self.total_size / n)) if n else indices
        indices = indices[: self.total_size]
        yield from _chunks(indices[self.rank : self.total_size : self.num_replicas], self.chunk)
