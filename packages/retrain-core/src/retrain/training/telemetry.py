"""Pure builders of the rows a step writes: metrics.jsonl, emergence/steps.jsonl and
emergence/generations.jsonl. Field names follow the reference's metrics.jsonl."""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

#: Fields that measure wall-clock time or memory: they differ between two runs of the same
#: seed; every other field of a row is a deterministic function of config and seed.
WALL_CLOCK_FIELDS = frozenset({
    "step_time_s", "sample_time_s", "train_time_s", "tokens_per_second", "sample_share", "train_share",
    "process_max_rss_mb", "rl/train_time_s", "engine_prompt_prefill_s", "engine_decode_s", "time_s",
    "scoring_time_s", "elapsed_s",
})


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


Scalar = float | int | str | bool


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
