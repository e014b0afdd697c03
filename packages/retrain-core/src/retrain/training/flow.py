"""The flow of a run: the algorithm components resolved from the config, once, before any
model loads, so a bad plugin or parameter fails in seconds rather than after model loading."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrain.advantages.pipeline import AdvantagePipeline, build_pipeline
from retrain.config.schema import TrainConfig
from retrain.training.backpressure import Backpressure, build_backpressure
from retrain.training.sepa import SepaController
from retrain.types import SamplingParams


@dataclass
class Flow:
    pipeline: AdvantagePipeline
    sepa: SepaController
    backpressure: Backpressure
    reward: Any  # retrain.rewards.create.RewardScorer
    detector: Any | None  # planning detector, built only when the pipeline needs masks
    sampling: SamplingParams

    @property
    def condition(self) -> str:
        return self.pipeline.condition

    def close(self) -> None:
        close = getattr(self.reward, "close", None)
        if callable(close):
            close()


def build_flow(config: TrainConfig) -> Flow:
    from retrain.planning.create import build_detector
    from retrain.rewards.create import build_reward

    pipeline = build_pipeline(config)
    detector = build_detector(config) if pipeline.needs_planning else None
    t = config.training
    sampling = SamplingParams(max_tokens=t.max_tokens, temperature=t.temperature, top_p=t.top_p, top_k=t.top_k,
                              min_p=t.min_p, want_entropy=pipeline.needs_entropies)
    return Flow(pipeline=pipeline, sepa=SepaController.from_config(config), backpressure=build_backpressure(config),
                reward=build_reward(config), detector=detector, sampling=sampling)
