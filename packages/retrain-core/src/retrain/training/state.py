"""`trainer_state.json`: where a run stands, written atomically after each checkpoint.

`step` is the last completed RL step (0-based; -1 before the first); `checkpoint_name` is
`final` once the run finished. The reference's six integer fields keep their names so
`retrain status` and the reference's readers understand our run directories; the
controllers' states are typed structs whose JSON keys are the reference's too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from retrain.errors import UserError
from retrain.io.atomic import write_json_atomic
from retrain.io.layout import TRAINER_STATE
from retrain.training.idle import IdleSteps

if TYPE_CHECKING:
    from retrain.rollout.group import FillReport

STATE_FILE = TRAINER_STATE


class SepaState(msgspec.Struct, kw_only=True):
    """The SEPA controller's settings (to notice a changed config) and its dynamic state."""

    sepa_steps: int = 500
    sepa_schedule: str = "linear"
    sepa_delay_steps: int = 50
    sepa_correct_rate_gate: float = 0.1
    sepa_ema_decay: float = 0.99
    sepa_var_threshold: float = 0.2
    sepa_warmup: int = 50
    eps: float = 1e-8
    var_ema: float | None = None
    var_0: float | None = None
    warmup_seen: int = 0
    gate_open: bool = False

    def __post_init__(self) -> None:
        if self.warmup_seen < 0:
            raise ValueError(f"SEPA state 'warmup_seen' must be an integer >= 0, got {self.warmup_seen}")
        for key in ("var_ema", "var_0"):
            value = getattr(self, key)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"SEPA state {key!r} must be a finite number, got {value!r}")


class NoopBackpressureState(msgspec.Struct, tag="noop", tag_field="kind"):
    """Disabled back-pressure keeps nothing."""


class UslBackpressureState(msgspec.Struct, tag="usl", tag_field="kind", kw_only=True):
    step_count: int
    last_batch: int
    last_group: int
    last_throughput: float
    ema: float | None
    window: list[tuple[float, float]]  # (concurrency p, throughput x), oldest first
    lam: float
    sigma: float
    kappa: float
    p_star: float
    fitted: bool
    regime: str


BackpressureState = NoopBackpressureState | UslBackpressureState


class RewardWindow(msgspec.Struct, kw_only=True):
    """The mean rewards of the first and the last `size` RL steps, for the end-of-run summary;
    kept in the state so a resumed run's summary covers the whole run."""

    size: int = 10
    first: list[float] = msgspec.field(default_factory=list)
    last: list[float] = msgspec.field(default_factory=list)
    steps: int = 0

    def add(self, reward: float) -> None:
        self.steps += 1
        if len(self.first) < self.size:
            self.first.append(reward)
        self.last = [*self.last, reward][-self.size:]

    def halves(self) -> tuple[int, float, float] | None:
        """(n, mean of the first n, mean of the last n) with n at most `size` and at most half
        the steps, so the two windows never share a step; None under two steps."""
        n = min(len(self.first), len(self.last), self.steps // 2)
        if n == 0:
            return None
        return n, sum(self.first[:n]) / n, sum(self.last[-n:]) / n

    def mean(self) -> float | None:
        """The mean over every step, for a run too short for two windows (first holds them all)."""
        return sum(self.first) / len(self.first) if self.first and self.steps <= self.size else None


class DynamicSamplingTotals(msgspec.Struct, kw_only=True):
    """Dynamic sampling over the RL steps done (retrain.training.dapo.dynamic), for the
    end-of-run summary; kept in the state so a resumed run's summary covers the whole run."""

    groups: int = 0
    dropped: int = 0
    surplus: int = 0
    extra_rounds: int = 0
    short_steps: int = 0  # steps whose batch was still short after the last round

    def add(self, fill: FillReport) -> None:
        self.groups += fill.sampled
        self.dropped += fill.dropped
        self.surplus += fill.surplus
        self.extra_rounds += fill.rounds
        self.short_steps += int(fill.short)

    def summary(self) -> dict[str, int]:
        return {"groups": self.groups, "dropped": self.dropped, "surplus": self.surplus,
                "extra_rounds": self.extra_rounds, "short_steps": self.short_steps}


class SftSchedule(msgspec.Struct, kw_only=True):
    """What fixes a standalone SFT run's batches (retrain.training.sft.order), recorded at its
    first start; `seed` is drawn then when `[training] seed` is -1."""

    seed: int
    rows: int
    batch_size: int
    order: str


class TrainerState(msgspec.Struct, kw_only=True):
    step: int = -1
    example_idx: int = 0
    total_correct: int = 0
    total_completions: int = 0
    current_batch_size: int = 0
    current_group_size: int = 0
    checkpoint_name: str = ""
    checkpoint_path: str = ""
    phase: str = "rl"  # sft (warmup) | rl
    sft_step: int = -1  # last completed warmup step
    resume_mode: str = ""
    resume_warning: str = ""
    sepa: SepaState = msgspec.field(default_factory=SepaState)
    backpressure: BackpressureState = msgspec.field(default_factory=NoopBackpressureState)
    environment: dict[str, Any] = msgspec.field(default_factory=dict)  # the environment's own (TL-GRPO baseline)
    rewards: RewardWindow = msgspec.field(default_factory=RewardWindow)
    dynamic_sampling: DynamicSamplingTotals = msgspec.field(default_factory=DynamicSamplingTotals)
    idle: IdleSteps = msgspec.field(default_factory=IdleSteps)  # RL steps that trained nothing, and why
    wall_time_s: float = 0.0
    sft_schedule: SftSchedule | None = None
    sft_losses: RewardWindow = msgspec.field(default_factory=RewardWindow)  # trainer = sft: first/last losses

    @property
    def finished(self) -> bool:
        return self.checkpoint_name == "final"

    @property
    def running_correct_rate(self) -> float:
        return self.total_correct / max(self.total_completions, 1)

    def count(self, correct: int, total: int) -> None:
        self.total_correct += correct
        self.total_completions += total

    def rl_step_done(self, step: int, example_idx: int, sizes: tuple[int, int], mean_reward: float) -> None:
        """RL step `step` is recorded: where the data cursor and back-pressure stand now."""
        self.step, self.example_idx = step, example_idx
        self.current_batch_size, self.current_group_size = sizes
        self.rewards.add(mean_reward)


class StateError(UserError, ValueError):
    """A trainer_state.json that cannot be used to resume."""


def write_state(log_dir: str | Path, state: TrainerState) -> None:
    write_json_atomic(Path(log_dir) / STATE_FILE, msgspec.to_builtins(state))


def read_state(log_dir: str | Path) -> TrainerState:
    path = Path(log_dir) / STATE_FILE
    if not path.is_file():
        raise StateError(f"{path} not found: nothing to resume from")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StateError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise StateError(f"{path} does not hold an object")
    known = {f.encode_name for f in msgspec.inspect.type_info(TrainerState).fields}  # type: ignore[attr-defined]
    # empty controller objects are what a state written before its first checkpoint holds
    kept = {k: v for k, v in raw.items() if k in known and v != {}}
    try:
        return msgspec.convert(kept, TrainerState, strict=False)
    except msgspec.ValidationError as exc:
        raise StateError(f"{path}: {exc}") from None
