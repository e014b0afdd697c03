"""What one policy-gradient pass counts over its real micro-batches, and the step's metrics.

Fractions (clip, covariance, |KL|) are summed weighted by each micro-batch's action tokens
and divided by the step's action tokens at the end, so micro-batching does not change them.
Under torchrun the loss, fraction and ECHO sums are summed over ranks (the reference-KL
statistics stay this rank's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from retrain.backends.local.loss import PolicyLoss


@dataclass
class PolicyTally:
    loss: float = 0.0
    clip: float = 0.0
    cov: float = 0.0
    kl: float = 0.0
    echo: float = 0.0
    ref_kl_sum: float = 0.0
    ref_kl_max: float = float("-inf")

    def add_tokens(self, res: PolicyLoss, n: int) -> None:
        self.clip += res.clip_fraction * n
        self.cov += res.cov_fraction * n
        self.kl += res.abs_kl * n

    def add_reference(self, penalty: torch.Tensor) -> None:
        self.ref_kl_sum += float(penalty.detach().sum())
        self.ref_kl_max = max(self.ref_kl_max, float(penalty.detach().max()))

    def sum_ranks(self, device: torch.device) -> None:
        from retrain.backends.local import distributed

        self.loss, self.clip, self.cov, self.kl, self.echo = distributed.sum_floats(
            (self.loss, self.clip, self.cov, self.kl, self.echo), device)

    def metrics(self, tokens: int, echo_tokens: int, *, reference: bool) -> dict[str, float | int | str]:
        """The step's metrics over its `tokens` action tokens (ECHO's only where it had any)."""
        out: dict[str, float | int | str] = {}
        if echo_tokens:
            out.update({"echo/loss": self.echo, "echo/tokens": echo_tokens})
        denom = max(tokens, 1)
        out.update({"clip_fraction": self.clip / denom, "policy/cov_fraction": self.cov / denom,
                    "policy/abs_kl": self.kl / denom})
        if reference:
            out.update({"kl/mean": self.ref_kl_sum / denom, "kl/max": self.ref_kl_max})
        return out
