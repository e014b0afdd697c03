"""Recording one RL step: the tail every trainer that runs RL steps (the RL loop, TTT-Discover)
ends a step with, in one place so that their rows and state cannot drift apart:

1. count the step's answers (and dynamic sampling's fill) in the trainer state;
2. feed the step to back-pressure, which sets the next step's (batch, group) sizes;
3. build the metrics row (retrain.training.telemetry.step_row, then the trainer's own keys,
   then the step's timing spans, none overwriting a key before it) and write it with the
   step's rollouts;
4. mark the step done in the state (where the data cursor and the sizes stand, whether the
   step updated the policy and how many of its completions the reward failed to score:
   retrain.training.idle) and report it;
5. count the step's reward faults against the error budget, and say whether the run's last
   step ends a run whose reward scored nothing.

What follows a recorded step (evaluation, the fault points, the checkpoint, the budget's stop,
an interrupt) is the trainer's: `retrain.training.trainers.rl.Trainer._step_done`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from retrain.training.backpressure import adjust
from retrain.training.telemetry import StepTimes, backend_counters, sequence_tokens, step_row

if TYPE_CHECKING:
    from retrain.config.schema import TrainConfig
    from retrain.process.spans import Spans
    from retrain.rollout.group import StepRollouts
    from retrain.training.run import Run
    from retrain.training.step import StepAdvantages
    from retrain.types import TrainOutput


class StepReporter(Protocol):
    """What recording needs of the console (retrain.training.console.Reporter, or a follower's
    silent one)."""

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class TrainedStep:
    """One RL step, sampled and trained: what recording needs of it."""

    step: int
    spans: Spans  # the step's phases, collected since it began (retrain.process.spans)
    rollouts: StepRollouts
    adv: StepAdvantages
    out: TrainOutput | None  # None: no update (no token with a non-zero advantage)
    example_index: int  # the data cursor's position after the step: where a resume continues
    extra: Mapping[str, Any] = field(default_factory=dict)  # the trainer's own keys, after step_row's


@dataclass(frozen=True)
class RecordedStep:
    row: dict[str, Any]
    failed: int  # samples the reward did not score (errors and timeouts)
    over_budget: bool  # the reward error budget is spent: the run stops after this step
    never_scored: bool = False  # the run's last RL step, and the reward scored none of the run's completions


def record_step(config: TrainConfig, run: Run, trained: TrainedStep, reporter: StepReporter, *,
                world_size: int) -> RecordedStep:
    """Steps 1 to 5 above; `run.sizes` becomes the next step's sizes."""
    s, rollouts, adv, out = trained.step, trained.rollouts, trained.adv, trained.out
    run.state.count(adv.correct, adv.total)
    if rollouts.fill is not None:
        run.state.dynamic_sampling.add(rollouts.fill)
    times = StepTimes(trained.spans.elapsed(), rollouts.sample_time_s, trained.spans.seconds("train"))
    sizes, bp_metrics = adjust(run.flow.backpressure, config.backpressure.enabled, run.sizes,
                               sequence_tokens(rollouts), times.step_s, skipped=out is None)
    row = step_row(config, step=s, condition=run.flow.condition, caps=run.caps, rollouts=rollouts, adv=adv, out=out,
                   running_correct_rate=run.state.running_correct_rate, sizes=run.sizes, times=times,
                   runtime={**backend_counters(run.backend), "world_size": world_size}, backpressure=bp_metrics)
    row.update({k: v for k, v in trained.extra.items() if k not in row})
    row.update({k: v for k, v in trained.spans.fields().items() if k not in row})
    run.log.record_step(row, rollouts, s, correct=adv.correct, total=adv.total)
    run.sizes = sizes
    run.state.rl_step_done(s, trained.example_index, sizes, row["mean_reward"])
    failed = int(row.get("reward_errors", 0.0) + row.get("reward_timeouts", 0.0))
    latest = rollouts.reward_faults[-1].line() if rollouts.reward_faults else ""
    run.state.idle.add(updated=out is not None, tied=not any(d.train for d in adv.dispositions),
                       correct=adv.correct, total=adv.total, failed=failed, fault=latest)
    reporter.step(s, config.training.max_steps, row)
    assert run.faults is not None
    over_budget = run.faults.observe(s, rollouts.reward_faults, failed, int(rollouts.rewards.size))
    stops = config.reward.max_error_steps > 0  # 0 switches every reward-fault stop off, this one too
    last = s == config.training.max_steps - 1
    return RecordedStep(row, failed, over_budget, never_scored=stops and last and run.state.idle.never_scored)
