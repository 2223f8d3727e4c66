"""memprobe's trainer callbacks with the real libraries: a Lightning fit and a Hugging Face Trainer
run (tests/integration/trainers/), each in a process of its own with 2 forked DataLoader workers;
what they logged is read back as the user's dashboards read it (TensorBoard's event reader, the
trainer's log history), and the results folder as ``memprobe report`` reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from suite_extras import needs

# Found, not imported: the fits import them in their own processes (importing both here took
# the pytest process more than a minute of the loaded 2-core machine).
pytestmark = [pytest.mark.slow, needs("lightning", "transformers", "tensorboard")]

HERE = Path(__file__).parent / "trainers"
BIN = Path(sys.executable).parent


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _scalars(folder: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _workers_uss(scalars: dict[str, list[float]], prefix: str = "") -> dict[str, list[float]]:
    return {
        tag: values
        for tag, values in scalars.items()
        if tag.startswith(f"{prefix}memprobe/worker") and tag.endswith("/uss_mb")
    }


def _verdict_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("memprobe: results: ")]


def test_lightning_fit_logs_list_workers_growth_to_tensorboard_and_a_folder_report_renders(
    tmp_path: Path,
) -> None:
    done = _run("lightning_fit.py", "lists", str(tmp_path))
    scalars = _scalars(tmp_path / "tb" / "version_0")
    workers = _workers_uss(scalars)
    assert {"memprobe/worker0/uss_mb", "memprobe/worker1/uss_mb"} <= set(workers), sorted(scalars)
    # A list of dicts' workers copy what they touch: a forked worker starts with no page of its
    # own, and its USS reaches tens of MB as it loads (a numpy array's stay under 30 MB, below).
    assert max(max(v) for v in workers.values()) >= 40, workers
    assert max(scalars["memprobe/workers_grown_mb"]) >= 20, scalars["memprobe/workers_grown_mb"]
    assert max(scalars["memprobe/total_pss_mb"]) > 0
    assert "memprobe/growth_mb_per_min" in scalars and "memprobe/growing" in scalars
    # The verdict in words: said once, and in the TensorBoard run as text.
    assert len(_verdict_lines(done)) == 1, done.stderr[-2000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / "version_0"))
    acc.Reload()
    assert any(t.startswith("memprobe/verdict") for t in acc.Tags()["tensors"])
    folder = tmp_path / "memprobe"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["runs"][0]["verdict"] == "growing", summary["runs"][0]
    report = subprocess.run(
        [str(BIN / "memprobe"), "report", str(folder)], capture_output=True, text=True, timeout=180
    )
    assert report.returncode == 0, report.stderr[-2000:]
    assert (folder / "report.html").stat().st_size > 10_000


def test_lightning_fit_with_a_numpy_dataset_logs_flat_workers(tmp_path: Path) -> None:
    _run("lightning_fit.py", "numpy", str(tmp_path))
    scalars = _scalars(tmp_path / "tb" / "version_0")
    workers = _workers_uss(scalars)
    assert {"memprobe/worker0/uss_mb", "memprobe/worker1/uss_mb"} <= set(workers), sorted(scalars)
    # One array: nothing of the dataset is copied (gc.freeze keeps the interpreter's objects out).
    assert max(max(v) for v in workers.values()) < 30, workers
    assert set(scalars["memprobe/growing"]) == {0.0}
    summary = json.loads((tmp_path / "memprobe" / "summary.json").read_text())
    assert summary["runs"][0]["verdict"] == "flat", summary["runs"][0]


def test_hugging_face_trainer_logs_carry_the_scalars_to_its_reporters(tmp_path: Path) -> None:
    done = _run("hf_fit.py", str(tmp_path))
    history = json.loads((tmp_path / "log_history.json").read_text())
    # On the trainer's own logs, beside its loss (the callback ran before the reporters).
    with_loss = [h for h in history if "loss" in h and "memprobe/worker0/uss_mb" in h]
    assert with_loss, history[:5]
    assert all("memprobe/total_pss_mb" in h and "memprobe/growing" in h for h in with_loss)
    # TensorBoard (the reporter) got them: transformers prefixes train/.
    scalars = _scalars(tmp_path / "tb")
    workers = _workers_uss(scalars, "train/")
    assert {"train/memprobe/worker0/uss_mb", "train/memprobe/worker1/uss_mb"} <= set(workers), sorted(scalars)
    assert "train/loss" in scalars
    assert len(_verdict_lines(done)) == 1, done.stderr[-2000:]
    assert (tmp_path / "memprobe" / "summary.json").exists()


def test_a_plain_loop_in_memprobe_watching_gets_the_scalars_and_a_folder(tmp_path: Path) -> None:
    done = _run("plain_loop.py", str(tmp_path))
    lines = [json.loads(x) for x in (tmp_path / "scalars.jsonl").read_text().splitlines()]
    assert len(lines) >= 2, lines
    uss = [
        v
        for line in lines
        for k, v in line.items()
        if k.startswith("memprobe/worker") and k.endswith("/uss_mb")
    ]
    assert uss and max(uss) >= 40, lines
    assert any("memprobe/total_pss_mb" in line for line in lines)
    assert len(_verdict_lines(done)) == 1, done.stderr[-2000:]
    summary = json.loads((tmp_path / "memprobe" / "summary.json").read_text())
    assert summary["kind"] == "record" and summary["runs"][0]["verdict"] == "growing", summary["runs"][0]


def test_importing_memprobe_and_its_integrations_package_imports_no_trainer() -> None:
    code = (
        "import sys, memprobe, memprobe.integrations, memprobe.integrations.watching; memprobe.watching; "
        "bad = [m for m in ('lightning', 'transformers', 'tensorboard') if m in sys.modules]; "
        "assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_lightning_ddp_each_rank_logs_its_own_workers_and_writes_its_own_folder(tmp_path: Path) -> None:
    """Lightning's ddp on one machine starts rank 1 as a child of rank 0: rank 0's scalars
    count its own process and workers only, and each rank says its own verdict."""
    done = _run("lightning_ddp.py", str(tmp_path))
    for rank in (0, 1):
        lines = [json.loads(x) for x in (tmp_path / "logs" / f"rank{rank}.jsonl").read_text().splitlines()]
        memprobe_lines = [x for x in lines if "memprobe/workers" in x]
        assert memprobe_lines, lines[:3]
        # Two workers of its own at most, never the other rank's two besides.
        assert max(x["memprobe/workers"] for x in memprobe_lines) == 2, memprobe_lines
        assert not any(k.startswith("memprobe/rank") for x in memprobe_lines for k in x)
        summary = json.loads((tmp_path / f"memprobe-rank{rank}" / "summary.json").read_text())
        assert summary["runs"][0]["verdict"] in ("flat", "growing")
    assert len(_verdict_lines(done)) == 2, done.stderr[-3000:]


def test_a_loop_that_raises_inside_memprobe_watching_keeps_its_exception_and_its_folder(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "plain_loop.py"), str(tmp_path), "raise"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 1 and "RuntimeError: the training loop failed" in done.stderr, done.stderr[
        -2000:
    ]
    assert len(_verdict_lines(done)) == 1, done.stderr[-2000:]
    summary = json.loads((tmp_path / "memprobe" / "summary.json").read_text())
    assert summary["runs"][0]["status"] == "failed", summary["runs"][0]


def test_a_hugging_face_run_that_raises_keeps_what_was_sampled_as_interrupted(tmp_path: Path) -> None:
    """transformers has no hook for an exception: the folder is saved as the interpreter ends."""
    done = subprocess.run(
        [sys.executable, str(HERE / "hf_fit.py"), str(tmp_path), "raise"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 1 and "RuntimeError: the model failed" in done.stderr, done.stderr[-2000:]
    assert len(_verdict_lines(done)) == 1, done.stderr[-2000:]
    summary = json.loads((tmp_path / "memprobe" / "summary.json").read_text())
    assert summary["runs"][0]["status"] == "interrupted", summary["runs"][0]


def test_memprobe_lightning_and_memprobe_hf_are_the_callbacks_modules() -> None:
    code = (
        "import memprobe; from memprobe.integrations import hf, lightning; "
        "assert memprobe.lightning is lightning and memprobe.hf is hf; "
        "assert memprobe.hf.MemprobeCallback is hf.MemprobeCallback"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
