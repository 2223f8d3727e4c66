"""memprobe.decode: benchmark JPEGs, decoders, DecodeDataset.

Pillow vs nvImageCodec-CPU tolerance (memprobe.decode.correctness), measured before choosing
it: on 600 generated 640x408 images (seed 3; quality/subsampling 90/4:2:0, 75/4:2:2,
95/4:4:4) the two decoders agreed exactly (max |diff| 0, mean 0.0), since both
run libjpeg-turbo's accurate integer IDCT with fancy upsampling. We allow
max |diff| <= 1 and mean <= 0.05 so a different libjpeg-turbo build does not
break the test, yet a real change is caught: fast (non-fancy) upsampling
differs by max 66 / mean 0.56, the fast DCT by max 8 / mean 0.99, a BGR swap
by max 255 (measured with simplejpeg on the same images).
"""

from __future__ import annotations

import io
import pickle
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

pytest.importorskip(
    "skimage", reason="scikit-image builds the test JPEGs: pip install 'torch-memprobe[images]'"
)

from memprobe.decode import nvimgcodec_load as _nvimgcodec
from memprobe.decode.correctness import (
    CPU_MAX_ABS_DIFF,
    CPU_MEAN_ABS_DIFF,
    check_against_pillow,
    compare_to_pillow,
)
from memprobe.decode.dataset import DecodeDataset
from memprobe.decode.decoders import (
    DECODER_NAMES,
    Decoder,
    NvImageCodecDecoder,
    available_decoders,
    check_mode_supported,
    gpu_unavailable_reason,
    make_decoder,
)
from memprobe.decode.images import make_jpegs

W, H = 640, 408

NVIMGCODEC_REASON = available_decoders()["nvimgcodec"]
needs_nvimgcodec = pytest.mark.skipif(
    NVIMGCODEC_REASON is not None, reason=f"nvimgcodec unavailable: {NVIMGCODEC_REASON}"
)
GPU_REASON = gpu_unavailable_reason()
needs_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=f"no usable GPU: {GPU_REASON}")

SIMPLEJPEG_REASON = available_decoders()["simplejpeg"]
needs_simplejpeg = pytest.mark.skipif(
    SIMPLEJPEG_REASON is not None, reason=f"optional simplejpeg unavailable: {SIMPLEJPEG_REASON}"
)
OTHER_CPU_DECODERS = [
    pytest.param("nvimgcodec", id="nvimgcodec-cpu", marks=needs_nvimgcodec),
    pytest.param("simplejpeg", id="simplejpeg", marks=needs_simplejpeg),
]
CPU_DECODERS = [pytest.param("pillow", id="pillow"), *OTHER_CPU_DECODERS]


def _pillow_ref(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


# -- images --------------------------------------------------------------------


def test_jpegs_deterministic_per_seed() -> None:
    a, b = make_jpegs(6, seed=11), make_jpegs(6, seed=11)
    assert a == b
    assert make_jpegs(6, seed=12) != a
    assert len(set(a)) == len(a), "images should differ from each other"


def test_jpegs_exact_size_rgb_and_encoding(jpegs: list[bytes]) -> None:
    from PIL import Image, JpegImagePlugin

    for data in jpegs:
        img = Image.open(io.BytesIO(data))
        assert img.format == "JPEG"
        assert img.size == (W, H)
        assert img.mode == "RGB"
        assert JpegImagePlugin.get_sampling(img) == 2  # 4:2:0
        assert not img.info.get("progressive")


def test_jpegs_other_size_and_subsampling() -> None:
    from PIL import Image, JpegImagePlugin

    (data,) = make_jpegs(1, width=100, height=50, subsampling="4:4:4", seed=1)
    img = Image.open(io.BytesIO(data))
    assert img.size == (100, 50)
    assert JpegImagePlugin.get_sampling(img) == 0


def test_jpegs_look_like_photos(jpegs: list[bytes]) -> None:
    """Guard against flat or noise images: photos compress to tens of KB at q90."""
    sizes = np.array([len(d) for d in jpegs])
    assert 10_000 < sizes.mean() < 200_000
    stds = [_pillow_ref(d).std() for d in jpegs[:6]]
    assert min(stds) > 10


def test_make_jpegs_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="subsampling"):
        make_jpegs(1, subsampling="4:1:1")
    with pytest.raises(ValueError, match="quality"):
        make_jpegs(1, quality=0)


def test_jpeg_table_one_buffer(table) -> None:
    import pyarrow as pa

    assert table.column_names == ["index", "source", "jpeg"]
    assert pa.types.is_binary(table.schema.field("jpeg").type)
    assert table.column("jpeg").num_chunks == 1
    assert table.column("index").to_pylist() == list(range(12))
    assert table.column("jpeg").to_pylist() == make_jpegs(12, seed=5)


# -- decoders ------------------------------------------------------------------


@pytest.mark.parametrize("name", CPU_DECODERS)
def test_decoder_output_contract(name: str, jpegs: list[bytes]) -> None:
    dec = make_decoder(name, device="cpu")
    assert isinstance(dec, Decoder)
    out = dec.decode(jpegs[0])
    assert out.shape == (H, W, 3) and out.dtype == np.uint8
    batch = dec.decode_batch(jpegs[:3])
    assert len(batch) == 3
    for got, data in zip(batch, jpegs[:3], strict=True):
        np.testing.assert_array_equal(np.asarray(got), dec.decode(data))


@pytest.mark.parametrize("name", OTHER_CPU_DECODERS)
def test_cpu_decoder_matches_pillow(name: str, jpegs: list[bytes]) -> None:
    other = make_decoder(name, device="cpu")
    assert other.backend.endswith("-cpu") or other.backend == name
    agreement = check_against_pillow(other, jpegs)
    assert agreement.images == len(jpegs)
    assert agreement.max_abs_diff <= CPU_MAX_ABS_DIFF and agreement.mean_abs_diff <= CPU_MEAN_ABS_DIFF
    assert (CPU_MAX_ABS_DIFF, CPU_MEAN_ABS_DIFF) == (1, 0.05), "the tolerance docs/performance.md states"


class _BgrDecoder:
    """Pillow with the channels swapped: the kind of bug the correctness check must catch."""

    name = "pillow"
    backend = "bgr-cpu"

    def decode(self, data: bytes) -> np.ndarray:
        return _pillow_ref(data)[:, :, ::-1]

    def decode_batch(self, data: list[bytes]) -> list[np.ndarray]:
        return [self.decode(d) for d in data]


def test_correctness_check_rejects_wrong_pixels(jpegs: list[bytes]) -> None:
    agreement = compare_to_pillow(_BgrDecoder(), jpegs[:4])
    assert not agreement.ok and agreement.max_abs_diff > 100
    with pytest.raises(ValueError, match=r"bgr-cpu vs pillow on 4 JPEGs.*MISMATCH"):
        check_against_pillow(_BgrDecoder(), jpegs[:4])
    assert check_against_pillow(make_decoder("pillow"), jpegs[:4]).max_abs_diff == 0


@needs_nvimgcodec
def test_nvimgcodec_accepts_memoryview_and_rejects_garbage(jpegs: list[bytes]) -> None:
    nv = make_decoder("nvimgcodec", device="cpu")
    np.testing.assert_array_equal(nv.decode(memoryview(jpegs[0])), _pillow_ref(jpegs[0]))
    with pytest.raises(ValueError, match="could not decode"):
        nv.decode(b"not a jpeg")
    with pytest.raises(ValueError, match=r"items \[1\]"):
        nv.decode_batch([jpegs[0], b"not a jpeg"])


@needs_gpu
def test_nvimgcodec_gpu_close_to_pillow(jpegs: list[bytes]) -> None:
    nv = make_decoder("nvimgcodec", device="gpu")
    assert nv.backend == "nvimgcodec-gpu"
    agreement = check_against_pillow(nv, jpegs[:8])
    assert agreement.allowed_max is None  # nvJPEG's IDCT is not libjpeg's: mean bound only
    on_device = nv.decode_batch(jpegs[:2])
    assert torch.as_tensor(on_device[0], device="cuda").is_cuda


def test_make_decoder_unknown_name_lists_allowed() -> None:
    with pytest.raises(ValueError) as info:
        make_decoder("nope")
    for allowed in DECODER_NAMES:
        assert allowed in str(info.value)


def test_make_decoder_bad_device() -> None:
    with pytest.raises(ValueError, match="auto, cpu, gpu"):
        make_decoder("pillow", device="tpu")
    with pytest.raises(ValueError, match="CPU-only"):
        make_decoder("pillow", device="gpu")


@needs_nvimgcodec
def test_make_decoder_auto_follows_gpu_detection() -> None:
    dec = make_decoder("nvimgcodec")
    assert dec.backend == ("nvimgcodec-cpu" if GPU_REASON else "nvimgcodec-gpu")
    if GPU_REASON:
        with pytest.raises(RuntimeError, match="GPU"):
            make_decoder("nvimgcodec", device="gpu")


def test_gpu_detection_respects_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "CUDA_VISIBLE_DEVICES" in (gpu_unavailable_reason() or "")


def test_available_decoders_reports_reasons() -> None:
    avail = available_decoders()
    assert set(avail) == set(DECODER_NAMES)
    assert avail["pillow"] is None
    for name, reason in avail.items():
        if reason is not None:
            assert "pip install" in reason, name


# -- modes ---------------------------------------------------------------------


def test_check_mode_flags_gpu_fork() -> None:
    msg = check_mode_supported("nvimgcodec", "nvimgcodec-gpu", "fork")
    assert msg is not None and "fork" in msg and "spawn" in msg


@pytest.mark.parametrize("mode", ["main", "fork", "spawn", "forkserver", "thread", "threads"])
def test_check_mode_cpu_backends_everywhere(mode: str) -> None:
    assert check_mode_supported("pillow", "pillow", mode) is None
    if NVIMGCODEC_REASON is None:
        assert check_mode_supported("nvimgcodec", "nvimgcodec-cpu", mode) is None


@pytest.mark.parametrize("mode", ["spawn", "thread"])
def test_check_mode_gpu_non_fork_depends_on_hardware(mode: str) -> None:
    msg = check_mode_supported("nvimgcodec", "nvimgcodec-gpu", mode)
    if GPU_REASON is None and NVIMGCODEC_REASON is None:
        assert msg is None
    else:
        assert msg is not None


# -- GPU path and missing package, simulated (no GPU here; nvimgcodec is installed) ----------


@pytest.fixture
def gpu_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the non-initialising GPU probe found a usable CUDA device."""
    from memprobe.decode import decoders

    monkeypatch.setattr(decoders, "gpu_unavailable_reason", lambda: None)


@needs_nvimgcodec
def test_auto_device_picks_and_labels_the_gpu_when_one_is_detected(gpu_detected, table) -> None:
    dec = make_decoder("nvimgcodec")
    assert isinstance(dec, NvImageCodecDecoder)
    assert dec.gpu and dec.backend == "nvimgcodec-gpu" and dec.max_num_cpu_threads == 0
    ds = DecodeDataset(table, "nvimgcodec")  # builds no native decoder, so touches no CUDA
    assert ds.decoder.backend == "nvimgcodec-gpu" and ds._on_gpu
    assert make_decoder("nvimgcodec", device="cpu").backend == "nvimgcodec-cpu"
    for mode in ("spawn", "thread", "forkserver"):
        assert check_mode_supported("nvimgcodec", "nvimgcodec-gpu", mode) is None, mode
    msg = check_mode_supported("nvimgcodec", "nvimgcodec-gpu", "fork")
    assert msg is not None and "cudaErrorInitializationError" in msg and "spawn or thread" in msg


@pytest.fixture
def nvimgcodec_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import nvidia.nvimgcodec`` fail as if the package were not installed."""
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)
    monkeypatch.setattr(_nvimgcodec, "_state", None)  # the import is cached per process


def test_missing_nvimgcodec_says_how_to_install(nvimgcodec_missing) -> None:
    hint = "pip install 'torch-memprobe[nvimgcodec]'"
    reason = available_decoders()["nvimgcodec"]
    assert reason is not None and "nvidia.nvimgcodec is not importable" in reason and hint in reason
    assert available_decoders()["pillow"] is None
    with pytest.raises(ImportError, match=re.escape(hint)):
        make_decoder("nvimgcodec")
    assert hint in (check_mode_supported("nvimgcodec", "nvimgcodec-cpu", "thread") or "")


def test_check_mode_rejects_nonsense() -> None:
    assert check_mode_supported("pillow", "pillow-gpu", "spawn") is not None
    with pytest.raises(ValueError, match="mode"):
        check_mode_supported("pillow", "pillow", "vfork")
    with pytest.raises(ValueError, match="allowed"):
        check_mode_supported("nope", "pillow", "fork")


# -- lazy native decoders ---------------------------------------------------------


@needs_nvimgcodec
def test_nvimgcodec_decoder_is_per_thread_and_not_pickled(jpegs: list[bytes]) -> None:
    dec = NvImageCodecDecoder()
    dec.decode(jpegs[0])
    clone = pickle.loads(pickle.dumps(dec))
    assert clone._local is None and clone.backend == "nvimgcodec-cpu"
    natives: list[int] = []
    barrier = threading.Barrier(2)

    def grab() -> None:
        barrier.wait()  # both alive at once, so ids cannot be reused
        natives.append(id(dec._native()[0]))
        barrier.wait()

    threads = [threading.Thread(target=grab) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(natives)) == 2
    assert id(dec._native()[0]) not in natives


def test_unexpected_import_output_is_passed_through(capsys: pytest.CaptureFixture[str]) -> None:
    _nvimgcodec._reemit_unexpected(
        "Failed to load nvjpeg library! Please install CUDA toolkit\n"
        "\x1b[0;31m[ERROR] \x1b[0m[nvtiff_ext] Failed to load nvTIFF library\n"
        "something else went wrong\n"
    )
    err = capsys.readouterr().err
    assert err == "something else went wrong\n"


# -- dataset -------------------------------------------------------------------


@pytest.mark.parametrize("name", CPU_DECODERS)
def test_dataset_items_and_sizes(name: str, table) -> None:
    ds = DecodeDataset(table, name, device="cpu")
    blobs = table.column("jpeg").to_pylist()
    assert len(ds) == 12
    assert ds.total_bytes == sum(len(b) for b in blobs)
    assert ds.total_mb == pytest.approx(ds.total_bytes / 1e6)
    assert [ds.bytes_for(i) for i in range(12)] == [len(b) for b in blobs]
    assert bytes(ds.encoded(3)) == blobs[3]
    item = ds[3]
    assert item.shape == (3, H, W) and item.dtype == torch.uint8
    np.testing.assert_array_equal(item.permute(1, 2, 0).numpy(), _pillow_ref(blobs[3]))
    assert torch.equal(ds[-1], ds[11])
    with pytest.raises(IndexError):
        ds[12]


def test_dataset_never_aliases_read_only_decoder_output(table) -> None:
    """Pillow's arrays view an immutable bytes object; items must own a copy."""
    ds = DecodeDataset(table, "pillow")
    hwc = ds.decoder.decode(ds.encoded(0))
    chw = ds._to_chw(hwc)
    if hwc.flags.writeable:
        assert chw.data_ptr() == hwc.ctypes.data  # writable output is used without a copy
    else:
        assert chw.data_ptr() != hwc.ctypes.data
    np.testing.assert_array_equal(chw.permute(1, 2, 0).numpy(), hwc)


def test_dataset_output_size(table) -> None:
    ds = DecodeDataset(table, "pillow", output_size=(204, 320))
    item = ds[0]
    assert item.shape == (3, 204, 320) and item.dtype == torch.uint8
    full = DecodeDataset(table, "pillow")[0].float()
    coarse = torch.nn.functional.avg_pool2d(full[None], 2)[0]
    assert (item.float() - coarse).abs().mean() < 3  # a resize, not garbage


def test_dataset_pickles_table_once(table) -> None:
    ds = DecodeDataset(table, "pillow")
    ds[0]  # build the cached views, which must not be pickled
    blob = pickle.dumps(ds)
    assert len(blob) < ds.total_bytes * 1.1 + 50_000
    clone = pickle.loads(blob)
    assert torch.equal(clone[5], ds[5])


def test_dataset_rejects_non_binary_column(table) -> None:
    with pytest.raises(TypeError, match="binary"):
        DecodeDataset(table, "pillow", column="source")
    with pytest.raises(ValueError, match="no column"):
        DecodeDataset(table, "pillow", column="pixels")


@pytest.mark.parametrize("name", CPU_DECODERS)
def test_dataset_from_threads(name: str, table) -> None:
    ds = DecodeDataset(table, name, device="cpu")
    expected = [ds[i] for i in range(len(ds))]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(ds.__getitem__, range(len(ds))))
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(e, g)
