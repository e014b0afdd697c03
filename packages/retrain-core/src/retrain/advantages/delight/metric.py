"""Delight diagnostics (`dg_*`), computed on the gates of the rollouts with A != 0.

Group-level values; the step log averages them over groups. A key is omitted when it has no
data (no rollout with A != 0, no rollout long enough for an ordering gap), so averages are
never polluted by placeholder zeros.
"""

from __future__ import annotations

import numpy as np

from retrain.advantages.ragged import Floats, Ragged


def ordering_gaps(layout: Ragged, episode: Floats, gate: Floats) -> tuple[Floats, Floats]:
    """(gap per completion, 1.0 where defined): mean gate of the higher-surprisal half minus
    that of the lower half, sign-flipped when A < 0; defined for A != 0 and >= 2 tokens.

    Within a completion the gate is monotone in surprisal (increasing when A > 0, decreasing
    when A < 0), so after the sign flip the gap is always mean(largest half of the gates) -
    mean(smallest half): no sort by surprisal is needed, and tied surprisals cannot matter.
    """
    half = layout.lengths // 2
    valid = (episode != 0) & (layout.lengths >= 2)
    if layout.total == 0 or not valid.any():
        return np.zeros(layout.n), valid.astype(np.float64)
    bottom, top = layout.half_sums(gate)
    gap = (top - bottom) / np.where(half > 0, half, 1).astype(np.float64)
    return np.where(valid, gap, 0.0), valid.astype(np.float64)


def _mean(values: Floats) -> float:
    return float(values.mean())


def gate_metrics(layout: Ragged, episode: Floats, gate: Floats, tok: Floats) -> dict[str, float]:
    out: dict[str, float] = {}
    active = layout.expand(episode != 0)
    g = gate[active]
    if g.size:
        signs = layout.expand(np.sign(episode))[active]
        out.update(
            {
                "dg_gate_mean": _mean(g),
                "dg_gate_std": float(g.std()),
                "dg_gate_min": float(g.min()),
                "dg_gate_max": float(g.max()),
                "dg_breakthrough_frac": _mean(g > 0.8),
                "dg_suppressed_frac": _mean(g < 0.2),
                "dg_neutral_frac": _mean((g >= 0.4) & (g <= 0.6)),
            }
        )
        for label, pick in (("pos", signs > 0), ("neg", signs < 0)):
            if pick.any():
                out[f"dg_gate_mean_{label}"] = _mean(g[pick])
    gaps, valid = ordering_gaps(layout, episode, gate)
    for label, pick in (
        ("", valid > 0),
        ("_pos", (valid > 0) & (episode > 0)),
        ("_neg", (valid > 0) & (episode < 0)),
    ):
        if pick.any():
            out[f"dg_gate_ordering_gap{label}"] = _mean(gaps[pick])
    out.update(bias_metrics(layout, episode, tok, prefix="dg_net_advantage_bias"))
    if layout.total:
        out["dg_token_adv_std"] = float(tok.std())
        long = layout.lengths >= 2
        if long.any():
            out["dg_within_rollout_adv_var"] = _mean((layout.std(tok) ** 2)[long])
    return out


def bias_metrics(layout: Ragged, episode: Floats, tok: Floats, *, prefix: str) -> dict[str, float]:
    """Net credit added by the transform: sum(tok) - sum_i A_i * n_i (and per token)."""
    bias = float(tok.sum() - float(np.dot(episode, layout.lengths.astype(np.float64))))
    out = {prefix: bias}
    if layout.total:
        out[prefix + "_per_token"] = bias / layout.total
    return out
