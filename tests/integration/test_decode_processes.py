"""memprobe.decode in other processes: DecodeDataset in real DataLoader workers (fork and spawn),
nvImageCodec's native decoder rebuilt after a fork, and its import kept quiet in a fresh
interpreter. The decoders themselves are tested in-process in tests/unit/test_decode.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip(
    "skimage", reason="scikit-image builds the test JPEGs: pip install 'torch-memprobe[images]'"
)

from memprobe.decode.dataset import DecodeDataset
from memprobe.decode.decoders import NvImageCodecDecoder, available_decoders

W, H = 640, 408

NVIMGCODEC_REASON = available_decoders()["nvimgcodec"]
needs_nvimgcodec = pytest.mark.skipif(
    NVIMGCODEC_REASON is not None, reason=f"nvimgcodec unavailable: {NVIMGCODEC_REASON}"
)
CPU_DECODERS = [
    pytest.param("pillow", id="pillow"),
    pytest.param("nvimgcodec", id="nvimgcodec-cpu", marks=needs_nvimgcodec),
]


def _native_id_in_child(dec: NvImageCodecDecoder, data: bytes, queue) -> None:
    native = dec._native()[0]
    queue.put((id(native), dec._local.pid == os.getpid(), dec.decode(data).shape))


@needs_nvimgcodec
def test_nvimgcodec_rebuilds_native_decoder_after_fork(jpegs: list[bytes]) -> None:
    import multiprocessing as mp

    dec = NvImageCodecDecoder()
    parent_native = id(dec._native()[0])
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_native_id_in_child, args=(dec, jpegs[0], queue))  # inherited, not pickled
    proc.start()
    child_native, pid_matches, shape = queue.get(timeout=30)
    proc.join(timeout=30)
    assert proc.exitcode == 0
    assert child_native != parent_native and pid_matches
    assert shape == (H, W, 3)


@needs_nvimgcodec
def test_nvimgcodec_import_is_quiet() -> None:
    code = (
        "from memprobe.decode.decoders import make_decoder\n"
        "from memprobe.decode.images import make_jpegs\n"
        "print(make_decoder('nvimgcodec', device='cpu').decode(make_jpegs(1)[0]).shape)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MEMPROBE_NVIMGCODEC_QUIET"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"({H}, {W}, 3)"
    assert "Failed to load" not in proc.stderr and "[ERROR]" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("mode", ["fork", "spawn"])
@pytest.mark.parametrize("name", CPU_DECODERS)  # pillow, nvimgcodec: spawn costs ~3 s each
def test_dataset_in_dataloader_workers(mode: str, name: str, table) -> None:
    ds = DecodeDataset(table, name, device="cpu")
    ds[0]  # parent has a native decoder now; a forked child must build its own
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=mode)
    batches = list(loader)
    assert [tuple(b.shape) for b in batches] == [(4, 3, H, W)] * 3
    got = torch.cat(batches)
    for i in range(len(ds)):
        assert torch.equal(got[i], ds[i]), i
