"""Wall-clock marks at the start of training and after every optimizer step of a transformers
Trainer (TRL's trainers included): the peer runners' s/step."""

from __future__ import annotations

import time

from transformers import TrainerCallback


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.marks: list[float] = []

    def on_train_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.marks = [time.perf_counter()]

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.marks.append(time.perf_counter())
