"""retrain's datums as Tinker's, with retrain's loss normalisation folded into them.

Tinker's losses are sums over every position of every datum of one `forward_backward`
(tinker docs, "Losses"); with r = exp(logprob - sampling logprob):

    importance_sampling   L = -sum_t r_t A_t
    ppo                   L = -sum_t min(r_t A_t, clip(r_t, lo, hi) A_t)
    cispo                 L = -sum_t sg(clip(r_t, lo, hi)) A_t logprob_t
    cross_entropy         L = -sum_t w_t logprob_t

retrain's loss is instead L = sum_t w_t l_t(A_t) over the sampled tokens (the datums' loss
masks), w_t the token's weight under `[training] loss_aggregation`: 1/N for the token mean
(the local backend's batch.token_weights; `fold_weights` here). Each loss above is positively
homogeneous in A (or w): l_t(c A) = c l_t(A) for c > 0, clip and min included. So sending
A'_t = w_t A_t makes Tinker's sum equal retrain's loss, and its gradient too, token by token,
for every aggregation: each is a positive per-token weighting fixed by the batch's shape.
A masked token with a zero advantage contributes nothing in either form.

Alignment: Tinker's position i reads `model_input[i]` and predicts `target_tokens[i]`, so a
datum of L tokens becomes L-1 positions: inputs tokens[:-1], targets tokens[1:], and the
logprob and advantage of token j (retrain's position j) move to position j-1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrain.backends.objective import clip_band
from retrain.types import Datum

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant")


def service_loss(mode: str, clip_eps: float, clip_eps_high: float) -> tuple[str, dict[str, float] | None]:
    """The service's loss for `[training] policy_loss_mode` and its thresholds: ppo for a
    clipped standard loss, cispo, else importance_sampling; the band is the local backend's
    (retrain.backends.objective). Other modes are refused when the config loads (the catalog's
    capabilities)."""
    band = clip_band(mode, clip_eps, clip_eps_high)
    if mode not in ("standard", "cispo"):
        raise ValueError(f"policy_loss_mode {mode!r} has no Tinker loss")
    if band is None:
        return "importance_sampling", None
    config = {"clip_low_threshold": band[0], "clip_high_threshold": band[1]}
    return ("ppo" if mode == "standard" else "cispo"), config


def action_masks(datums: Sequence[Datum]) -> list[np.ndarray]:
    """Per datum, over its L-1 predicted positions: the tokens that take part in the loss
    (its loss mask, types.Datum)."""
    return [np.asarray(d.loss_mask()[1:], dtype=bool) for d in datums]


def fold_weights(masks: Sequence[np.ndarray], aggregation: str = "token_mean", max_tokens: int = 0) -> list[np.ndarray]:
    """Per datum, each position's weight in the update's loss (0 off the mask).

    With N masked tokens over B datums, n_b in datum b and L = max_tokens: token_mean 1/N;
    seq_mean_token_mean 1/(B n_b); seq_mean_token_sum 1/B; constant 1/(B L).
    """
    rows = max(len(masks), 1)
    total = max(sum(int(m.sum()) for m in masks), 1)
    out = []
    for m in masks:
        f = m.astype(np.float64)
        if aggregation == "token_mean":
            out.append(f / total)
        elif aggregation == "seq_mean_token_mean":
            out.append(f / (rows * max(int(m.sum()), 1)))
        elif aggregation == "seq_mean_token_sum":
            out.append(f / rows)
        elif aggregation == "constant":
            if max_tokens <= 0:
                raise ValueError("loss_aggregation = constant needs max_tokens > 0")
            out.append(f / (rows * max_tokens))
        else:
            raise ValueError(f"unknown loss aggregation {aggregation!r} (one of {', '.join(AGGREGATIONS)})")
    return out


@dataclass(frozen=True)
class TinkerDatum:
    """One datum as Tinker takes it: model input ids and the named per-position inputs.
    `mask` (the loss mask over its positions) stays here: the diagnostics count it."""

    model_input: list[int]
    loss_fn_inputs: dict[str, np.ndarray]
    mask: np.ndarray


def rl_datums(datums: Sequence[Datum], aggregation: str = "token_mean", max_tokens: int = 0) -> list[TinkerDatum]:
    """Inputs of `importance_sampling` / `ppo`: targets, sampling logprobs, folded advantages."""
    masks = action_masks(datums)
    weights = fold_weights(masks, aggregation, max_tokens)
    return [TinkerDatum(list(d.tokens[:-1]), {
        "target_tokens": np.asarray(d.tokens[1:], dtype=np.int64),
        "logprobs": np.asarray(d.logprobs[1:], dtype=np.float32),
        "advantages": (np.asarray(d.advantages[1:], dtype=np.float64) * w).astype(np.float32),
    }, m) for d, w, m in zip(datums, weights, masks, strict=True)]


def sft_datums(datums: Sequence[Datum], loss_fn: str) -> list[TinkerDatum]:
    """Inputs of the supervised step: positive advantages mark target tokens, weighted by
    1 / (target tokens of the update) like the local backend's mean. cross_entropy takes them
    as `weights`; importance_sampling as advantages against zero sampling logprobs."""
    targets = [np.clip(np.asarray(d.advantages[1:], dtype=np.float64), 0.0, None) * m
               for d, m in zip(datums, action_masks(datums), strict=True)]
    total = max(sum(int((t > 0).sum()) for t in targets), 1)
    out = []
    for d, t in zip(datums, targets, strict=True):
        inputs: dict[str, np.ndarray] = {"target_tokens": np.asarray(d.tokens[1:], dtype=np.int64)}
        if loss_fn == "cross_entropy":
            inputs["weights"] = (t / total).astype(np.float32)
        else:
            inputs["logprobs"] = np.zeros(len(t), dtype=np.float32)
            inputs["advantages"] = (t / total).astype(np.float32)
        out.append(TinkerDatum(list(d.tokens[:-1]), inputs, t > 0))
    return out


def sdk_datums(types: Any, datums: Sequence[TinkerDatum]) -> list[Any]:
    """The SDK's `types.Datum`s (it converts numpy inputs to TensorData itself)."""
    return [types.Datum(model_input=types.ModelInput.from_ints(d.model_input), loss_fn_inputs=dict(d.loss_fn_inputs))
            for d in datums]


@dataclass(frozen=True)
class Evaluated:
    loss: float
    grads: list[np.ndarray]  # dL/d(logprob) per position: each token's weight in the update
    clip_fraction: float
    abs_kl: float


def evaluate(loss_fn: str, datums: Sequence[TinkerDatum], logprobs: Sequence[np.ndarray],
             config: dict[str, float] | None = None) -> Evaluated:
    """Tinker's documented loss of `datums` at the learner's `logprobs` (one array per datum,
    as `forward_backward` returns them), its gradient per position, and diagnostics over the
    masked positions, as the local backend counts them. The backend reports its step's loss with this; the
    parity tests compare it with the local backend's."""
    lo = (config or {}).get("clip_low_threshold", 0.8)
    hi = (config or {}).get("clip_high_threshold", 1.2)
    loss, grads, clipped, kl, counted = 0.0, [], 0, 0.0, 0
    for d, lp in zip(datums, logprobs, strict=True):
        lp = np.asarray(lp, dtype=np.float64)
        if loss_fn == "cross_entropy":
            w = d.loss_fn_inputs["weights"].astype(np.float64)
            loss += float(-(w * lp).sum())
            grads.append(-w)
            continue
        adv = d.loss_fn_inputs["advantages"].astype(np.float64)
        delta = lp - d.loss_fn_inputs["logprobs"].astype(np.float64)
        ratio = np.exp(delta)
        if loss_fn == "importance_sampling":
            loss += float(-(ratio * adv).sum())
            grads.append(-ratio * adv)
        elif loss_fn == "ppo":
            unclipped, bounded = ratio * adv, np.clip(ratio, lo, hi) * adv
            loss += float(-np.minimum(unclipped, bounded).sum())
            # the clipped branch is the smaller one (and flat) exactly when it moved
            active = unclipped <= bounded
            grads.append(np.where(active, -ratio * adv, 0.0))
            clipped += int((((ratio < lo) | (ratio > hi)) & d.mask).sum())
        elif loss_fn == "cispo":
            weight = np.clip(ratio, lo, hi)  # a constant of the gradient (stop-gradient)
            loss += float(-(weight * adv * lp).sum())
            grads.append(-weight * adv)
            clipped += int((((ratio < lo) | (ratio > hi)) & d.mask).sum())
        else:
            raise ValueError(f"unknown Tinker loss {loss_fn!r}")
        on = d.mask
        counted += int(on.sum())
        kl += float(np.abs(delta[on]).sum())
    n = max(counted, 1)
    return Evaluated(loss, grads, clipped / n, kl / n)
