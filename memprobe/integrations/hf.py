"""memprobe in a Hugging Face ``Trainer``: one line, ``Trainer(..., callbacks=[MemprobeCallback()])``.

From ``on_train_begin`` to ``on_train_end``, :class:`memprobe.integrations.watching.Watching`
records this process and its DataLoader workers; at each of the trainer's logs (every
``logging_steps``), once ``every_s`` (5 s) has passed since the last, its scalars
(``memprobe/worker0/uss_mb``, ``memprobe/total_pss_mb``, ``memprobe/growth_mb_per_min``,
``memprobe/growing`` ...: the list is in that module's doc) are added to the ``logs`` dict of
``on_log``, so every reporter the trainer has (``report_to``: TensorBoard, Weights & Biases ...)
logs them with the loss, and to ``state.log_history``. Reporters are called in the order of the
trainer's callbacks, which puts the user's after them: the callback moves itself to the front of
the trainer's callback list at its first event (found as the caller of its hook, transformers'
``CallbackHandler``), so the reporters see what it added. At ``on_train_end``: the last scalars
(one log of their own, through the same handler), the verdict in words printed once, and a
results folder that ``memprobe report DIR`` renders: by default
``<output_dir>/memprobe/record-<script>[-rank<N>]-<UTC time>``. Each DDP rank records its own
processes (``args.process_index``); the trainer's reporters log on the main process only.

This module imports transformers; ``import memprobe`` does not import it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler, TrainerControl, TrainerState
from transformers.training_args import TrainingArguments

from memprobe.core.verdict import VerdictSpec
from memprobe.integrations.watching import EVERY_S, Watching


class MemprobeCallback(TrainerCallback):
    """DataLoader workers' memory in the trainer's logs while it trains (see the module doc).

    ``out``: the results folder (new or empty); ``every_s``: the scalars at most this often;
    ``growth_threshold_mb``: the verdict's threshold (workers' mean USS growth); ``render``:
    report.html written at the end of training."""

    def __init__(
        self,
        out: str | Path | None = None,
        *,
        every_s: float = EVERY_S,
        growth_threshold_mb: float = VerdictSpec.growth_threshold_mb,
        render: bool = True,
    ) -> None:
        self.out = out
        self.every_s = every_s
        self.growth_threshold_mb = growth_threshold_mb
        self.render = render
        self.watch: Watching | None = None
        self.handler: CallbackHandler | None = None
        self._own_log = False

    def _first(self) -> None:
        """Move this callback to the front of the trainer's list (see the module doc): its caller
        is the handler's ``call_event``, iterating that list; the ones after it keep their places."""
        if self.handler is not None:
            return
        frame = sys._getframe(2)
        for _ in range(3):
            owner = frame.f_locals.get("self")
            if isinstance(owner, CallbackHandler):
                self.handler = owner
                break
            if frame.f_back is None:
                return
            frame = frame.f_back
        else:
            return
        if self in owner.callbacks and owner.callbacks[0] is not self:
            owner.callbacks.remove(self)
            owner.callbacks.insert(0, self)

    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._first()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._first()
        if self.watch is not None and self.watch.result is None:
            return
        self.watch = Watching(
            self.out,
            base=Path(args.output_dir or ".") / "memprobe",
            rank=args.process_index if args.world_size > 1 else None,
            every_s=self.every_s,
            growth_threshold_mb=self.growth_threshold_mb,
            render=self.render,
        ).start()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if self.watch is None or logs is None or self._own_log:
            return
        values = self.watch.due()
        if values:
            logs.update(values)
            last = state.log_history[-1] if state.log_history else None
            if last is not None and last.get("step") == state.global_step:
                last.update(values)  # the trainer appended a copy of the logs before calling on_log

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        w = self.watch
        if w is None or w.result is not None:
            return
        values = w.scalars()  # the last view's, before the sampler stops
        if values and self.handler is not None:
            self._own_log = True
            try:
                state.log_history.append({**values, "step": state.global_step})
                self.handler.on_log(args, state, control, dict(values))
            finally:
                self._own_log = False
        w.finish("ok")
