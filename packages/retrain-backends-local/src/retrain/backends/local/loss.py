"""Policy and supervised losses over the selected (action) tokens of a batch.

Every loss function returns per-token losses for the N action tokens; the caller weighs them
with `token_weights`, computed once for the whole update, so the gradient is the one of the
configured aggregation over the whole batch whatever the micro-batch split. Token selections
that depend on the whole batch (kl_cov's top-k, clip_cov's random picks) are likewise computed
once per update by `select_tokens` and passed in. What each policy loss computes is its
objective's (retrain.backends.objectives); this module applies it to the local backend's
tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from retrain.backends.objective import LossTerms, Objective, SelectTerms, objective_of
from retrain.config.schema import LOSS_AGGREGATIONS, RATIO_LEVELS
from retrain.plugins.resolve import PluginError


def token_weights(aggregation: str, action: torch.Tensor, max_tokens: int) -> torch.Tensor:
    """[B, T] weight of each position: the update's loss is sum(weight * per-token loss).

    `action` [B, T] marks the sampled tokens of each row (its loss mask). With N action tokens
    in B rows, n_b in row b and the step's token budget L = max_tokens:
    token_mean w = 1/N; seq_mean_token_mean w = 1/(B n_b); seq_mean_token_sum w = 1/B;
    constant w = 1/(B L). A row without action tokens still counts in B.
    """
    mask = action.to(torch.float32)
    rows = max(int(action.shape[0]), 1)
    if aggregation == "token_mean":
        return mask / max(float(mask.sum()), 1.0)
    if aggregation == "seq_mean_token_mean":
        return mask / (rows * mask.sum(-1, keepdim=True).clamp_min(1.0))
    if aggregation == "seq_mean_token_sum":
        return mask / rows
    if aggregation == "constant":
        if max_tokens <= 0:
            raise ValueError("loss_aggregation = constant needs max_tokens > 0")
        return mask / (rows * max_tokens)
    raise ValueError(f"unknown loss_aggregation {aggregation!r} (one of {', '.join(LOSS_AGGREGATIONS)})")


@dataclass(frozen=True)
class PolicyLossConfig:
    """The `[training]` values of the policy loss, and the objective `mode` names
    (retrain.backends.objective): its record says how to clip, select and compute."""

    mode: str = "standard"  # a built-in policy loss, a registered objective, or a dotted path
    level: str = "token"  # token | sequence: the ratio's level (GSPO at sequence level)
    clip_eps: float = 0.0
    clip_eps_high: float = 0.0
    clip_ratio_c: float = 0.0
    kl_cov_percent: float = 0.2
    kl_cov_coef: float = 1.0
    clip_cov_ratio: float = 0.0002
    clip_cov_min: float = 1.0
    clip_cov_max: float = 5.0
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    search_paths: tuple[str, ...] = ("plugins",)
    objective: Objective = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            found = objective_of(self.mode, self.search_paths)
        except (LookupError, PluginError) as exc:
            raise ValueError(f"unknown policy_loss_mode {self.mode!r}: {exc}") from None
        object.__setattr__(self, "objective", found)
        if self.level not in RATIO_LEVELS:
            raise ValueError(f"unknown importance_sampling_level {self.level!r} (one of {', '.join(RATIO_LEVELS)})")
        if self.level == "sequence" and found.token_only:
            raise ValueError(f"policy_loss_mode {self.mode!r} takes token-level ratios only")

    @property
    def needs_selection(self) -> bool:
        return self.objective.select is not None

    def band(self) -> tuple[float, float]:
        """(lo, hi) of the ratio clip for the current mode; (0, inf) when it does not clip."""
        return self.objective.clip_band(self.clip_eps, self.clip_eps_high) or (0.0, math.inf)


def per_sequence(values: torch.Tensor, rows: torch.Tensor, reduce: str) -> torch.Tensor:
    """[N] -> [N]: each token's value replaced by the sum (`reduce = "sum"`) or the mean
    (`"mean"`) of its sequence's values, with gradient to every token of the sequence.
    `rows` [N] is each token's row (sequence) index."""
    if values.numel() == 0:
        return values
    count = int(rows.max()) + 1
    total = values.new_zeros(count).index_add(0, rows, values)
    if reduce == "mean":
        total = total / torch.bincount(rows, minlength=count).clamp_min(1).to(values.dtype)
    elif reduce != "sum":
        raise ValueError(f"unknown reduction {reduce!r}")
    return total[rows]


def select_tokens(cfg: PolicyLossConfig, new_lp: torch.Tensor, old_lp: torch.Tensor, adv: torch.Tensor,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Boolean mask over all N action tokens of the update (no gradient): the tokens a
    selecting objective picks (kl_cov's top-k by covariance, clip_cov's random picks); none
    for the others."""
    new_lp, old_lp, adv = new_lp.detach().float(), old_lp.float(), adv.float()
    if new_lp.numel() == 0 or cfg.objective.select is None:
        return torch.zeros(new_lp.numel(), dtype=torch.bool, device=new_lp.device)
    lo, hi = cfg.band()
    return cfg.objective.select(cfg, SelectTerms(torch, new_lp, old_lp, adv, lo, hi, generator))


@dataclass
class PolicyLoss:
    per_token: torch.Tensor  # [N], with gradient
    ratio: torch.Tensor  # [N], with gradient: each token's policy ratio (its sequence's at sequence level)
    clip_fraction: float
    cov_fraction: float
    abs_kl: float


def policy_loss(cfg: PolicyLossConfig, new_lp: torch.Tensor, old_lp: torch.Tensor, adv: torch.Tensor,
                selected: torch.Tensor | None = None, rows: torch.Tensor | None = None) -> PolicyLoss:
    """Per-token policy loss for action tokens (spec algorithms.md §9.1 and its worked examples;
    docs/advantages.md, "Policy losses"): the objective's loss (retrain.backends.objectives).

    The ratio r is exp(new - old) per token, or at sequence level each sequence's
    exp(mean over its tokens of new - old) given to all of its tokens (`rows` [N], each token's
    sequence), with gradient through every token of the sequence: GSPO, TRL's
    `importance_sampling_level = "sequence"`.

    Dual clip (`clip_ratio_c > 0`) caps the loss of negative-advantage tokens of the
    objectives whose loss is a ratio times -A (standard, kl_cov, clip_cov) at -A * c; the
    reference applied it on Tinker only, we apply it wherever it is configured.
    `clip_fraction` is the share of tokens whose ratio lies outside the band (at sequence
    level, the tokens of the sequences outside it), or of those a clipping selection picked.
    """
    objective = cfg.objective
    old_lp, adv = old_lp.to(new_lp.dtype), adv.to(new_lp.dtype)
    delta = new_lp - old_lp
    n = max(new_lp.numel(), 1)
    abs_kl = float(delta.detach().abs().sum()) / n
    if cfg.level == "sequence":
        if rows is None:
            raise ValueError("sequence-level ratios need each token's row")
        log_ratio = per_sequence(delta, rows, "mean")
    else:
        log_ratio = delta
    ratio = log_ratio.exp()
    if selected is None:
        selected = torch.zeros_like(new_lp, dtype=torch.bool)
    lo, hi = cfg.band()
    outside = (ratio.detach() < lo) | (ratio.detach() > hi)
    clip_fraction = float(outside.sum()) / n
    cov_fraction = 0.0
    loss = objective.loss(cfg, LossTerms(torch, new_lp, old_lp, adv, ratio, log_ratio, delta, selected, lo, hi))
    if objective.select is not None:
        cov_fraction = float(selected.sum()) / n
        if objective.selection_clips:
            clip_fraction = cov_fraction
    if cfg.clip_ratio_c > 0 and objective.dual_clip:
        capped = torch.minimum(loss, -adv * cfg.clip_ratio_c)
        loss = torch.where(adv < 0, capped, loss)
    return PolicyLoss(loss, ratio, clip_fraction, cov_fraction, abs_kl)


def sft_loss(kind: str, new_lp: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per-token supervised loss. cross_entropy: -w log p. importance_sampling: -w p, the RL
    loss with zero old logprobs (its gradient vanishes where p is small; prefer cross_entropy
    from a random initialisation)."""
    weight = weight.to(new_lp.dtype)
    if kind == "cross_entropy":
        return -new_lp * weight
    if kind == "importance_sampling":
        return -new_lp.exp() * weight
    raise ValueError(f"unknown sft loss {kind!r}")


def kl_penalty(estimator: str, new_lp: torch.Tensor, ref_lp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) at the sampled tokens, with gradient
    through `new_lp`; r = ref - new. k1 = -r (unbiased, can be negative), k2 = r^2 / 2,
    k3 = exp(r) - r - 1 (unbiased and never negative; TRL GRPO's `per_token_kl`).

    The loss weighs it by the token's importance ratio p / p_old (the caller's job): the
    tokens were sampled from the old policy, and the ratio makes the penalty's gradient the
    unbiased reverse-KL gradient (DeepSeek-V3.2; TRL's default `use_bias_correction_kl`)."""
    r = ref_lp.to(new_lp.dtype) - new_lp
    if estimator == "k1":
        return -r
    if estimator == "k2":
        return 0.5 * r * r
    if estimator == "k3":
        return torch.exp(r) - r - 1
    raise ValueError(f"unknown kl_estimator {estimator!r} (one of k1, k2, k3)")
