"""memprobe.integrations.hf: the callback comes before the trainer's reporters, so what it adds to
``logs`` reaches them (transformers' CallbackHandler, no Trainer, no sampler: a stand-in for the
recording gives the scalars)."""

from __future__ import annotations

import pytest
from suite_extras import why_missing

if why_missing("transformers"):
    pytest.skip(why_missing("transformers"), allow_module_level=True)

from transformers.trainer_callback import (
    CallbackHandler,
    DefaultFlowCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)

from memprobe.integrations.hf import MemprobeCallback


class Reporter(TrainerCallback):
    """What TensorBoardCallback does with logs: takes what is in them when it is called."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.seen.append(dict(logs or {}))


class Due:
    result = None

    def due(self) -> dict[str, float]:
        return {"memprobe/worker0/uss_mb": 61.5}


def test_the_callback_moves_before_the_reporters_and_they_get_its_scalars() -> None:
    reporter, ours = Reporter(), MemprobeCallback()
    # The trainer's order: its defaults and reporters, then the user's callbacks.
    handler = CallbackHandler([DefaultFlowCallback, reporter, ours], None, None, None, None)
    state, control = TrainerState(), TrainerControl()
    handler.on_init_end(None, state, control)
    assert handler.callbacks[0] is ours
    assert handler.callbacks[1:] == [c for c in handler.callbacks if c is not ours]
    ours.watch = Due()  # type: ignore[assignment]
    state.global_step = 5
    logs = {"loss": 0.25}
    state.log_history.append({**logs, "step": 5})  # as Trainer.log does before on_log
    handler.on_log(None, state, control, logs)
    assert reporter.seen == [{"loss": 0.25, "memprobe/worker0/uss_mb": 61.5}]
    assert state.log_history[-1] == {"loss": 0.25, "step": 5, "memprobe/worker0/uss_mb": 61.5}


def test_every_callback_still_runs_once_when_it_moves_during_the_first_event() -> None:
    calls: list[str] = []

    class Counting(TrainerCallback):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_init_end(self, args, state, control, **kwargs):
            calls.append(self.name)

    ours = MemprobeCallback()
    handler = CallbackHandler(
        [DefaultFlowCallback, Counting("a"), ours, Counting("b")], None, None, None, None
    )
    handler.on_init_end(None, TrainerState(), TrainerControl())
    assert calls == ["a", "b"]
