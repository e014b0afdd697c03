"""Token-credit transforms over ragged groups: GTPO, HICRA, SEPA pooling/amplification and
the top-rho uncertainty mask.

Every function takes the group's flat token arrays plus its `Ragged` layout and works per
completion (GTPO means, SEPA execution means) or per group (the mask threshold). Weights are
never negative, so no transform here flips the sign of a completion's episode advantage;
HICRA keeps signs because alpha is at most 1. Planning tokens are assumed sparse: their
contributions are computed on their indices only, so a group costs a handful of passes.
"""

from __future__ import annotations

import math

import numpy as np

from retrain.advantages.ragged import FLOAT_MAX, Floats, Ints, Ragged, saturate
from retrain.advantages.uncertainty import clamped

GTPO_MEAN_FLOOR = 1e-7
GTPO_EPS = 1e-8


def planning_indices(mask: Floats) -> Ints:
    return np.flatnonzero(mask > 0).astype(np.int64, copy=False)


def gtpo(layout: Ragged, episode: Floats, u: Floats, beta: float) -> Floats:
    """tok_t = A * max(0, 1 + beta * (u_t / (mean_u + 1e-8) - 1)), per completion.

    A completion whose mean uncertainty is below 1e-7 (or beta = 0) gets uniform weights.
    """
    if beta == 0.0 or layout.total == 0:
        return layout.expand(episode)
    u = clamped(u)
    mean, _ = layout.mean(u)
    flat = mean < GTPO_MEAN_FLOOR
    # w = u * slope + intercept per completion, so the token pass is one fused multiply-add.
    slope = np.where(flat, 0.0, beta / (mean + GTPO_EPS))
    intercept = np.where(flat, 1.0, 1.0 - beta)
    w = layout.expand(slope)
    w *= u
    w += layout.expand(intercept)
    np.maximum(w, 0.0, out=w)
    a = layout.expand(episode)
    if episode.size and float(np.abs(episode).max()) * float(w.max()) >= FLOAT_MAX:
        with np.errstate(over="ignore"):
            return saturate(a * w)
    w *= a
    return w


def hicra(tok: Floats, mask: Floats, alpha: float) -> Floats:
    """Planning tokens (mask 1) become tok + alpha * |tok|; others are unchanged."""
    if tok.shape != mask.shape:
        raise ValueError(f"HICRA: {tok.shape[0]} advantages but {mask.shape[0]} mask values")
    out = tok.copy()
    if alpha == 0.0:
        return out
    idx = planning_indices(mask)
    with np.errstate(over="ignore"):
        out[idx] = saturate(out[idx] + alpha * np.abs(out[idx]))
    return out


def exec_means(layout: Ragged, u: Floats, plan: Ints) -> tuple[Floats, Floats]:
    """(mean of u over each completion's execution tokens, their counts)."""
    sums = layout.sum(u) - layout.sum_at(u, plan)
    counts = layout.lengths - layout.count_at(plan)
    means = np.divide(sums, counts, out=np.zeros(layout.n), where=counts > 0)
    return means, counts


def _toward_mean(layout: Ragged, u: Floats, mask: Floats, weight: float) -> Floats:
    """Execution tokens become (1 - weight) * u + weight * mu_exec; planning tokens keep u."""
    plan = planning_indices(mask)
    mu, _ = exec_means(layout, u, plan)
    out = layout.expand(mu)
    out *= weight
    out += (1.0 - weight) * u
    out[plan] = u[plan]
    return out


def sepa_pool(layout: Ragged, u: Floats, mask: Floats, lam: float) -> Floats:
    """Execution tokens move toward their completion's execution mean: lam*mu + (1-lam)*u.

    Keeps the execution mean and shrinks its variance by (1 - lam)^2; planning tokens and
    completions without execution tokens are unchanged.
    """
    lam = min(max(lam, 0.0), 1.0)
    u = clamped(u)
    return u.copy() if lam == 0.0 else _toward_mean(layout, u, mask, lam)


def sepa_amp(layout: Ragged, u: Floats, mask: Floats, lam: float, *, clamp: bool = False) -> Floats:
    """Execution tokens move away from their mean: (1+lam)*u - lam*mu (floored at 0 if clamp)."""
    lam = min(max(lam, 0.0), 1.0)
    u = clamped(u)
    if lam == 0.0:
        return u.copy()
    out = _toward_mean(layout, u, mask, -lam)
    return np.maximum(out, 0.0, out=out) if clamp else out


def mask_threshold(u: Floats, rho: float) -> float:
    """The k-th largest uncertainty of the group, k = max(1, floor(n * rho)); -inf keeps all."""
    if rho >= 1.0:
        return -math.inf
    n = u.shape[0]
    if n == 0:
        return 0.0
    k = max(1, math.floor(n * rho))
    return float(np.partition(u, n - k)[n - k])


def entropy_mask(tok: Floats, raw_u: Floats, rho: float) -> tuple[Floats, dict[str, float]]:
    """Keep tokens whose raw (pre-SEPA) uncertainty is in the group's top rho; zero the rest.

    rho <= 0 turns the mask off. Ties at the threshold are all kept.
    """
    if rho <= 0.0:
        return tok, {}
    u = clamped(raw_u)
    threshold = mask_threshold(u, rho)
    keep = u >= threshold
    total = tok.shape[0]
    fraction = float((~keep).sum()) / total if total else 0.0
    # rho >= 1 keeps everything; report the smallest kept value rather than -inf (not JSON).
    finite = threshold if math.isfinite(threshold) else (float(u.min()) if total else 0.0)
    return np.where(keep, tok, 0.0), {
        "entropy_mask_threshold": finite,
        "entropy_mask_fraction": fraction,
    }
