"""cispo: -sg(clip(r, lo, hi)) A log p (MiniMax-M1; TRL's loss_type "cispo"). Its band is
[1 - clip_eps, 1 + (clip_eps_high or clip_eps)], where clip_eps = 0 means no lower bound (0;
MiniMax-M1 sets none, TRL's cispo has none); with both 0 it has no band, which validation
refuses."""

from __future__ import annotations

from typing import Any

from retrain.backends.objective import LossTerms, Objective


def band(clip_eps: float, clip_eps_high: float) -> tuple[float, float] | None:
    high = clip_eps_high or clip_eps
    if high <= 0:
        return None
    return (1.0 - clip_eps if clip_eps > 0 else 0.0), 1.0 + high


def loss(settings: Any, terms: LossTerms) -> Any:
    return -terms.ratio.detach().clamp(terms.lo, terms.hi) * terms.adv * terms.new_lp


def check(settings: Any) -> list[tuple[str, str, str]]:
    if band(settings.clip_eps, settings.clip_eps_high) is not None:
        return []
    return [("policy_loss_mode", "'cispo' clips its importance weight at 1 + clip_eps_high (and at 1 - clip_eps "
             "from below), and both are 0", "clip_eps_high = 4.0 (a cap of 5, TRL's epsilon_high for cispo)")]


OBJECTIVE = Objective("cispo", loss, "a clipped, stop-gradient ratio weighting -A log p (MiniMax-M1)",
                      band=band, clip_eps_optional=True, check=check)
