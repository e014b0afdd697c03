"""Delight gates: g_t = sigmoid(A * s_t / eta), and the sign-aware hard top-K gate.

With A > 0 high-surprisal tokens ("fork points") get a gate near 1; with A < 0 they get a
gate near 0, so a blunder in a wrong answer is punished less than the routine tokens around
it. The sigmoid saturates exactly beyond |x| > 20 so gates are reproducible bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from retrain.advantages.ragged import Floats, Ragged, saturate

ETA_FLOOR = 1e-8
SATURATION = 20.0


def sigmoid(x: Floats) -> Floats:
    out = np.clip(x, -SATURATION, SATURATION)
    np.negative(out, out=out)
    np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)
    out[x > SATURATION] = 1.0
    out[x < -SATURATION] = 0.0
    return out


def gates(layout: Ragged, episode: Floats, s: Floats, eta: float) -> Floats:
    """Per-token gate for each completion's episode advantage A_i."""
    inv = 1.0 / max(eta, ETA_FLOOR)
    with np.errstate(over="ignore"):
        # Saturating A / eta first keeps a zero surprisal at x = 0 (inf * 0 would be NaN).
        x = layout.expand(saturate(episode * inv))
        x *= s
    return sigmoid(x)


def hard_keep(layout: Ragged, episode: Floats, s: Floats, k_frac: float) -> Floats:
    """1.0 for the k = max(1, floor(n * k_frac)) kept tokens of each completion, else 0.

    Tokens are ranked by surprisal, descending when A > 0 (keep fork points) and ascending when
    A < 0 (keep routine tokens); the sort is stable, so ties keep index order. A = 0 keeps none.
    """
    if layout.total == 0:
        return np.zeros(0)
    sign = layout.expand(np.sign(episode))
    k = np.maximum(1, np.floor(layout.lengths * k_frac).astype(np.int64))
    keep = layout.top_k_mask(np.where(sign > 0, s, -s), k) & (sign != 0)
    out: Floats = keep.astype(np.float64)
    return out


def interpolate(layout: Ragged, episode: Floats, gate: Floats, lam: float) -> Floats:
    """tok_t = A * ((1 - lam) + lam * g_t); lam is clamped to [0, 1]."""
    lam = min(max(lam, 0.0), 1.0)
    a = layout.expand(episode)
    if lam == 0.0:
        return a.copy()
    return a * ((1.0 - lam) + lam * gate)


NEUTRAL_LOGIT = math.log(1.5)
