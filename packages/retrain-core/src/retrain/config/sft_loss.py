"""The SFT loss a run uses: what the supervised trainer, the warmup and each backend read
(`[training] sft_loss_fn` with `auto` resolved)."""

from __future__ import annotations

from retrain.config.schema import TrainConfig


def effective_sft_loss(config: TrainConfig) -> str:
    """`sft_loss_fn` with `auto` resolved: cross_entropy for trainer = sft, else
    importance_sampling (the reference's choice for warmup)."""
    fn = config.training.sft_loss_fn
    if fn != "auto":
        return fn
    return "cross_entropy" if config.training.trainer == "sft" else "importance_sampling"
