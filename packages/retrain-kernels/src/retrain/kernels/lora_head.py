"""The LM head's low-rank delta, as the logprob paths (retrain.kernels.logprobs, .naive) and
the LoRA patch (retrain.kernels.lora) hand it to each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LoRAHead:
    """A low-rank delta on the LM head: the logits gain `scaling · (dropout(h) Aᵀ) Bᵀ`.

    `a` is lora_A.weight [r, H], `b` is lora_B.weight [V, r]. The rank-r product runs through
    ordinary autograd, so gradients reach `a`, `b` and h, and dropout works as in peft.
    """

    a: torch.Tensor
    b: torch.Tensor
    scaling: float
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None
