"""The report of a real decode session on a machine without nvImageCodec: images/s with encoded
MB/s, the CPU-cores charts, and what the throughput bars leave out. The same figures and words
on made-up data are tested in tests/unit/test_report_decode.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

# 64 images, twice: a run long enough that its CPU moves between its first and last tick on any
# machine (16 took 0.07 s once, and a Pillow run's kernel share of no CPU was no figure).
SCENARIO = """
name: decode-report
decode: {images: 64, width: 64, height: 48, quality: 90, device: auto}
decoders: [pillow, nvimgcodec]
modes: [fork, thread]
workers: [1]
loader: {batch_size: 4, epochs: 2, shuffle: false}
timeout_s: 120
"""


@pytest.fixture(scope="module")
def decode_page(tmp_path_factory: pytest.TempPathFactory, simulated_env, hide_nvimgcodec: str) -> str:
    """The report of a real decode session on a machine without nvImageCodec (simulated in every
    process by a sitecustomize that makes its import fail)."""
    pytest.importorskip(
        "skimage", reason="scikit-image builds the JPEGs: pip install 'torch-memprobe[images]'"
    )
    tmp = tmp_path_factory.mktemp("decode-report")
    (tmp / "decode-report.yaml").write_text(SCENARIO, encoding="utf-8")
    env = simulated_env(tmp, hide_nvimgcodec)
    proc = subprocess.run(
        [sys.executable, "-m", "memprobe", "run", str(tmp / "decode-report.yaml"), "-o", str(tmp / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the nvimgcodec runs failed
    return (tmp / "out" / "report.html").read_text(encoding="utf-8")


def page_charts(html: str) -> dict[str, dict]:
    m = re.search(r'<script type="application/json" id="memprobe-data">(.*?)</script>', html, re.S)
    assert m, "no chart data in the page"
    return {c["id"]: c for c in json.loads(m.group(1))["charts"]}


def test_real_decode_report(decode_page: str) -> None:
    charts = page_charts(decode_page)
    rates = [c for c in charts.values() if c["kind"] == "items_rate"]
    cpus = [c for c in charts.values() if c["kind"] == "cpu"]
    # Both Pillow runs: images/s with encoded MB/s; every run (the failed ones too) its CPU over time.
    assert len(rates) == 2 and all(
        [t["name"] for t in c["data"]] == ["images/s", "encoded MB/s"] for c in rates
    )
    assert len(cpus) == 4 and {c["title"] for c in cpus} == {
        "CPU cores used, by process",
        "CPU cores used, by thread of the main process",
    }
    assert all(any(v for v in c["data"][-1]["y"] if v) for c in cpus)  # every total used some CPU
    bars = charts["c-bars-rate"]
    assert bars["layouts"]["time"]["yaxis"]["title"]["text"] == "images/s" and bars["x"]["time"][0] == [
        "pillow"
    ]
    note = decode_page[decode_page.index('id="not-in-bars"') :]
    note = note[: note.index("</div>")]
    assert "nvimgcodec (all 2 runs failed: ImportError:" in note
    assert "No module named &#39;nvidia.nvimgcodec&#39;" in note
    matrix = decode_page[decode_page.index('id="matrix"') : decode_page.index('id="advice"')]
    assert "images/s" in matrix and "items/s" not in matrix
    assert matrix.count("faults/image") == 2 and "kernel CPU" in matrix  # next to each Pillow run's rate
    costs = decode_page[decode_page.index('id="costs"') :]
    costs = costs[: costs.index("</table>")]
    assert costs.count("<tr") == 3 and "minor faults per image" in costs  # a header and the two Pillow runs
    assert ">images fetched</button>" in decode_page
