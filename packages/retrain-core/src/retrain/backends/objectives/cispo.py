"""cispo: -sg(clip(r, lo, hi)) A log p (MiniMax-M1; TRL's loss_type "cispo"). Its band is
[1 - clip_eps, 1 + (clip_eps_high or clip_eps)], where clip_eps = 0 means no lower bound (0;
MiniMax-M1 sets none, TRL's cispo has none) and both 0 mean the cap CISPO_DEFAULT_CAP."""

from __future__ import annotations

from typing import Any

from retrain.backends.objective import LossTerms, Objective

#: cispo's cap on its weight when the config sets neither clip_eps nor clip_eps_high: 5, the
#: truncation ScaleRL (Khatri et al. 2025) uses for CISPO and TRL recommends as its cispo
#: `epsilon_high`. MiniMax-M1 tunes only the upper side and publishes no value; Tinker's cispo
#: defaults to 4, NeMo RL's to 6; on-policy the ratio is 1 and any of them leaves the step alone.
CISPO_DEFAULT_CAP = 5.0


def band(clip_eps: float, clip_eps_high: float) -> tuple[float, float]:
    high = clip_eps_high or clip_eps
    return (1.0 - clip_eps if clip_eps > 0 else 0.0), (1.0 + high if high > 0 else CISPO_DEFAULT_CAP)


def loss(settings: Any, terms: LossTerms) -> Any:
    return -terms.ratio.detach().clamp(terms.lo, terms.hi) * terms.adv * terms.new_lp


OBJECTIVE = Objective("cispo", loss, "a clipped, stop-gradient ratio weighting -A log p (MiniMax-M1)",
                      band=band, clip_eps_optional=True)
