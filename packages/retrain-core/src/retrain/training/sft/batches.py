"""An SFT step's datums: the rows the schedule picks, tokenized once, cut to the token cap.
Shared by `trainer = "sft"` and the RL trainer's warmup on `sft_data_path`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from retrain.backends.protocol import Tokenizer
from retrain.config.schema import TrainConfig
from retrain.training.sft.contract import check_tokens
from retrain.training.sft.data import encode_all
from retrain.training.sft.order import BatchSchedule
from retrain.training.sft.records import SftData, SftDataError, sft_cap
from retrain.training.state import SftSchedule, TrainerState
from retrain.training.warmup import warmup_batch_size
from retrain.types import Datum


@dataclass(frozen=True)
class StepBatch:
    datums: list[Datum]
    truncated_rows: int  # rows longer than the cap
    truncated_tokens: int  # tokens the cap dropped

    @property
    def tokens(self) -> int:
        return sum(len(d.tokens) for d in self.datums)

    def metrics(self) -> dict[str, int]:
        return {"tokens": self.tokens, "sft/truncated_rows": self.truncated_rows,
                "sft/truncated_tokens": self.truncated_tokens}


def schedule_state(config: TrainConfig, state: TrainerState, rows: int) -> SftSchedule:
    """The schedule's settings, fixed at the first start: an unseeded run draws its order's
    seed once and keeps it in the trainer state, so its resume takes the same batches. A
    resume whose data or batch settings differ is refused."""
    t = config.training
    want = (rows, warmup_batch_size(config), t.sft_batch_order)
    if state.sft_schedule is None:
        seed = t.seed if t.seed >= 0 else int.from_bytes(os.urandom(4), "little")
        state.sft_schedule = SftSchedule(seed=seed, rows=rows, batch_size=want[1], order=want[2])
    plan = state.sft_schedule
    if (plan.rows, plan.batch_size, plan.order) != want:
        raise SftDataError(f"the run being resumed planned {plan.rows} SFT rows in batches of {plan.batch_size} "
                           f"({plan.order}); this config and data give {want[0]} rows, {want[1]} ({want[2]})",
                           hint="resume with the run's own config and data")
    return plan


class SftBatches:
    def __init__(self, config: TrainConfig, data: SftData, tokenizer: Tokenizer, plan: SftSchedule) -> None:
        t = config.training
        self.encoded = encode_all(data, tokenizer, dict(config.data.chat_template_kwargs))
        self.cap = sft_cap(config)
        if data.audits.get("token_audit") is not None:
            data.audits["token_audit"]["checked"] = check_tokens(config, [len(e.tokens) for e in self.encoded])
        lengths = tuple(min(len(e.tokens), self.cap) for e in self.encoded)
        self.schedule = BatchSchedule(lengths, plan.batch_size, plan.order, plan.seed, t.sft_length_bucket_size,
                                 t.sft_reshuffle_each_epoch)

    def step(self, step: int) -> StepBatch:
        datums, rows, tokens = [], 0, 0
        for i in self.schedule.batch(step):
            datum, dropped = self.encoded[i].datum(self.cap)
            datums.append(datum)
            rows += dropped > 0
            tokens += dropped
        return StepBatch(datums, rows, tokens)
