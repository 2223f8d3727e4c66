"""Single-core JPEG decode rate of every available memprobe decoder.

Pins the process to one CPU core before any decoder library is imported (so
any thread pools it creates inherit the pin), limits the usual thread-count
environment variables to 1, and builds nvimgcodec with
``max_num_cpu_threads=1``. Before anything is timed, every decoder must give
Pillow's pixels on all the JPEGs (memprobe.decode.correctness; the script stops
otherwise). Decodes ``--count`` generated 640x408 JPEGs per
pass, ``--repeats`` timed passes (interleaved across decoders) after one
warm-up pass, and reports the median as images/s, megapixels/s and encoded MB/s in a markdown table.

    python benchmarks/bench_decode_single_core.py [--count 200] [--repeats 5] [--core N]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Set before numpy/nvimgcodec load: libraries read these once, at import.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"


@dataclass(frozen=True)
class Result:
    label: str
    median_s: float
    runs_s: list[float]
    images: int
    megapixels: float
    encoded_mb: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.median_s

    @property
    def mpix_per_s(self) -> float:
        return self.megapixels / self.median_s

    @property
    def mb_per_s(self) -> float:
        return self.encoded_mb / self.median_s


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=200, help="images per timed pass")
    p.add_argument("--repeats", type=int, default=7, help="timed passes (median reported)")
    p.add_argument("--core", type=int, default=None, help="CPU to pin to (default: first allowed)")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=408)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def pin_to_one_core(core: int | None) -> int:
    """Restrict this process (and threads created later) to one CPU; return it."""
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[0] if core is None else core
    os.sched_setaffinity(0, {chosen})
    return chosen


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def time_interleaved(fns: list[Callable[[], object]], repeats: int) -> list[list[float]]:
    """Per function: ``repeats`` timed passes, after one untimed warm-up pass each.

    Passes are interleaved round-robin (A B C, A B C, ...) so slow drift of a
    shared machine hits every decoder alike instead of whichever ran last.
    """
    for fn in fns:
        fn()
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            runs[i].append(time.perf_counter() - t0)
    return runs


def _pillow_load_only(data: bytes) -> object:
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def candidates(jpegs: list[bytes]) -> tuple[list[tuple[str, Callable[[], object]]], list[str]]:
    """(label, one-pass function) for every decoder usable here, and each one's agreement
    with Pillow, checked before anything is timed (ValueError if a decoder is off)."""
    from memprobe.decode.correctness import check_against_pillow
    from memprobe.decode.decoders import available_decoders, make_decoder

    # Reference row: Pillow's decode alone, without the PIL.Image -> numpy copy
    # (Pillow stores RGB as 4 bytes/pixel, so that copy also repacks pixels).
    out: list[tuple[str, Callable[[], object]]] = [
        ("pillow Image.load() only, no array (reference)", lambda: [_pillow_load_only(j) for j in jpegs])
    ]
    checked: list[str] = []
    for name, reason in available_decoders().items():
        if reason is not None:
            print(f"skipping {name}: {reason}", file=sys.stderr)
            continue
        devices = ["cpu"] if name != "nvimgcodec" else ["cpu", "auto"]
        seen: set[str] = set()
        for device in devices:
            dec = make_decoder(name, device=device, max_num_cpu_threads=1)
            if dec.backend in seen:
                continue
            seen.add(dec.backend)
            if name != "pillow":  # the reference itself
                checked.append(str(check_against_pillow(dec, jpegs)))
            out.append((f"{dec.backend} decode()", lambda d=dec: [d.decode(j) for j in jpegs]))
            if name == "nvimgcodec":
                out.append((f"{dec.backend} decode_batch({len(jpegs)})", lambda d=dec: d.decode_batch(jpegs)))
    return out, checked


def versions() -> str:
    from PIL import features

    parts = [f"Python {platform.python_version()}", f"Pillow {features.version('pil')}"]
    parts.append(f"Pillow's libjpeg-turbo {features.version('libjpeg_turbo') or features.version('jpg')}")
    from memprobe.decode import nvimgcodec_load

    state = nvimgcodec_load.import_state()
    if state.module is not None:
        parts.append(f"nvimgcodec {state.module.__version__}")
    try:
        import simplejpeg

        parts.append(f"simplejpeg {simplejpeg.__version__}")
    except ImportError:
        pass
    return ", ".join(parts)


def render(
    results: list[Result], checked: list[str], args: argparse.Namespace, core: int, command: str
) -> str:
    lines = [
        f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs, pinned to CPU {core}",
        f"Software: {versions()}",
        (
            f"Images: {args.count} JPEGs {args.width}x{args.height}, quality {args.quality}, 4:2:0, "
            f"seed {args.seed}; median of {args.repeats} interleaved passes after 1 warm-up"
        ),
        f"Command: `{command}`",
        *(f"Correctness before timing: {line}" for line in checked),
        "",
        "| decoder | images/s | megapixels/s | encoded MB/s | median pass (s) | min..max pass (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} | {r.images_per_s:.0f} | {r.mpix_per_s:.1f} | {r.mb_per_s:.1f} | "
            f"{r.median_s:.3f} | {min(r.runs_s):.3f}..{max(r.runs_s):.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    core = pin_to_one_core(args.core)  # before decoder libraries start any threads
    from memprobe.decode.images import make_jpegs

    jpegs = make_jpegs(args.count, width=args.width, height=args.height, quality=args.quality, seed=args.seed)
    megapixels = args.count * args.width * args.height / 1e6
    encoded_mb = sum(len(j) for j in jpegs) / 1e6
    labelled, checked = candidates(jpegs)
    all_runs = time_interleaved([fn for _, fn in labelled], args.repeats)
    results = [
        Result(label, statistics.median(runs), runs, args.count, megapixels, encoded_mb)
        for (label, _), runs in zip(labelled, all_runs, strict=True)
    ]
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable), *sys.argv])
    print(render(results, checked, args, core, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
