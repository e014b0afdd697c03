"""The naive definition of selected-token logprobs, the oracle the kernels are held to: full
fp32 logits [N, V], log_softmax, gather. `retrain.kernels.logprobs` re-exports it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from retrain.kernels.matmul import F32

if TYPE_CHECKING:
    from retrain.kernels.lora_head import LoRAHead


def reference_selected_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    lora: LoRAHead | None = None,
    temperature: float = 1.0,
    return_entropy: bool = False,
    ignore_index: int = -100,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The naive definition: full fp32 logits, log_softmax, gather (what the kernels avoid)."""
    h = hidden.reshape(-1, hidden.shape[-1]).float()
    t = targets.reshape(-1)
    logits = h @ weight.float().t()
    if lora is not None:
        x = lora.dropout(h) if lora.dropout is not None else h
        logits = logits + lora.scaling * (x @ lora.a.float().t()) @ lora.b.float().t()
    if bias is not None:
        logits = logits + bias.float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    valid = t != ignore_index
    safe = torch.where(valid, t, 0)
    zero = torch.zeros((), dtype=F32, device=logp.device)
    lp = torch.where(valid, logp.gather(1, safe[:, None]).squeeze(1), zero).reshape(targets.shape)
    if not return_entropy:
        return lp
    ent = -(logp.exp() * logp).sum(dim=-1)
    return lp, torch.where(valid, ent, zero).reshape(targets.shape)
