"""Pure builders of the rows a step writes: metrics.jsonl, emergence/steps.jsonl and
emergence/generations.jsonl. Field names follow the reference's metrics.jsonl."""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from retrain.backends.catalog import BackendCapabilities
    from retrain.config.schema import TrainConfig
    from retrain.rollout.group import StepRollouts
    from retrain.training.step import StepAdvantages
    from retrain.types import TrainOutput

Scalar = float | int | str | bool

#: Fields that measure wall-clock time or memory: they differ between two runs of the same
#: seed; every other field of a row is a deterministic function of config and seed.
WALL_CLOCK_FIELDS = frozenset({
    "step_time_s", "sample_time_s", "train_time_s", "tokens_per_second", "sample_share", "train_share",
    "process_max_rss_mb", "rl/train_time_s", "engine_prompt_prefill_s", "engine_decode_s", "time_s",
    "engine_generated_tokens_per_s",
    "scoring_time_s", "elapsed_s", "async/produce_s", "async/wait_s", "async/overlap",
    "async/weight_sync_s", "async/trainer_idle_s",
    "engine_generation_wall_s", "engine_adapter_reload_s", "engine_adapter_save_s", "eval/wall_s",
    "env/env_s", "env/env_wall_s", "env/score_s", "env/time_share", "env/adapter_publish_s",
    "supervised_tokens_per_second", "train_tokens_per_s", "mfu",
    # timing spans (retrain.process.spans) beyond the keys above
    "sync_time_s", "score_time_s", "train/forward_time_s", "train/backward_time_s", "train/optimizer_time_s",
    "teacher/time_s", "teacher/latency_s",
})


def backend_counters(backend: Any) -> dict[str, Scalar]:
    """The backend's counters for the step just done (every step reads them, so none leak
    into the next step's row); a backend without `runtime_metrics` has none."""
    read = getattr(backend, "runtime_metrics", None)
    if not callable(read):
        return {}
    return {k: v for k, v in read().items() if isinstance(k, str) and isinstance(v, int | float | str)}


def peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024, 3)


def timing_fields(step_time: float, sample_time: float, train_time: float, tokens: int) -> dict[str, float]:
    return {
        "step_time_s": round(step_time, 6),
        "sample_time_s": round(sample_time, 6),
        "train_time_s": round(train_time, 6),
        "tokens_per_second": round(tokens / step_time, 3) if step_time > 0 else 0.0,
        "sample_share": round(sample_time / step_time, 6) if step_time > 0 else 0.0,
        "train_share": round(train_time / step_time, 6) if step_time > 0 else 0.0,
        "process_max_rss_mb": peak_rss_mb(),
    }


def generation_rows(step: int, prompt: str, texts: Sequence[str], rewards: Sequence[float],
                    lengths: Sequence[int], per_prompt: int) -> list[dict[str, Any]]:
    """The `per_prompt` highest-reward completions of a group (ties: lower index); 0 = all."""
    order = sorted(range(len(texts)), key=lambda i: (-rewards[i], i))
    if per_prompt > 0:
        order = order[:per_prompt]
    return [{"step": step, "prompt": prompt[:200], "completion": texts[i][:500], "reward": float(rewards[i]),
             "num_tokens": int(lengths[i])} for i in order]


def steps_row(metrics: Mapping[str, Any], correct: int, total: int) -> dict[str, Any]:
    keys = ("step", "mean_reward", "condition", "uncertainty_kind", "clip_fraction", "policy_loss_mode",
            "policy/cov_fraction", "policy/abs_kl", "adv_cap_fraction", "adv_cap_magnitude")
    row = {k: metrics[k] for k in keys if k in metrics}
    row["correct_count"] = correct
    row["total_count"] = total
    for k, v in metrics.items():
        if "surprisal" in k or "entropy_mean" in k or "entropy_var" in k:
            row[k] = v
    return row



class WarmupRow(msgspec.Struct, kw_only=True):
    """A supervised warmup step's metrics row (phase "sft", its own step counter)."""

    step: int
    phase: str = "sft"
    loss: float
    lr: float
    datums: int
    supervised_tokens: int
    step_time_s: float
    train_time_s: float

    def to_dict(self, *extras: Mapping[str, Scalar]) -> dict[str, Any]:
        return _merge(self, extras)


class StepRow(msgspec.Struct, kw_only=True):
    """The fixed part of an RL step's metrics row, in the reference's field names and order.

    Components add their own keys (advantage pipeline, reward errors, SEPA, the backend's
    counters, timings) through `to_dict(*extras)`; a fixed field is never overwritten.
    """

    step: int
    condition: str
    algorithm_mode: str
    advantage_mode: str
    transform_mode: str
    uncertainty_kind: str
    policy_loss_mode: str
    loss: float
    reported_loss: float
    loss_is_placeholder: bool
    backend_reports_sync_loss: bool
    backend_preserves_token_advantages: bool
    mean_reward: float
    correct_rate: float
    running_correct_rate: float
    num_datums: int
    batch_size: int
    group_size: int
    max_token_hit_rate: float
    mean_completion_tokens: float
    tokens_per_step: int
    skipped: bool
    completion_tokens: int = msgspec.field(name="rl/completion_tokens")
    nonzero_action_tokens: int = msgspec.field(name="rl/nonzero_advantage_action_tokens")
    train_time_semantics: str = "synchronous_optimizer_update"

    def to_dict(self, *extras: Mapping[str, Scalar]) -> dict[str, Any]:
        return _merge(self, extras)


def _merge(row: msgspec.Struct, extras: Sequence[Mapping[str, Scalar]]) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(row)
    for extra in extras:
        for key, value in extra.items():
            out.setdefault(key, value)
    return out


@dataclass(frozen=True)
class StepTimes:
    step_s: float
    sample_s: float
    train_s: float


def sequence_tokens(rollouts: StepRollouts) -> int:
    """Every sampled sequence's tokens, prompt and completion (and a multi-turn episode's
    observations), trained on or not."""
    observed = sum(e.observation_tokens for g in rollouts.groups for e in g.episodes or ())
    return sum(len(g.prompt_ids) * len(g.completions) for g in rollouts.groups) + rollouts.completion_tokens + observed


def step_row(config: TrainConfig, *, step: int, condition: str, caps: BackendCapabilities,
             rollouts: StepRollouts, adv: StepAdvantages, out: TrainOutput | None,
             running_correct_rate: float, sizes: tuple[int, int], times: StepTimes,
             runtime: Mapping[str, Scalar], backpressure: Mapping[str, Scalar]) -> dict[str, Any]:
    """An RL step's metrics row: the fixed fields, then each component's own keys (SEPA,
    advantages, rewards, the backend's update, timing, the backend's counters,
    back-pressure); a later key never overwrites an earlier one."""
    a, t = config.algorithm, config.training
    tokens = sequence_tokens(rollouts)
    total = adv.total
    loss = out.loss if out is not None else 0.0
    fixed = StepRow(
        step=step, condition=condition, algorithm_mode=a.algorithm_mode, advantage_mode=a.advantage_mode,
        transform_mode=a.transform_mode, uncertainty_kind=a.uncertainty_kind, policy_loss_mode=t.policy_loss_mode,
        loss=loss, reported_loss=loss, loss_is_placeholder=not caps.reports_sync_loss,
        backend_reports_sync_loss=caps.reports_sync_loss,
        backend_preserves_token_advantages=caps.preserves_token_advantages,
        mean_reward=float(rollouts.rewards.mean()) if total else 0.0,
        correct_rate=adv.correct / total if total else 0.0, running_correct_rate=running_correct_rate,
        num_datums=len(adv.datums), batch_size=sizes[0], group_size=sizes[1],
        max_token_hit_rate=rollouts.length_hits / max(total, 1),
        mean_completion_tokens=rollouts.completion_tokens / max(total, 1), tokens_per_step=tokens,
        skipped=out is None, completion_tokens=rollouts.completion_tokens, nonzero_action_tokens=adv.informative)
    return fixed.to_dict(adv.sepa, adv.metrics, rollouts.teacher_metrics, rollouts.reward_metrics, rollouts.env_metrics,
                         env_share(rollouts.env_metrics, times.step_s), out.metrics if out is not None else {},
                         timing_fields(times.step_s, times.sample_s, times.train_s, tokens), runtime, backpressure,
                         rollouts.producer_metrics)


def env_share(env_metrics: Mapping[str, Any], step_s: float) -> dict[str, float]:
    """The share of the step's wall time spent waiting on the environment (`env/env_wall_s`,
    the time at least one environment call was in flight)."""
    wall = env_metrics.get("env/env_wall_s")
    if wall is None or step_s <= 0:
        return {}
    return {"env/time_share": round(min(float(wall) / step_s, 1.0), 6)}
