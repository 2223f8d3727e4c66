"""A tiny Lightning fit with memprobe's callback (tests/integration/test_trainer_callbacks.py):
``python lightning_fit.py DATASET DIR [SECONDS]``; DATASET ``lists`` (a list of dicts: workers copy
what they touch) or ``numpy`` (one array: they copy nothing); 2 forked DataLoader workers made again
each epoch, a validation DataLoader with 2 persistent ones; a TensorBoard logger in DIR/tb and
memprobe's folder DIR/memprobe."""

from __future__ import annotations

import gc
import sys

import lightning.pytorch as pl
import torch
from fit_data import Arrays, Lists
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader, Dataset

from memprobe.integrations.lightning import MemprobeCallback

N = 200_000


class Tiny(pl.LightningModule):
    def __init__(self, data: Dataset) -> None:
        super().__init__()
        self.data = data
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(
            self.data, batch_size=512, shuffle=True, num_workers=2, multiprocessing_context="fork"
        )

    def val_dataloader(self):
        return DataLoader(
            self.data,
            batch_size=2048,
            num_workers=2,
            persistent_workers=True,
            multiprocessing_context="fork",
        )


def main() -> None:
    kind, out = sys.argv[1], sys.argv[2]
    # The fit lasts SECONDS (8) on any machine, epochs of 150 steps until then: a fast machine's
    # fit would otherwise end before a process's growth rate is known (3 s of its points).
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    torch.set_num_threads(1)
    data = Lists(N) if kind == "lists" else Arrays(N)
    # The interpreter's own objects (torch's and Lightning's modules: ~130 MB here) out of the
    # workers' garbage collections, which would copy them into every worker whatever the
    # dataset (memprobe cure's gc.freeze): what remains is the dataset's own copy-on-access.
    gc.freeze()
    trainer = pl.Trainer(
        max_epochs=1000,
        max_time={"seconds": seconds},
        accelerator="cpu",
        devices=1,
        logger=TensorBoardLogger(out, name="tb", version=0),
        callbacks=[MemprobeCallback(f"{out}/memprobe", every_s=1.0, render=False)],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_train_batches=150,
        limit_val_batches=5,
        num_sanity_val_steps=0,
    )
    trainer.fit(Tiny(data))


if __name__ == "__main__":
    main()
