"""The flow of a run: the algorithm components resolved from the config, once, before any
model loads, so a bad plugin or parameter fails in seconds rather than after model loading."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrain.advantages.pipeline import AdvantagePipeline, build_pipeline
from retrain.advantages.teacher import Distill
from retrain.config.schema import TrainConfig
from retrain.training.backpressure import Backpressure, build_backpressure
from retrain.training.dapo.overlong import OverlongShaping
from retrain.training.echo import EchoSettings
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
    environment: Any | None = None  # retrain.environments.protocol.Environment: prompts and rollouts
    echo: EchoSettings | None = None
    overlong: OverlongShaping | None = None  # the soft overlong punishment, when overlong_buffer > 0
    mask_truncated: bool = False  # completions cut at max_tokens train no token
    distill: Distill | None = None  # [teacher] on: its term's weights (retrain.advantages.teacher)

    @property
    def condition(self) -> str:
        """The run's condition label: the pipeline's, with "+echo" when ECHO trains too."""
        return self.pipeline.condition + ("+echo" if self.echo is not None else "")

    def close(self) -> None:
        for part in (self.environment, self.reward):
            close = getattr(part, "close", None)
            if callable(close):
                close()


def build_flow(config: TrainConfig, *, reward_dir: str | None = None) -> Flow:
    """`reward_dir`: where the reward keeps what must survive a resume (the judge's verdicts),
    the run's log directory; None (a process that writes no run files) keeps it in memory."""
    from retrain.environments.create import create_environment
    from retrain.planning.create import build_detector
    from retrain.rewards.create import build_reward

    pipeline = build_pipeline(config)
    detector = build_detector(config) if pipeline.needs_planning else None
    t = config.training
    sampling = SamplingParams(max_tokens=t.max_tokens, temperature=t.temperature, top_p=t.top_p, top_k=t.top_k,
                              min_p=t.min_p, want_entropy=pipeline.needs_entropies)
    reward = build_reward(config, cache_dir=reward_dir)
    try:
        environment = create_environment(config)
    except BaseException:
        reward.close()
        raise
    return Flow(pipeline=pipeline, sepa=SepaController.from_config(config), backpressure=build_backpressure(config),
                reward=reward, detector=detector, sampling=sampling, environment=environment,
                echo=EchoSettings.of(config), overlong=OverlongShaping.of(config),
                mask_truncated=t.mask_truncated_completions, distill=distill_of(config))


def distill_of(config: TrainConfig) -> Distill | None:
    t = config.teacher
    return Distill(kl_coef=t.kl_coef, reward_coef=t.reward_coef) if t.enabled else None
