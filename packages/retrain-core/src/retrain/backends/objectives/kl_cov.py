"""kl_cov (spec algorithms.md §9.1): -r A, plus kl_cov_coef |log r| on the top
max(1, floor(N * kl_cov_percent / 100)) tokens of the update by covariance of advantage and
log-probability. Token-level ratios only."""

from __future__ import annotations

from typing import Any

from retrain.backends.objective import LossTerms, Objective, SelectTerms, covariance


def select(settings: Any, terms: SelectTerms) -> Any:
    n = terms.new_lp.numel()
    picked = terms.new_lp.new_zeros(n, dtype=terms.xp.bool)
    k = max(1, int(n * min(settings.kl_cov_percent, 100.0) / 100.0))
    picked[terms.xp.topk(covariance(terms.new_lp, terms.adv), k).indices] = True
    return picked


def loss(settings: Any, terms: LossTerms) -> Any:
    return -terms.ratio * terms.adv + settings.kl_cov_coef * terms.delta.abs() * terms.selected.to(terms.delta.dtype)


OBJECTIVE = Objective("kl_cov", loss, "a |log r| penalty on the tokens of highest covariance (KL-Cov)",
                      dual_clip=True, select=select, reads=("kl_cov_percent", "kl_cov_coef"))
