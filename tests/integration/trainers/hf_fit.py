"""A tiny Hugging Face Trainer run with memprobe's callback (tests/integration/test_trainer_callbacks.py):
``python hf_fit.py DIR [raise]``: a model built here (no weights fetched) that returns its loss
(``raise``: raises at its 150th step), a list of dicts for a dataset, 2 forked DataLoader workers, TensorBoard as the reporter (DIR/tb); the
trainer's log history is written to DIR/log_history.json."""

from __future__ import annotations

import json
import os
import sys

import torch
from fit_data import Lists
from transformers import Trainer, TrainingArguments

from memprobe.integrations.hf import MemprobeCallback

N = 100_000


class Items(Lists):
    """The list of dicts as the trainer's collator takes an item: a dict of tensors."""

    def __getitem__(self, i: int):
        x, y = super().__getitem__(i)
        return {"x": x, "labels": y}


class Tiny(torch.nn.Module):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.fail, self.calls = fail, 0

    def forward(self, x, labels=None):
        self.calls += 1
        if self.fail and self.calls == 150:
            raise RuntimeError("the model failed")
        out = self.layer(x).squeeze(1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def main() -> None:
    out = sys.argv[1]
    os.environ["TENSORBOARD_LOGGING_DIR"] = f"{out}/tb"  # transformers 5: no logging_dir argument
    torch.set_num_threads(1)
    args = TrainingArguments(
        output_dir=out,
        max_steps=400,
        per_device_train_batch_size=512,
        learning_rate=1e-3,
        logging_steps=5,
        report_to=["tensorboard"],
        dataloader_num_workers=2,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=Tiny(fail=sys.argv[2:] == ["raise"]),
        args=args,
        train_dataset=Items(N),
        callbacks=[MemprobeCallback(f"{out}/memprobe", every_s=1.0, render=False)],
    )
    trainer.train()
    with open(f"{out}/log_history.json", "w") as f:
        json.dump(trainer.state.log_history, f)


if __name__ == "__main__":
    main()
