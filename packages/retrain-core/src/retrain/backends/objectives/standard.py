"""standard: -min(r A, clip(r, lo, hi) A) with clip_eps > 0 (PPO; GSPO at sequence level),
else -r A. Its band is [1 - clip_eps, 1 + (clip_eps_high or clip_eps)]."""

from __future__ import annotations

from typing import Any

from retrain.backends.objective import LossTerms, Objective, clipped_pg


def band(clip_eps: float, clip_eps_high: float) -> tuple[float, float] | None:
    if clip_eps <= 0:
        return None
    return 1.0 - clip_eps, 1.0 + (clip_eps_high or clip_eps)


def loss(settings: Any, terms: LossTerms) -> Any:
    return clipped_pg(terms) if settings.clip_eps > 0 else -terms.ratio * terms.adv


OBJECTIVE = Objective("standard", loss, "PPO's clipped surrogate (clip_eps > 0), else the plain ratio times -A",
                      band=band, dual_clip=True)
