"""The sampler mismatch: trainer vs sampler logprobs of the tokens being trained on.

An inference server computes the behaviour logprobs with its own kernels (and, with
`max_async_level = 1`, from weights one update old), so they differ from what the trainer
computes for the same tokens; that gap is what destabilises RL on inference servers, and it
is reported every step (`engine/logprob_gap_max`, `engine/logprob_gap_mean`, over the
tokens in the loss).

With `[inference] importance_sampling_correction`, each token's loss is weighted by the
truncated importance ratio w = min(exp(trainer - sampler), cap) and the policy ratio is
taken against the trainer's own (detached) logprobs — token-level truncated importance
sampling, TRL's `vllm_importance_sampling_correction`. Without it the sampler's logprobs are
the ratio's anchor, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Mismatch:
    correction: bool = False
    cap: float = 2.0
    tokens: int = 0
    gap_sum: float = 0.0
    gap_max: float = 0.0
    weight_sum: float = 0.0
    truncated: int = 0

    def anchor(self, new: torch.Tensor, sampler: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the logprobs the policy ratio is taken against, the per-token loss weight or None);
        records the gap. `new` [N] has gradient, `sampler` [N] is the datums' logprobs."""
        trainer = new.detach().float()
        gap = (trainer - sampler.float()).abs()
        if gap.numel():
            self.tokens += gap.numel()
            self.gap_sum += float(gap.sum())
            self.gap_max = max(self.gap_max, float(gap.max()))
        if not self.correction:
            return sampler, None
        ratio = (trainer - sampler.float()).exp()
        weight = ratio.clamp(max=self.cap)
        self.weight_sum += float(weight.sum())
        self.truncated += int((ratio > self.cap).sum())
        return trainer, weight

    def metrics(self) -> dict[str, float]:
        n = max(self.tokens, 1)
        out = {"engine/logprob_gap_max": round(self.gap_max, 6), "engine/logprob_gap_mean": round(self.gap_sum / n, 6)}
        if self.correction:
            out["engine/is_weight_mean"] = round(self.weight_sum / n, 6)
            out["engine/is_truncated_fraction"] = round(self.truncated / n, 6)
        return out
