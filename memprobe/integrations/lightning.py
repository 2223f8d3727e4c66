"""memprobe in a Lightning ``Trainer``: one line, ``Trainer(callbacks=[MemprobeCallback()])``.

From ``setup`` of a fit to its end, :class:`memprobe.integrations.watching.Watching` records this
process and its DataLoader workers (train and validation, persistent or made again each epoch);
every ``every_s`` (5 s) at most, at the end of a training or validation batch, its scalars
(``memprobe/worker0/uss_mb``, ``memprobe/total_pss_mb``, ``memprobe/growth_mb_per_min``,
``memprobe/growing`` ...: the list is in that module's doc) go to every logger of the trainer
(``trainer.loggers``: TensorBoard, CSV, Weights & Biases ...) at the trainer's global step. At the
end of the fit (``on_fit_end``; ``on_exception`` and ``teardown`` where it failed), the last
scalars, the verdict in words (printed once, and as text to a logger that takes text: TensorBoard's
``add_text``) and a results folder that ``memprobe report DIR`` renders: by default
``<default_root_dir>/memprobe/record-<script>[-rank<N>]-<UTC time>``.

Under DDP each rank records its own process and workers into its own folder and prints its own
verdict; Lightning's own loggers write on rank 0 only (their ``log_metrics`` is
``rank_zero_only``), so their files hold rank 0's scalars.

This module imports Lightning (``lightning.pytorch``); ``import memprobe`` does not import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from memprobe.core.text import printable
from memprobe.core.verdict import VerdictSpec
from memprobe.integrations.watching import EVERY_S, Watching


class MemprobeCallback(pl.Callback):
    """DataLoader workers' memory in the trainer's loggers while it trains (see the module doc).

    ``out``: the results folder (new or empty); ``every_s``: the scalars at most this often;
    ``growth_threshold_mb``: the verdict's threshold (workers' mean USS growth); ``render``:
    report.html written at the end of the fit."""

    def __init__(
        self,
        out: str | Path | None = None,
        *,
        every_s: float = EVERY_S,
        growth_threshold_mb: float = VerdictSpec.growth_threshold_mb,
        render: bool = True,
    ) -> None:
        super().__init__()
        self.out = out
        self.every_s = every_s
        self.growth_threshold_mb = growth_threshold_mb
        self.render = render
        self.watch: Watching | None = None
        self._failed_logger = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or (self.watch is not None and self.watch.result is None):
            return
        self.watch = Watching(
            self.out,
            base=Path(trainer.default_root_dir) / "memprobe",
            rank=trainer.global_rank if trainer.world_size > 1 else None,
            every_s=self.every_s,
            growth_threshold_mb=self.growth_threshold_mb,
            render=self.render,
        ).start()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.watch is not None:
            self._log(trainer, self.watch.due())

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self.watch is not None and trainer.state.fn == "fit":
            self._log(trainer, self.watch.due())

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(trainer, "ok")

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._finish(
            trainer, "interrupted" if isinstance(exception, KeyboardInterrupt) else "failed", exception
        )

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._finish(trainer, "ok")

    def _finish(self, trainer: pl.Trainer, status: str, error: BaseException | None = None) -> None:
        w = self.watch
        if w is None or w.result is not None:
            return
        self._log(trainer, w.scalars())  # the last view's, before the sampler stops
        w.finish(status, error)
        words = w.verdict_words()
        for logger in trainer.loggers:
            add_text = getattr(getattr(logger, "experiment", None), "add_text", None)
            if callable(add_text):
                try:
                    add_text("memprobe/verdict", words, trainer.global_step)
                except Exception as exc:  # noqa: BLE001  (a logger's trouble never fails the fit)
                    w.log(f"memprobe: the verdict could not be logged: {printable(repr(exc))}")

    def _log(self, trainer: pl.Trainer, values: dict[str, float] | None) -> None:
        if not values or self._failed_logger:
            return
        try:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=trainer.global_step)
        except Exception as exc:  # noqa: BLE001  (a logger's trouble never fails the fit)
            self._failed_logger = True
            assert self.watch is not None
            self.watch.log(f"memprobe: a logger failed ({printable(repr(exc))}); memprobe logs no more to it")
