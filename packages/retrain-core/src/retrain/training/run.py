"""What an RL run holds while it trains: shared by the trainers that run RL steps (the RL
loop, retrain.training.trainers.rl; TTT-Discover, retrain.training.trainers.discover) and the step
recorder (retrain.training.record)."""

from __future__ import annotations

from dataclasses import dataclass

from retrain.backends.catalog import BackendCapabilities
from retrain.backends.protocol import TrainBackend
from retrain.evaluation.evaluate import Problem
from retrain.evaluation.settings import EvalPlan
from retrain.training.flow import Flow
from retrain.training.log import RunLog
from retrain.training.producer import RolloutProducer
from retrain.training.prompts import PromptCursor
from retrain.training.reward_faults import RewardFaults
from retrain.training.sft.records import SftData
from retrain.training.state import TrainerState


@dataclass(frozen=True)
class HeldOut:
    plan: EvalPlan
    problems: list[Problem]


@dataclass
class Run:
    """What a run holds while it trains; `sizes` is the (batch, group) size back-pressure set;
    `held_out` is None when the run does not evaluate."""

    flow: Flow
    log: RunLog
    state: TrainerState
    backend: TrainBackend
    cursor: PromptCursor
    caps: BackendCapabilities
    sizes: tuple[int, int]
    producer: RolloutProducer
    held_out: HeldOut | None = None
    sft_data: SftData | None = None  # the warmup's rows when sft_data_path is set
    faults: RewardFaults | None = None
