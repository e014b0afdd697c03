"""Full algorithm modes (`[algorithm] algorithm_mode`): fixed recipes and plugins.

A built-in recipe is an advantage mode plus a transform run through the composable pipeline;
`discover_entropic` (alias `ttt_discover_entropic`) is the TTT-Discover Boltzmann objective,
one advantage per completion. A plugin is `f(AlgorithmContext)` returning `AlgorithmOutput`,
an object with `token_advs`, or `list[list[float]]`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrain.advantages.episode import robust_mean
from retrain.advantages.ragged import FLOAT_MAX, Floats


@dataclass(frozen=True)
class Recipe:
    advantage: str
    transform: str
    #: the [algorithm.params] keys its episode step reads (the pipeline reads the nested
    #: transform_params table of every recipe)
    param_keys: frozenset[str] = frozenset()


#: the [algorithm.params] keys `discover_beta` reads
DISCOVER_ENTROPIC_KEYS = frozenset({"beta", "target_kl", "discover_target_kl", "beta_max", "discover_beta_max",
                                    "beta_search_steps"})


BUILTIN_ALGORITHMS: dict[str, Recipe] = {
    "grpo_none": Recipe("grpo", "none"),
    "maxrl_none": Recipe("maxrl", "none"),
    "maxrl_gtpo": Recipe("maxrl", "gtpo"),
    "maxrl_gtpo_hicra": Recipe("maxrl", "gtpo_hicra"),
    "maxrl_gtpo_sepa": Recipe("maxrl", "gtpo_sepa"),
    "reinforce_pp_none": Recipe("reinforce_pp", "none"),
    "reinforce_pp_gtpo": Recipe("reinforce_pp", "gtpo"),
    "reinforce_pp_gtpo_sepa": Recipe("reinforce_pp", "gtpo_sepa"),
    "reinforce_pp_delight": Recipe("reinforce_pp", "delight"),
    "reinforce_pp_delight_sepa": Recipe("reinforce_pp", "delight_sepa"),
    "discover_entropic": Recipe("discover_entropic", "none", DISCOVER_ENTROPIC_KEYS),
    "ttt_discover_entropic": Recipe("discover_entropic", "none", DISCOVER_ENTROPIC_KEYS),
}

# ---------------------------------------------------------------- discover_entropic

DISCOVER_FLAT = 1e-12
EXP_FLOOR = -700.0


def _param(params: Mapping[str, Any], keys: tuple[str, ...], default: float) -> float:
    for key in keys:
        raw = params.get(key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ValueError(f"{key} must be a number, got {raw!r}")
        return float(raw)
    return default


def boltzmann(r: Floats, beta: float) -> tuple[Floats, float]:
    """(p_beta over the group, KL(p_beta || uniform))."""
    n = r.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.clip(r - r.max(), -FLOAT_MAX, 0.0)
        w = np.exp(np.maximum(EXP_FLOOR, beta * d))
    total = float(w.sum())
    p = w / total if total > 0 and math.isfinite(total) else np.full(n, 1.0 / n)
    nz = p > 0
    kl = float(np.sum(p[nz] * (np.log(p[nz]) + math.log(n))))
    return p, max(kl, 0.0)


def discover_beta(r: Floats, params: Mapping[str, Any]) -> float:
    """Largest beta in [0, beta_max] with KL(p_beta || U) <= target (bisection), or the fixed
    `beta` param."""
    if r.shape[0] <= 1 or float(r.max() - r.min()) <= DISCOVER_FLAT:
        return 0.0
    fixed = params.get("beta")
    if fixed is not None and not isinstance(fixed, bool):
        return max(0.0, _param(params, ("beta",), 0.0))
    target = _param(params, ("target_kl", "discover_target_kl"), 0.2)
    beta_max = _param(params, ("beta_max", "discover_beta_max"), 50.0)
    steps = int(_param(params, ("beta_search_steps",), 24))
    if target <= 0 or beta_max <= 0:
        return 0.0
    if boltzmann(r, beta_max)[1] <= target:
        return beta_max
    lo, hi, best = 0.0, beta_max, 0.0
    for _ in range(max(steps, 0)):
        mid = 0.5 * (lo + hi)
        if boltzmann(r, mid)[1] <= target:
            best, lo = mid, mid
        else:
            hi = mid
    return best


def discover_entropic(
    rewards: Floats, params: Mapping[str, Any]
) -> tuple[Floats, dict[str, float]]:
    """A_i = n * p_i - 1 (sums to zero) with p the Boltzmann weights at the searched beta."""
    n = rewards.shape[0]
    if n == 0:
        return np.zeros(0), {}
    beta = discover_beta(rewards, params)
    if beta == 0.0:
        adv, kl = np.zeros(n), 0.0
    else:
        p, kl = boltzmann(rewards, beta)
        adv = n * p - 1.0
    metrics = {
        "discover_beta": beta,
        "discover_kl": kl,
        "discover_reward_max": float(rewards.max()),
        "discover_reward_mean": robust_mean(rewards),
    }
    return adv, metrics


# ---------------------------------------------------------------- plugins


@dataclass(frozen=True)
class AlgorithmContext:
    """One group as an algorithm plugin sees it (plain lists)."""

    rewards: list[float]
    logprobs: list[list[float]]
    planning_masks: list[list[int]]
    params: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    sepa_lambda: float = 0.0
    gtpo_beta: float = 0.1
    hicra_alpha: float = 0.2
    token_distributions: list[list[list[float]]] | None = None
    precomputed_entropies: list[list[float]] | None = None


@dataclass(frozen=True)
class AlgorithmOutput:
    token_advs: Sequence[Sequence[float]]
    extra_metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AlgorithmPlugin:
    name: str
    fn: Callable[[AlgorithmContext], Any]
    needs_planning: bool = False
    uses_sepa_controller: bool = False
    token_varying: bool = True
    source: str = ""


def plugin_from_object(obj: Any, name: str, source: str) -> AlgorithmPlugin:
    from retrain.plugins.signature import from_factory

    obj = from_factory(obj, AlgorithmPlugin)
    if isinstance(obj, AlgorithmPlugin):
        return obj
    if not callable(obj):
        raise TypeError(f"algorithm plugin {name!r} is not callable")
    return AlgorithmPlugin(
        name=name,
        fn=obj,
        needs_planning=bool(getattr(obj, "needs_planning", False)),
        uses_sepa_controller=bool(getattr(obj, "uses_sepa_controller", False)),
        token_varying=bool(getattr(obj, "token_varying", True)),
        source=source,
    )
