"""The Lightning callback's cost: a fit's steps/s with ``MemprobeCallback`` ÷ without, interleaved.

Each fit runs in a fresh process (the same script, ``--child on|off``): a list of 200,000 dicts,
2 forked DataLoader workers made again each epoch, a tiny model, ``EPOCHS`` x ``BATCHES`` steps, a
CSV logger; steps/s is the fit's steps over ``trainer.fit``'s wall time (imports and the dataset's
building left out). The rounds alternate which goes first, so a machine whose load changes
slowly weighs on both alike. On a shared machine the wall-time ratio is noisier than the cost, so
each fit also reports the main process's CPU seconds per 100 steps (all its threads, workers
excluded), and a fit with the callback the CPU of memprobe's own threads (``memprobe-sampler``,
``memprobe-poll``, read from /proc just before the callback's end) as a share of one core over
the fit.

    python benchmarks/bench_trainer_callback.py [ROUNDS]      # prints each round and the ratios
    python benchmarks/bench_trainer_callback.py --child on|off|imports DIR   # one fit, its figures
                                                   # (imports: the callback's imports, no callback)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

EPOCHS, BATCHES = 4, 500


def child(on: bool, out: str, imports_only: bool = False) -> None:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader, Dataset

    class Lists(Dataset):
        def __init__(self, n: int) -> None:
            self.rows = [{"x": [float(i % 7)] * 8, "y": float(i % 2), "id": f"row-{i}"} for i in range(n)]

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int):
            r = self.rows[i]
            return torch.tensor(r["x"]), torch.tensor(r["y"])

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    threads_cpu: dict[str, float] = {}

    class ReadThreads(pl.Callback):
        """Placed before memprobe's callback: its threads' CPU just before they end."""

        def on_fit_end(self, trainer, pl_module) -> None:
            ticks = os.sysconf("SC_CLK_TCK")
            for t in threading.enumerate():
                if t.name.startswith("memprobe-") and t.native_id is not None:
                    with open(f"/proc/self/task/{t.native_id}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    threads_cpu[t.name] = (int(fields[11]) + int(fields[12])) / ticks

    steady: dict[str, float] = {}

    class Steady(pl.Callback):
        """The training steps alone, from the end of the first to the end of the last: memprobe's
        start (its imports) and its finish (the folder analysed) left out."""

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            now, cpu = time.perf_counter(), time.process_time()
            steady.setdefault("t0", now)
            steady.setdefault("cpu0", cpu)
            steady.setdefault("step0", trainer.global_step)
            steady.update(t1=now, cpu1=cpu, step1=trainer.global_step)

    torch.set_num_threads(1)
    data = Lists(200_000)
    callbacks: list = [ReadThreads(), Steady()]
    if imports_only:  # what the callback imports when it starts, and no callback
        import memprobe.live.view
        import memprobe.record.recording  # noqa: F401
    if on:
        from memprobe.integrations.lightning import MemprobeCallback

        callbacks.append(MemprobeCallback(f"{out}/memprobe", render=False))
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        limit_train_batches=BATCHES,
        accelerator="cpu",
        devices=1,
        logger=CSVLogger(out),
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    loader = DataLoader(data, batch_size=256, shuffle=True, num_workers=2, multiprocessing_context="fork")
    t, cpu = time.perf_counter(), time.process_time()
    trainer.fit(Tiny(), loader)
    took, cpu = time.perf_counter() - t, time.process_time() - cpu
    steps = trainer.global_step
    print(
        json.dumps(
            {
                "on": on,
                "steps": steps,
                "s": took,
                "steps_per_s": steps / took,
                "cpu_per_100_steps": 100 * cpu / steps,
                "memprobe_threads_share": sum(threads_cpu.values()) / took,
                "threads": threads_cpu,
                "steady_steps_per_s": (steady["step1"] - steady["step0"]) / (steady["t1"] - steady["t0"]),
                "steady_cpu_per_100_steps": 100
                * (steady["cpu1"] - steady["cpu0"])
                / (steady["step1"] - steady["step0"]),
            }
        )
    )


def main(rounds: int) -> None:
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    shares: list[float] = []
    steady_ratios: list[float] = []
    steady_cpu: list[float] = []
    for r in range(rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        got = {}
        for on in order:
            with tempfile.TemporaryDirectory() as out:
                done = subprocess.run(
                    [sys.executable, __file__, "--child", "on" if on else "off", out],
                    capture_output=True,
                    text=True,
                    check=True,
                )
            got[on] = json.loads(done.stdout.strip().splitlines()[-1])
        ratio = got[True]["steps_per_s"] / got[False]["steps_per_s"]
        ratios.append(ratio)
        steady_ratios.append(got[True]["steady_steps_per_s"] / got[False]["steady_steps_per_s"])
        steady_cpu.append(got[True]["steady_cpu_per_100_steps"] / got[False]["steady_cpu_per_100_steps"])
        cpu_ratios.append(got[True]["cpu_per_100_steps"] / got[False]["cpu_per_100_steps"])
        shares.append(got[True]["memprobe_threads_share"])
        print(
            f"round {r + 1}: with {got[True]['steps_per_s']:.1f} steps/s ({got[True]['s']:.1f} s), "
            f"without {got[False]['steps_per_s']:.1f} steps/s ({got[False]['s']:.1f} s), ratio {ratio:.3f}; "
            f"main CPU per 100 steps {got[True]['cpu_per_100_steps']:.3f} s with, "
            f"{got[False]['cpu_per_100_steps']:.3f} s without; memprobe's threads "
            f"{100 * got[True]['memprobe_threads_share']:.2f} % of a core {got[True]['threads']}; "
            f"steps alone: {got[True]['steady_steps_per_s']:.1f} / {got[False]['steady_steps_per_s']:.1f} steps/s, "
            f"main CPU per 100 steps {got[True]['steady_cpu_per_100_steps']:.3f} / "
            f"{got[False]['steady_cpu_per_100_steps']:.3f} s",
            flush=True,
        )
    for what, values in (
        ("steps/s with/without", ratios),
        ("main CPU per step with/without", cpu_ratios),
        ("memprobe's threads, share of a core", shares),
        ("training steps alone: steps/s with/without", steady_ratios),
        ("training steps alone: main CPU per step with/without", steady_cpu),
    ):
        print(
            f"{what} over {rounds} rounds: median {statistics.median(values):.4f}, "
            f"min {min(values):.4f}, max {max(values):.4f}"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2] == "on", sys.argv[3], imports_only=sys.argv[2] == "imports")
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
