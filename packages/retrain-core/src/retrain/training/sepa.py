"""The SEPA controller: the pooling strength lambda of `gtpo_sepa*` (and the Delight anneal).

lambda is resolved once per step, before sampling, from the state left by earlier steps; the
step's correct rate and (auto schedule) execution-token variances update the state after
its groups are computed, so they act from the next step on (a one-step lag by design).

- Gate: lambda is 0 until a step's correct rate reaches `correct_rate_gate`; then it opens
  for good.
- linear: 0 up to `delay_steps`, then (step - delay) / steps, capped at 1.
- auto: 1 - min(EMA / (var_0 * threshold), 1), positive once the execution-surprisal
  variance EMA falls below threshold x its value at the end of warmup; the step's lambda is
  max(auto, linear). The EMA is updated once per completion, so `warmup` counts completions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np
from numpy.typing import ArrayLike

from retrain.config.schema import TrainConfig
from retrain.training.state import SepaState

SCHEDULES = ("linear", "auto")
_MAX_VALUE = math.sqrt(float(np.finfo(np.float64).max))


class SepaController:
    def __init__(
        self,
        steps: int = 500,
        schedule: str = "linear",
        delay_steps: int = 50,
        correct_rate_gate: float = 0.1,
        *,
        ema_decay: float = 0.99,
        var_threshold: float = 0.2,
        warmup: int = 50,
        eps: float = 1e-8,
    ) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"[sepa] schedule must be linear or auto, got {schedule!r}")
        if not 0.0 <= ema_decay < 1.0:
            raise ValueError(f"SEPA ema_decay must be in [0, 1), got {ema_decay}")
        self.steps = int(steps)
        self.schedule = schedule
        self.delay_steps = int(delay_steps)
        self.correct_rate_gate = float(correct_rate_gate)
        self.ema_decay = float(ema_decay)
        self.var_threshold = float(var_threshold)
        self.warmup = int(warmup)
        self.eps = float(eps)
        self.var_ema: float | None = None
        self.var_0: float | None = None
        self.warmup_seen = 0
        self.gate_open = self.correct_rate_gate <= 0

    @classmethod
    def from_config(cls, config: TrainConfig) -> SepaController:
        s = config.sepa
        return cls(s.steps, s.schedule, s.delay_steps, s.correct_rate_gate)

    def enabled(self) -> bool:
        return self.steps > 0 or self.schedule == "auto"

    # ------------------------------------------------------------------ lambda

    def linear_lambda(self, step: int) -> float:
        if self.steps <= 0 or step <= self.delay_steps:
            return 0.0
        return min((step - self.delay_steps) / self.steps, 1.0)

    def auto_lambda(self) -> float:
        if self.var_0 is None or self.var_ema is None:
            return 0.0
        ratio = max(0.0, self.var_ema / max(self.var_0, self.eps))
        return 1.0 - min(ratio / max(self.var_threshold, self.eps), 1.0)

    def resolve_lambda(self, step: int) -> float:
        """lambda for global step `step` (0-based, SFT warmup steps included)."""
        if not self.gate_open:
            return 0.0
        lam = self.linear_lambda(step)
        if self.schedule == "auto":
            lam = max(self.auto_lambda(), lam)
        return lam

    # ------------------------------------------------------------------ observations

    def observe_correct_rate(self, rate: float) -> None:
        """The step's correct rate over all its completions; opens the (sticky) gate."""
        if math.isfinite(rate) and rate >= self.correct_rate_gate:
            self.gate_open = True

    def update_auto_state(self, exec_values: ArrayLike) -> None:
        """One completion's execution-token surprisals (-logprob, mask 0, unclamped)."""
        if self.schedule != "auto":
            return
        v = np.asarray(exec_values, dtype=np.float64).reshape(-1)
        v = v[np.isfinite(v) & (v >= 0) & (v <= _MAX_VALUE)]
        if v.size == 0:
            return
        var = float(v.var())
        if self.var_ema is None:
            self.var_ema = var
        else:
            self.var_ema = self.ema_decay * self.var_ema + (1.0 - self.ema_decay) * var
        if self.var_0 is None:
            self.warmup_seen += 1
            if self.warmup_seen >= self.warmup:
                self.var_0 = max(self.var_ema, self.eps)

    def observe_completions(
        self, logprobs: Sequence[ArrayLike], planning_masks: Sequence[ArrayLike] | None = None
    ) -> None:
        """`update_auto_state` for each completion of a step (a no-op on the linear schedule)."""
        if self.schedule != "auto":
            return
        for i, lp in enumerate(logprobs):
            s = -np.asarray(lp, dtype=np.float64).reshape(-1)
            if planning_masks is not None:
                s = s[np.asarray(planning_masks[i]).reshape(-1) <= 0]
            self.update_auto_state(s)

    def metrics(self, step: int) -> dict[str, float]:
        return {"sepa_lambda": self.resolve_lambda(step), "sepa_gate_open": float(self.gate_open)}

    # ------------------------------------------------------------------ checkpoint

    def state(self) -> SepaState:
        return SepaState(
            sepa_steps=self.steps,
            sepa_schedule=self.schedule,
            sepa_delay_steps=self.delay_steps,
            sepa_correct_rate_gate=self.correct_rate_gate,
            sepa_ema_decay=self.ema_decay,
            sepa_var_threshold=self.var_threshold,
            sepa_warmup=self.warmup,
            eps=self.eps,
            var_ema=self.var_ema,
            var_0=self.var_0,
            warmup_seen=self.warmup_seen,
            gate_open=self.gate_open,
        )

    def load_state(self, state: SepaState) -> list[str]:
        """Restore the dynamic state; returns a note for each setting that differs from the
        checkpoint (the current config wins, so the run may not match an uninterrupted one)."""
        self.var_ema, self.var_0 = state.var_ema, state.var_0
        self.warmup_seen, self.gate_open = state.warmup_seen, state.gate_open
        mine = msgspec.structs.asdict(self.state())
        theirs = msgspec.structs.asdict(state)
        return [f"{key}: checkpoint {theirs[key]!r}, config {value!r}"
                for key, value in mine.items() if key.startswith("sepa_") and theirs[key] != value]
