"""DAPO dynamic sampling (arXiv 2503.14476, §3.2, `[training] dynamic_sampling`): a step
trains on `batch_size` groups whose rewards do not all tie.

1. The step samples its `batch_size` prompts (round 0).
2. A group whose rewards (overlong penalty included) all tie, within the reward-tie epsilon of
   retrain.training.signals, is dropped: every built-in advantage mode gives it zeros.
3. While fewer than `batch_size` groups are kept and fewer than `dynamic_sampling_max_rounds`
   extra rounds have run, another round samples the next prompts of the data cursor: as many
   as the batch is short of, divided by the share of prompts kept so far (`batch_size` when
   none was kept), at most `batch_size`.
4. The first `batch_size` kept groups, in sampling order, train; a kept group after them is
   surplus (sampled, scored and logged, not trained), as verl truncates its batch.
5. A batch still short after the last round trains on the groups it has (`dynamic/batch_fill`
   below 1); verl raises instead.

Every round samples from the same weights. The data cursor and the sampler's random streams
advance by what was sampled, which the rewards decide, so a step is a function of the state
it starts from and a resumed run repeats it exactly (a server engine seeds each round's
requests from the cursor where the round starts). The step's reward and correct rate count
every sampled completion, dropped and surplus ones included: an unbiased estimate of the
policy's reward, which the trained batch, without its tied groups, is not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from retrain.config.schema import TrainConfig
from retrain.rewards.types import RewardFault
from retrain.rollout.group import FillReport, Group, StepRollouts
from retrain.training.signals import summarize_reward_ties

ZERO_VARIANCE = "dropped (zero reward variance)"
SURPLUS = "surplus (the batch was full)"


def zero_variance(g: Group) -> bool:
    """Every reward of the group ties (groups of one never do, as in the reward-tie check)."""
    return summarize_reward_ties(g.shaped_rewards).is_uniform


def round_size(target: int, kept: int, prompts: int) -> int:
    """Prompts the next round samples: the groups still missing over the share of prompts
    kept so far; `target` when none was kept; never more than `target`."""
    short = target - kept
    if short <= 0:
        return 0
    if kept == 0:
        return target
    return min(target, math.ceil(short * prompts / kept))


def select(groups: Sequence[Group], target: int) -> list[Group]:
    """The groups with `dropped` set on the tied ones and on the kept ones after the first
    `target`; the others form the trained batch."""
    out, kept = [], 0
    for g in groups:
        if zero_variance(g):
            out.append(dataclasses.replace(g, dropped=ZERO_VARIANCE))
        elif kept >= target:
            out.append(dataclasses.replace(g, dropped=SURPLUS))
        else:
            kept += 1
            out.append(g)
    return out


@dataclass(frozen=True)
class DynamicSampling:
    max_rounds: int

    @classmethod
    def of(cls, config: TrainConfig) -> DynamicSampling | None:
        t = config.training
        return cls(t.dynamic_sampling_max_rounds) if t.dynamic_sampling else None

    def fill(self, first: StepRollouts, target: int, more: Callable[[int], StepRollouts]) -> StepRollouts:
        """`first` (round 0, `target` prompts) and the rounds `more(n)` samples from the next
        `n` prompts, merged, with the groups outside the trained batch marked."""
        parts = [first]
        prompts = target
        kept = sum(not zero_variance(g) for g in first.groups)
        while kept < target and len(parts) <= self.max_rounds:
            n = round_size(target, kept, prompts)
            part = more(n)
            parts.append(part)
            prompts += n
            kept += sum(not zero_variance(g) for g in part.groups)
        out = merge(parts)
        out.groups = select(out.groups, target)
        dropped = sum(g.dropped == ZERO_VARIANCE for g in out.groups)
        surplus = sum(g.dropped == SURPLUS for g in out.groups)
        out.fill = FillReport(target, len(out.groups), dropped, surplus, len(parts) - 1)
        return out


def merge(parts: Sequence[StepRollouts]) -> StepRollouts:
    """One step's rollouts from its sampling rounds, in order: times and counters add up,
    the environment's means are weighted by completions, the first fault of each kind is
    kept."""
    if len(parts) == 1:
        return parts[0]
    weights = [sum(len(g.completions) for g in p.groups) for p in parts]
    faults: dict[str, RewardFault] = {}
    for p in parts:
        for f in p.reward_faults:
            faults.setdefault(f.kind, f)
    return StepRollouts(
        groups=[g for p in parts for g in p.groups],
        sample_time_s=sum(p.sample_time_s for p in parts),
        score_time_s=sum(p.score_time_s for p in parts),
        reward_metrics=_sum([p.reward_metrics for p in parts]),
        policy_version=parts[0].policy_version,
        env_metrics=merge_env_metrics([p.env_metrics for p in parts], weights),
        reward_faults=list(faults.values()),
    )


def _sum(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for row in rows:
        for k, v in row.items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def merge_env_metrics(rows: Sequence[Mapping[str, float]], weights: Sequence[int]) -> dict[str, float]:
    """An environment's metrics (`env/...`) over several rounds: a mean (`env/reward/*`,
    `env/metric/*`, `*_mean`) weighted by each round's completions, a maximum (`*_max`) the
    largest, any other value (counters, seconds) the sum."""
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for row in rows for k in row):
        pairs = [(float(row[key]), w) for row, w in zip(rows, weights, strict=True) if key in row]
        if key.startswith(("env/reward/", "env/metric/")) or key.endswith("_mean"):
            total = sum(w for _, w in pairs)
            out[key] = sum(v * w for v, w in pairs) / total if total else 0.0
        elif key.endswith("_max"):
            out[key] = max(v for v, _ in pairs)
        else:
            out[key] = sum(v for v, _ in pairs)
    return out
