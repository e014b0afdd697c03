"""Episode-level advantages: one scalar per completion from the group's rewards.

Built-ins: `grpo` (reward minus group mean), `maxrl` (inverse success-rate reweighting) and
`reinforce_pp` (GRPO centring per group, then `batch_normalize` over the whole step).

Invariants every built-in keeps, for any finite rewards:
- a group whose rewards all lie within `TIE_EPS` of the smallest (a uniform group, the same
  test as the reward-tie check) gets exact zeros, so float noise such as 0.1 - mean(0.1, 0.1,
  0.1) = -1.4e-17 never becomes a signal that batch normalisation would amplify;
- outputs are finite: a difference that overflows saturates at the largest float.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrain.advantages.ragged import Floats, saturate

TIE_EPS = 1e-6
MAXRL_EPS = 1e-6
BATCH_NORM_EPS = 1e-8

EpisodeFn = Callable[[Floats], Floats]


def _rewards(rewards: Sequence[float] | Floats) -> Floats:
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    return r


def is_uniform(r: Floats, eps: float = TIE_EPS) -> bool:
    """True for an empty or single group, or one whose rewards are all within eps of the minimum."""
    if r.shape[0] < 2:
        return True
    with np.errstate(over="ignore"):
        return float(r.max() - r.min()) <= eps


def robust_mean(r: Floats) -> float:
    """Mean that cannot overflow for finite inputs (rescaled when the plain sum does)."""
    if r.shape[0] == 0:
        return 0.0
    with np.errstate(over="ignore"):
        m = float(np.mean(r))
    if np.isfinite(m):
        return m
    scale = float(np.max(np.abs(r)))
    return scale * float(np.mean(r / scale))


def grpo(rewards: Sequence[float] | Floats) -> Floats:
    """A_i = r_i - mean(r); no std normalisation."""
    r = _rewards(rewards)
    if is_uniform(r):
        return np.zeros_like(r)
    with np.errstate(over="ignore"):
        return saturate(r - robust_mean(r))


def maxrl(rewards: Sequence[float] | Floats) -> Floats:
    """A_i = (r_i - mu) / (mu + 1e-6); all zeros when mu <= 1e-6 (negative means included)."""
    r = _rewards(rewards)
    mu = robust_mean(r) if r.shape[0] else 0.0
    if is_uniform(r) or mu <= MAXRL_EPS:
        return np.zeros_like(r)
    with np.errstate(over="ignore"):
        return saturate((r - mu) / (mu + MAXRL_EPS))


def reinforce_pp(rewards: Sequence[float] | Floats) -> Floats:
    """The per-group step of REINFORCE++ (GRPO centring); see `batch_normalize`."""
    return grpo(rewards)


BUILTIN_EPISODE: dict[str, EpisodeFn] = {"grpo": grpo, "maxrl": maxrl, "reinforce_pp": reinforce_pp}


def batch_normalize(rows: Sequence[Floats]) -> tuple[list[Floats], dict[str, float]]:
    """REINFORCE++ whole-step normalisation of token advantages.

    Statistics are taken over every token whose advantage is exactly non-zero (per token, so
    long completions weigh more); those tokens become (a - mu) / (sigma + 1e-8), or a - mu when
    sigma < 1e-8. Exact zeros mean "no credit" (prompt padding, masked tokens, uniform groups)
    and stay zero. Pass completion tokens only.
    """
    arrays = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rows]
    lengths = [a.shape[0] for a in arrays]
    flat = np.concatenate(arrays) if arrays else np.zeros(0)
    nonzero = flat != 0.0
    count = int(nonzero.sum())
    if count == 0:
        return [a.copy() for a in arrays], {
            "batch_adv_count": 0.0,
            "batch_adv_mean": 0.0,
            "batch_adv_std": 0.0,
        }
    values = flat[nonzero]
    # Computed on values / scale so that huge advantages cannot overflow the moments.
    scale = float(np.max(np.abs(values)))
    x = values / scale
    m = float(x.mean())
    sd = float(x.std())
    mu, sigma = m * scale, sd * scale
    with np.errstate(over="ignore"):
        if sigma < BATCH_NORM_EPS:
            normed = saturate((x - m) * scale)
        else:
            normed = (x - m) / (sd + BATCH_NORM_EPS / scale)
    out = flat.copy()
    out[nonzero] = normed
    split = np.split(out, np.cumsum(lengths)[:-1].tolist()) if arrays else []
    return split, {"batch_adv_count": float(count), "batch_adv_mean": mu, "batch_adv_std": sigma}


@dataclass(frozen=True)
class AdvantageContext:
    """What a context-style advantage plugin receives."""

    rewards: list[float]
    params: dict[str, Any] = field(default_factory=dict)
    step: int = 0


@dataclass(frozen=True)
class AdvantageOutput:
    advantages: Sequence[float]
    extra_metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AdvantageSpec:
    """A named advantage mode; `compute` follows any of the plugin calling conventions."""

    name: str
    compute: Callable[..., Any]


def check_episode_output(raw: Any, n: int, where: str) -> tuple[Floats, dict[str, float]]:
    """Validate a plugin's output: G finite floats (list, array or AdvantageOutput)."""
    extra: dict[str, float] = {}
    if isinstance(raw, AdvantageOutput):
        extra = {str(k): float(v) for k, v in raw.extra_metrics.items()}
        raw = raw.advantages
    try:
        out = np.asarray(list(raw), dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where} must return {n} floats, got {type(raw).__name__}") from exc
    if out.shape[0] != n:
        raise ValueError(f"{where} returned {out.shape[0]} advantages for {n} completions")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{where} returned a non-finite advantage")
    return out, extra
