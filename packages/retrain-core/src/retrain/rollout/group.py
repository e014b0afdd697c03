"""One step's sampled groups: what the RL loop and every environment exchange.

A `Group` is one prompt's completions with their texts and rewards (and, multi-turn, the
episodes behind them); `StepRollouts` is a step's groups with the timings and metrics of
sampling and scoring them. Environments return a `StepRollouts` from `collect`
(retrain.environments.protocol); the loop in retrain.training turns it into advantages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from retrain.rewards.types import RewardFault
from retrain.rollout.episode import Episode
from retrain.types import Completion, Example


@dataclass
class Group:
    example: Example
    prompt_ids: list[int]
    completions: list[Completion]
    texts: list[str]
    rewards: np.ndarray
    episodes: list[Episode] | None = None  # multi-turn: one per completion, same order
    penalties: np.ndarray | None = None  # overlong shaping (retrain.training.dapo.overlong), one per completion
    dropped: str = ""  # dynamic sampling (retrain.training.dapo.dynamic): why the group is not in the trained batch
    #: on-policy distillation ([teacher]): per completion, the teacher's logprob of each of its
    #: sampled tokens (an episode's: of `Episode.completion()`'s), filled by the loop's teacher stage
    teacher_logprobs: list[np.ndarray] | None = None

    @property
    def shaped_rewards(self) -> np.ndarray:
        """The rewards the advantages are computed from: the task's, plus any overlong penalty."""
        return self.rewards if self.penalties is None else self.rewards + self.penalties


@dataclass
class StepRollouts:
    groups: list[Group]
    sample_time_s: float
    score_time_s: float
    reward_metrics: dict[str, float] = field(default_factory=dict)
    policy_version: int = 0  # RL updates in the weights that sampled (retrain.training.producer)
    producer_metrics: dict[str, float] = field(default_factory=dict)
    env_metrics: dict[str, float] = field(default_factory=dict)  # the environment's own (`env/...`)
    reward_faults: list[RewardFault] = field(default_factory=list)  # the first failure of each kind
    fill: FillReport | None = None  # dynamic sampling: how the trained batch was filled
    teacher_time_s: float = 0.0  # scoring the completions with the [teacher] (retrain.training.distill)
    teacher_metrics: dict[str, float] = field(default_factory=dict)  # `teacher/...`

    @property
    def produce_time_s(self) -> float:
        """Sampling, scoring and the teacher's scoring: what producing the batch took."""
        return self.sample_time_s + self.score_time_s + self.teacher_time_s

    @property
    def rewards(self) -> np.ndarray:
        return np.concatenate([g.rewards for g in self.groups]) if self.groups else np.zeros(0)

    @property
    def completion_tokens(self) -> int:
        return sum(len(c.token_ids) for g in self.groups for c in g.completions)

    @property
    def length_hits(self) -> int:
        return sum(c.finish_reason == "length" for g in self.groups for c in g.completions)


@dataclass(frozen=True)
class FillReport:
    """How one step's batch was filled: groups sampled over all rounds, dropped (tied),
    surplus (kept after the batch was full), and the extra rounds it took."""

    target: int
    sampled: int
    dropped: int
    surplus: int
    rounds: int

    @property
    def trained(self) -> int:
        return self.sampled - self.dropped - self.surplus

    @property
    def short(self) -> bool:
        return self.trained < self.target

    def metrics(self) -> dict[str, float]:
        return {
            "dynamic/groups_sampled": float(self.sampled),
            "dynamic/groups_dropped": float(self.dropped),
            "dynamic/dropped_share": self.dropped / self.sampled if self.sampled else 0.0,
            "dynamic/groups_surplus": float(self.surplus),
            "dynamic/extra_rounds": float(self.rounds),
            "dynamic/batch_fill": self.trained / self.target if self.target else 0.0,
        }
