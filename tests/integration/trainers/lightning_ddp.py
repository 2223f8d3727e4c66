"""A Lightning DDP fit on CPU (2 ranks, gloo) with memprobe's callback
(tests/integration/test_trainer_callbacks.py): ``python lightning_ddp.py DIR``. Lightning's ``ddp``
starts rank 1 as a child of rank 0, running this script again; each rank has 2 forked DataLoader
workers, kept through both epochs (``persistent_workers``: without it, the second epoch's workers
may start before the first epoch's have exited, and one sample saw a rank's 4 workers at once,
which the test would take for the other rank's), and logs its scalars with a logger of its own
(DIR/logs/rank<N>.jsonl), its memprobe folder in DIR/memprobe-rank<N>."""

from __future__ import annotations

import json
import os
import sys

import lightning.pytorch as pl
import torch
from fit_data import Lists
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader

from memprobe.integrations.lightning import MemprobeCallback


class EveryRank(Logger):
    """A logger that writes on every rank (Lightning's own write on rank 0 only): one JSON line
    per call to ``<root>/rank<N>.jsonl``."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root

    @property
    def name(self) -> str:
        return "every-rank"

    @property
    def version(self) -> str:
        return "0"

    def log_metrics(self, metrics, step=None) -> None:
        os.makedirs(self.root, exist_ok=True)
        with open(f"{self.root}/rank{os.environ.get('LOCAL_RANK', '0')}.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "pid": os.getpid(), **metrics}) + "\n")

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(
            Lists(100_000),
            batch_size=256,
            shuffle=True,
            num_workers=2,
            multiprocessing_context="fork",
            persistent_workers=True,
        )


def main() -> None:
    out = sys.argv[1]
    torch.set_num_threads(1)
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    trainer = pl.Trainer(
        max_epochs=2,
        limit_train_batches=120,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=EveryRank(f"{out}/logs"),
        callbacks=[MemprobeCallback(f"{out}/memprobe-rank{rank}", every_s=1.0, render=False)],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Tiny())


if __name__ == "__main__":
    main()
