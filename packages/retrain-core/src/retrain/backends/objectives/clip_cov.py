"""clip_cov (spec algorithms.md §9.1): PPO's clipped surrogate in the band eps_low = clip_eps
(or 1 when 0), eps_high = clip_eps_high (or eps_low when 0), with max(1, floor(N *
clip_cov_ratio)) tokens, drawn uniformly from those not already clipped whose covariance lies
in (clip_cov_min, clip_cov_max), cut from the gradient. Token-level ratios only."""

from __future__ import annotations

from typing import Any

from retrain.backends.objective import LossTerms, Objective, SelectTerms, clipped_pg, covariance


def band(clip_eps: float, clip_eps_high: float) -> tuple[float, float]:
    low = clip_eps if clip_eps > 0 else 1.0
    return 1.0 - low, 1.0 + (clip_eps_high or low)


def select(settings: Any, terms: SelectTerms) -> Any:
    xp, new_lp, adv = terms.xp, terms.new_lp, terms.adv
    n = new_lp.numel()
    picked = new_lp.new_zeros(n, dtype=xp.bool)
    cov = covariance(new_lp, adv)
    ratio = (new_lp - terms.old_lp).exp()
    by_origin = (-ratio.clamp(terms.lo, terms.hi) * adv) > (-ratio * adv)
    eligible = (~by_origin & (cov > settings.clip_cov_min) & (cov < settings.clip_cov_max)).nonzero().squeeze(-1)
    if eligible.numel() == 0:
        return picked
    want = min(max(1, int(n * settings.clip_cov_ratio)), eligible.numel())
    order = xp.randperm(eligible.numel(), generator=terms.generator, device="cpu").to(eligible.device)
    picked[eligible[order[:want]]] = True
    return picked


def loss(settings: Any, terms: LossTerms) -> Any:
    loss = clipped_pg(terms)
    return terms.xp.where(terms.selected, loss.detach() * 0.0, loss)


OBJECTIVE = Objective("clip_cov", loss, "PPO's clip with the gradient of random high-covariance tokens cut (Clip-Cov)",
                      band=band, dual_clip=True, select=select, selection_clips=True,
                      reads=("clip_cov_ratio", "clip_cov_min", "clip_cov_max"))
