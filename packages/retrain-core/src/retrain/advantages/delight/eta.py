"""Delight temperature eta: fixed, or adaptive per group with an optional EMA across steps.

Adaptive eta puts a chosen fraction (`delight_eta_target_neutral_frac`) of the tokens inside
the gate's neutral band [0.4, 0.6]: eta = Q_q(|A * s|) / ln(1.5), clamped to [eta_min,
eta_max]. With a target ordering gap, a too-flat gate is sharpened (eta shrinks by at most
4x). The trainer feeds back the previous step's mean eta as `eta_prev` for the EMA.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrain.advantages.delight.gate import ETA_FLOOR, NEUTRAL_LOGIT, gates
from retrain.advantages.delight.metric import ordering_gaps
from retrain.advantages.ragged import Floats, Ragged, saturate


@dataclass(frozen=True)
class EtaParams:
    base: float = 1.0
    adaptive: bool = False
    target_neutral: float = 0.5
    target_gap: float = 0.0
    eta_min: float = 0.05
    eta_max: float = 5.0
    ema_decay: float = 0.0


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def resolve_eta(
    layout: Ragged, episode: Floats, s: Floats, p: EtaParams, eta_prev: float | None
) -> tuple[float, dict[str, float]]:
    """(eta for this group, its metrics `dg_eta`, `dg_eta_adaptive`)."""
    base = max(p.base, ETA_FLOOR)
    if not p.adaptive:
        return base, {"dg_eta": base, "dg_eta_adaptive": 0.0}
    lo = max(ETA_FLOOR, p.eta_min)
    hi = max(lo, p.eta_max)
    active = layout.expand(episode != 0)
    with np.errstate(over="ignore"):
        magnitudes = saturate(np.abs(layout.expand(episode) * s)[active])
    if magnitudes.size == 0:
        eta = base
    else:
        q = _clamp(p.target_neutral, 0.0, 1.0)
        eta = _clamp(float(np.quantile(magnitudes, q)) / NEUTRAL_LOGIT, lo, hi)
        target_gap = max(0.0, p.target_gap)
        if target_gap > 0:
            gaps, valid = ordering_gaps(layout, episode, gates(layout, episode, s, eta))
            if valid.any():
                gap = float(gaps[valid > 0].mean())
                if gap < target_gap:
                    eta = _clamp(eta * max(gap / target_gap, 0.25), lo, hi)
    if eta_prev is not None and p.ema_decay > 0:
        eta = _clamp(p.ema_decay * eta_prev + (1.0 - p.ema_decay) * eta, lo, hi)
    return eta, {"dg_eta": eta, "dg_eta_adaptive": 1.0}
