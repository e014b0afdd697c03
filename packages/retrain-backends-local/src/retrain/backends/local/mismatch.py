"""The sampler mismatch: trainer vs sampler logprobs of the tokens being trained on.

An inference server computes the behaviour logprobs with its own kernels (and, with
`max_async_level = 1`, from weights one update old), so they differ from what the trainer
computes for the same tokens; that gap is what destabilises RL on inference servers, and it
is reported every step over the tokens in the loss: `engine/logprob_gap_max` and
`engine/logprob_gap_mean` (|trainer - sampler|) and `engine/mismatch_kl`, the k3 estimate
mean over tokens of KL(sampler || trainer) (the tokens were drawn from the sampler):
r - 1 - log r with r = p_trainer / p_sampler, never negative.

With `[inference] importance_sampling_correction`, each token's loss is weighted by an
importance ratio w of trainer to sampler and the policy ratio is taken against the trainer's
own (detached) logprobs; without it the sampler's logprobs are the ratio's anchor, as before.
`importance_sampling_mode` (TRL's `vllm_importance_sampling_mode`) chooses w:

    token_truncate     w_t = min(rho_t, cap),          rho_t = exp(trainer_t - sampler_t)
    token_mask         w_t = rho_t, or 0 where rho_t > cap
    sequence_truncate  w_t = min(rho_i, cap),          rho_i = exp(sum over the completion's
    sequence_mask      w_t = rho_i, or 0 where rho_i > cap      tokens of trainer - sampler)

The sequence ratio is the completion's likelihood ratio, the product of its tokens' (TRL's; the
GSPO policy ratio is a mean instead, loss.py). Reported with the correction on, over the
level's units (tokens, or completions): `engine/is_ratio_mean`, `engine/is_ratio_max` (rho
before the cap), `engine/is_weight_mean` (w), and the share of units above the cap,
`engine/is_truncated_fraction` (truncate modes) or `engine/is_masked_fraction` (mask modes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from retrain.backends.local.loss import per_sequence

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass
class Mismatch:
    correction: bool = False
    cap: float = 2.0
    mode: str = "token_truncate"
    tokens: int = 0
    gap_sum: float = 0.0
    gap_max: float = 0.0
    kl_sum: float = 0.0
    units: int = 0  # tokens or completions the correction weighed
    ratio_sum: float = 0.0
    ratio_max: float = 0.0
    weight_sum: float = 0.0
    over: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown importance_sampling_mode {self.mode!r} (one of {', '.join(MODES)})")

    @property
    def level(self) -> str:
        return self.mode.split("_")[0]

    @property
    def masks(self) -> bool:
        return self.mode.endswith("_mask")

    def fresh(self) -> Mismatch:
        """The same settings with the counters at zero."""
        return Mismatch(self.correction, self.cap, self.mode)

    def anchor(self, new: torch.Tensor, sampler: torch.Tensor, rows: torch.Tensor | None = None,
               record: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the logprobs the policy ratio is taken against, the per-token loss weight or None);
        records the gap unless `record` is false. `new` [N] has gradient, `sampler` [N] is the
        datums' logprobs, `rows` [N] each token's row (needed by the sequence modes)."""
        trainer = new.detach().float()
        diff = trainer - sampler.float()
        if record and diff.numel():
            gap = diff.abs()
            self.tokens += diff.numel()
            self.gap_sum += float(gap.sum())
            self.gap_max = max(self.gap_max, float(gap.max()))
            self.kl_sum += float((diff.exp() - 1 - diff).sum())
        if not self.correction:
            return sampler, None
        if self.level == "sequence":
            if rows is None:
                raise ValueError("sequence-level importance sampling needs each token's row")
            log_ratio = per_sequence(diff, rows, "sum")
        else:
            log_ratio = diff
        ratio = log_ratio.exp()
        over = ratio > self.cap
        weight = ratio.masked_fill(over, 0.0) if self.masks else ratio.clamp(max=self.cap)
        if record and diff.numel():
            unit = _first_of_each_row(rows) if self.level == "sequence" and rows is not None else slice(None)
            self.units += int(ratio[unit].numel())
            self.ratio_sum += float(ratio[unit].sum())
            self.ratio_max = max(self.ratio_max, float(ratio[unit].max()))
            self.weight_sum += float(weight[unit].sum())
            self.over += int(over[unit].sum())
        return trainer, weight

    def metrics(self) -> dict[str, float]:
        n = max(self.tokens, 1)
        out = {"engine/logprob_gap_max": round(self.gap_max, 6), "engine/logprob_gap_mean": round(self.gap_sum / n, 6),
               "engine/mismatch_kl": round(self.kl_sum / n, 8)}
        if self.correction:
            units = max(self.units, 1)
            out["engine/is_ratio_mean"] = round(self.ratio_sum / units, 6)
            out["engine/is_ratio_max"] = round(self.ratio_max, 6)
            out["engine/is_weight_mean"] = round(self.weight_sum / units, 6)
            share = "engine/is_masked_fraction" if self.masks else "engine/is_truncated_fraction"
            out[share] = round(self.over / units, 6)
        return out


def _first_of_each_row(rows: torch.Tensor) -> torch.Tensor:
    """Boolean [N]: the first token of each row's run (tokens are in row-major order)."""
    first = torch.ones_like(rows, dtype=torch.bool)
    first[1:] = rows[1:] != rows[:-1]
    return first
