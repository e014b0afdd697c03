"""The Delight family as transforms (Delightful Policy Gradient, arXiv 2603.14608).

- `delight`: tok_t = A * g_t.
- `delight_sepa`: tok_t = A * ((1 - lam) + lam * g_t), annealing from plain PG (lam = 0) to DG.
- `hard_delight`: the same interpolation with the hard top-K gate.
Surprisal s_t = min(-logprob, 50) whatever `uncertainty_kind` says. lam is the
`delight_lambda` param when set, else the SEPA controller's lambda.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrain.advantages.delight.eta import EtaParams, resolve_eta
from retrain.advantages.delight.gate import gates, hard_keep, interpolate
from retrain.advantages.delight.metric import bias_metrics, gate_metrics
from retrain.advantages.delight.scale import NORM_MODES, NormMode, normalize
from retrain.advantages.ragged import Floats, Ragged
from retrain.advantages.uncertainty import surprisal

#: Every params key the Delight family reads; another `delight_*` key is refused by name.
PARAM_KEYS = (
    "delight_eta",
    "delight_eta_mode",
    "delight_eta_adaptive",
    "delight_norm_mode",
    "delight_normalize",
    "delight_lambda",
    "delight_k_frac",
    "delight_eta_target_neutral_frac",
    "delight_eta_target_ordering_gap",
    "delight_eta_min",
    "delight_eta_max",
    "delight_eta_ema_decay",
    "delight_eta_prev",
)


@dataclass(frozen=True)
class DelightParams:
    norm: NormMode = "none"
    eta: EtaParams = field(default_factory=EtaParams)
    lam: float | None = None
    k_frac: float = 0.2
    eta_prev: float | None = None


def _number(params: Mapping[str, Any], key: str, default: float) -> float:
    raw = params.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"{key} must be a number, got {raw!r}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{key} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{key} must be finite, got {raw!r}")
    return value


def _flag(params: Mapping[str, Any], key: str) -> bool | None:
    raw = params.get(key)
    if raw is None:
        return None
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return raw.strip().lower() in ("true", "1", "yes")
    raise ValueError(f"{key} must be true or false, got {raw!r}")


def _choice(params: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> str | None:
    raw = params.get(key)
    if raw is None:
        return None
    value = str(raw).strip().lower()
    if value not in choices:
        raise ValueError(f"{key} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def check_keys(params: Mapping[str, Any]) -> None:
    """ValueError naming the first `delight_*` key that no Delight transform reads."""
    unknown = sorted(k for k in params if k.startswith("delight") and k not in PARAM_KEYS)
    if unknown:
        guess = difflib.get_close_matches(unknown[0], PARAM_KEYS, n=1)
        hint = f"did you mean {guess[0]!r}? " if guess else ""
        raise ValueError(f"unknown Delight param {unknown[0]!r} ({hint}known: {', '.join(PARAM_KEYS)})")


def parse_params(params: Mapping[str, Any], *, default_norm: NormMode) -> DelightParams:
    """Typed Delight params from a transform params table; bad values and unknown `delight_*`
    keys raise ValueError. Other keys belong to the rest of the pipeline (uncertainty kind,
    mask rho) and are not the Delight transforms' to judge."""
    check_keys(params)
    norm = _choice(params, "delight_norm_mode", NORM_MODES)
    if norm is None:
        legacy = _flag(params, "delight_normalize")
        norm = default_norm if legacy is None else ("scale" if legacy else "none")
    mode = _choice(params, "delight_eta_mode", ("fixed", "adaptive"))
    adaptive = (
        mode == "adaptive" if mode is not None else bool(_flag(params, "delight_eta_adaptive"))
    )
    decay = _number(params, "delight_eta_ema_decay", 0.0)
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"delight_eta_ema_decay must be in [0, 1), got {decay}")
    k_frac = _number(params, "delight_k_frac", 0.2)
    if not 0.0 < k_frac <= 1.0:
        raise ValueError(f"delight_k_frac must be in (0, 1], got {k_frac}")
    eta = EtaParams(
        base=_number(params, "delight_eta", 1.0),
        adaptive=adaptive,
        target_neutral=_number(params, "delight_eta_target_neutral_frac", 0.5),
        target_gap=_number(params, "delight_eta_target_ordering_gap", 0.0),
        eta_min=_number(params, "delight_eta_min", 0.05),
        eta_max=_number(params, "delight_eta_max", 5.0),
        ema_decay=decay,
    )
    lam = (
        _number(params, "delight_lambda", 0.0) if params.get("delight_lambda") is not None else None
    )
    prev = (
        _number(params, "delight_eta_prev", 0.0)
        if params.get("delight_eta_prev") is not None
        else None
    )
    return DelightParams(norm=norm, eta=eta, lam=lam, k_frac=k_frac, eta_prev=prev)  # type: ignore[arg-type]


def delight(
    layout: Ragged,
    episode: Floats,
    logprobs: Floats,
    p: DelightParams,
    *,
    sepa_lambda: float | None,
    eta_prev: float | None,
) -> tuple[Floats, dict[str, float]]:
    """`delight` (sepa_lambda None) or `delight_sepa` (interpolated by lambda)."""
    s = normalize(layout, surprisal(logprobs), p.norm)
    prev = eta_prev if eta_prev is not None else p.eta_prev
    eta, metrics = resolve_eta(layout, episode, s, p.eta, prev)
    gate = gates(layout, episode, s, eta)
    if sepa_lambda is None:
        tok = layout.expand(episode) * gate
    else:
        lam = p.lam if p.lam is not None else sepa_lambda
        lam = min(max(lam, 0.0), 1.0)
        tok = interpolate(layout, episode, gate, lam)
        metrics["dg_lambda"] = lam
    metrics.update(gate_metrics(layout, episode, gate, tok))
    return tok, metrics


def hard_delight(
    layout: Ragged, episode: Floats, logprobs: Floats, p: DelightParams, *, sepa_lambda: float
) -> tuple[Floats, dict[str, float]]:
    lam = min(max(p.lam if p.lam is not None else sepa_lambda, 0.0), 1.0)
    keep = hard_keep(layout, episode, surprisal(logprobs), p.k_frac)
    tok = interpolate(layout, episode, keep, lam)
    active = float(np.count_nonzero(tok)) / layout.total if layout.total else 0.0
    metrics = {"hard_dg_active_frac": active, "hard_dg_k_frac": p.k_frac, "hard_dg_lambda": lam}
    bias = bias_metrics(layout, episode, tok, prefix="hard_dg_net_bias")
    metrics["hard_dg_net_bias"] = bias["hard_dg_net_bias"]
    return tok, metrics
