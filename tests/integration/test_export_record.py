"""``memprobe export`` of a real recording, as a user would run it: ``memprobe record`` of a job with a
list-of-dicts dataset and a DataLoader of 2 fork workers that counts its items
(``memprobe.mark``) and profiles its loop with torch.profiler; then the folder exported to all
three formats, each read back by its own reader (the trace checked against the Trace Event
Format's documented fields, not opened in a viewer: chrome://tracing is not served headless),
and the trace placed beside the job's own torch.profiler trace by their time bases."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from suite_extras import needs
from trace_format import check_trace_fields

pytestmark = pytest.mark.slow

JOB = textwrap.dedent("""
    import sys, time
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.data import DataLoader, Dataset
    import memprobe

    class Records(Dataset):
        def __init__(self):
            self.rows = [{"id": i, "path": f"images/{i:09d}.jpg", "box": list(map(float, range(i, i + 16)))}
                         for i in range(60_000)]
        def __len__(self):
            return len(self.rows)
        def __getitem__(self, i):
            r = self.rows[i]
            return r["id"] + len(r["path"]) + sum(r["box"])

    if __name__ == "__main__":
        loader = DataLoader(Records(), batch_size=500, num_workers=2, shuffle=True,
                            multiprocessing_context="fork")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for batch in loader:
                torch.as_tensor(batch).sum()
                memprobe.mark(len(batch))
                time.sleep(0.02)
        prof.export_chrome_trace(sys.argv[1])
""")


def _memprobe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memprobe", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("export")
    script, torch_trace, out = tmp / "train.py", tmp / "torch_trace.json", tmp / "rec"
    script.write_text(JOB)
    done = _memprobe(
        "record", "--no-report", "-o", str(out), "--", sys.executable, str(script), str(torch_trace)
    )
    assert done.returncode == 0, done.stderr
    return out, torch_trace


@needs("tensorboard")
def test_a_recording_exported_to_all_three_formats_reads_back(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as prom
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, _ = recorded
    summary = json.loads((out / "summary.json").read_text())["runs"][0]
    for fmt, path in (
        ("chrome-trace", tmp_path / "trace.json"),
        ("tensorboard", tmp_path / "tb"),
        ("openmetrics", tmp_path / "metrics.prom"),
    ):
        done = _memprobe("export", str(out), "--format", fmt, "-o", str(path))
        assert done.returncode == 0 and done.stdout.strip() == f"{fmt}: {path}", done.stderr

    doc = json.loads((tmp_path / "trace.json").read_text())
    check_trace_fields(doc)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"main", "worker 0", "worker 1"} <= names
    workers = {
        e["pid"] for e in doc["traceEvents"] if e["name"] == "process_name" and "worker" in e["args"]["name"]
    }
    uss = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "USS" and e["pid"] in workers]
    assert uss, "no USS reading of a worker in the trace"
    instants = [e["name"] for e in doc["traceEvents"] if e["ph"] == "i"]
    assert "workers started (generation 0, 2 workers)" in instants and "first memprobe.mark()" in instants

    run_dirs = list((tmp_path / "tb").iterdir())
    assert len(run_dirs) == 1
    acc = EventAccumulator(str(run_dirs[0]))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"total_pss_mb", "items_per_s"} <= tags
    for worker in ("worker 0", "worker 1"):  # exact readings, or the estimate where the budget gave none
        assert {f"uss_mb/{worker}", f"uss_est_mb/{worker}"} & tags, sorted(tags)
    assert max(e.value for e in acc.Scalars("total_pss_mb")) == pytest.approx(
        summary["total_pss_peak_mb"], abs=1e-3
    )
    assert all(e.value > 0 for e in acc.Scalars("items_per_s"))

    text = (tmp_path / "metrics.prom").read_text()
    for parse in (prom, om):
        value = {f.name: f.samples[0].value for f in parse(text) if f.samples}
        # summary.json rounds its MB to 3 decimals (core.summary.clean); the export writes the
        # analysis' figure whole: they agree to half of 0.001 MB.
        assert value["memprobe_total_pss_peak_bytes"] == pytest.approx(
            summary["total_pss_peak_mb"] * 2**20, abs=0.0005 * 2**20 + 1
        )
        assert value["memprobe_items_per_second"] == pytest.approx(summary["items_per_s"], rel=1e-3)


def test_the_trace_lines_up_with_the_jobs_torch_profiler_trace(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    """docs/export.md's rule: each trace's Unix time is baseTimeNanoseconds / 1000 + ts; the
    memprobe trace shifted onto torch's base holds the torch.profiler events of the same
    process (its pid) within the recording's counter readings."""
    out, torch_trace = recorded
    assert (
        _memprobe("export", str(out), "--format", "chrome-trace", "-o", str(tmp_path / "t.json")).returncode
        == 0
    )
    ours, theirs = json.loads((tmp_path / "t.json").read_text()), json.loads(torch_trace.read_text())
    shift = (ours["baseTimeNanoseconds"] - theirs["baseTimeNanoseconds"]) / 1000
    torch_pids = {e["pid"] for e in theirs["traceEvents"] if e.get("ph") == "X"}
    main = next(
        e["pid"] for e in ours["traceEvents"] if e["name"] == "process_name" and e["args"]["name"] == "main"
    )
    assert main in torch_pids  # the recorded job's process is the profiled one: one track group
    ops = [e["ts"] for e in theirs["traceEvents"] if e.get("ph") == "X" and e["pid"] == main]
    readings = [e["ts"] + shift for e in ours["traceEvents"] if e["ph"] == "C" and e["pid"] == main]
    assert ops and min(readings) <= min(ops) and max(ops) <= max(readings)
