"""Pure builders of the rows a step writes: metrics.jsonl, emergence/steps.jsonl and
emergence/generations.jsonl. Field names follow the reference's metrics.jsonl."""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping, Sequence
from typing import Any

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
