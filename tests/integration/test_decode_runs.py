"""`memprobe run` on a decode scenario, as a user runs it, in two simulated environments.

No GPU and nvImageCodec installed here, so both situations are simulated for every process of
the run (the CLI, each run's child, its workers) by a ``sitecustomize`` on PYTHONPATH:

* nvImageCodec not installed: an import hook makes ``import nvidia.nvimgcodec`` fail exactly as a
  missing package does. The Pillow runs must still work; the nvimgcodec runs must fail one by
  one, naming the missing package and the pip command.
* a CUDA GPU present: the non-initialising GPU probe reports a usable device. ``device: auto``
  must then choose the GPU backend, and its fork run must be a clear per-run failure (before any
  worker starts, so before CUDA is touched) while the session carries on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("skimage", reason="scikit-image builds the JPEGs: pip install 'torch-memprobe[images]'")

FAKE_GPU = """
# decoders binds the probe at import, so patch it there as well as at its source.
import memprobe.decode.nvimgcodec_load as _probe
import memprobe.decode.decoders as _decoders

def _usable_gpu():
    return None

_probe.gpu_unavailable_reason = _decoders.gpu_unavailable_reason = _usable_gpu
"""

SCENARIO = """
name: decode-sim
decode: {{images: 8, width: 64, height: 48, quality: 90, device: auto}}
decoders: [pillow, nvimgcodec]
modes: [{mode}]
workers: [1]
loader: {{batch_size: 4, epochs: 1, shuffle: false}}
timeout_s: 120
"""


def _run(tmp_path: Path, env: dict[str, str], *, mode: str) -> tuple[subprocess.CompletedProcess, dict]:
    scenario = tmp_path / "decode-sim.yaml"
    scenario.write_text(SCENARIO.format(mode=mode), encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "memprobe", "run", str(scenario), "-o", str(out), "--no-report"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return proc, {r["run_id"]: r for r in summary["runs"]}


def test_without_nvimgcodec_pillow_runs_and_the_rest_says_how_to_install(
    tmp_path: Path, simulated_env, hide_nvimgcodec: str
) -> None:
    proc, runs = _run(tmp_path, simulated_env(tmp_path, hide_nvimgcodec), mode="thread")
    assert proc.returncode == 1, proc.stderr  # a run failed: the user must notice
    pillow, nv = runs["pillow-thread-w1"], runs["nvimgcodec-thread-w1"]
    assert pillow["status"] == "ok" and pillow["items"] == 8 and pillow["decoder_backend"] == "pillow"
    assert nv["status"] == "failed" and nv["items"] == 0
    for text in (nv["error"], proc.stdout):
        assert "No module named 'nvidia.nvimgcodec'" in text
        assert "pip install 'torch-memprobe[nvimgcodec]'" in text


def test_fork_with_a_gpu_is_a_clear_per_run_failure(tmp_path: Path, simulated_env) -> None:
    proc, runs = _run(tmp_path, simulated_env(tmp_path, FAKE_GPU), mode="fork")
    assert proc.returncode == 1, proc.stderr
    assert runs["pillow-fork-w1"]["status"] == "ok"  # the session carried on
    nv = runs["nvimgcodec-fork-w1"]
    assert nv["status"] == "failed" and nv["items"] == 0
    assert "nvimgcodec-gpu cannot run in fork-started DataLoader workers" in nv["error"]
    assert "spawn or thread" in nv["error"] and "Traceback" not in proc.stdout
