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
    floor: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The naive definition: full fp32 logits, log_softmax, gather (what the kernels avoid);
    with `floor`, the log_softmax runs over each row's logits at or above it and its target."""
    h = hidden.reshape(-1, hidden.shape[-1]).float()
    t = targets.reshape(-1)
    logits = h @ weight.float().t()
    if lora is not None:
        x = lora.dropout(h) if lora.dropout is not None else h
        logits = logits + lora.scaling * (x @ lora.a.float().t()) @ lora.b.float().t()
    if bias is not None:
        logits = logits + bias.float()
    z = logits / temperature
    valid = t != ignore_index
    safe = torch.where(valid, t, 0)
    if floor is not None:
        drop = z < floor.reshape(-1, 1).float()
        drop[torch.arange(z.shape[0]), safe] = False
        z = z.masked_fill(drop, float("-inf"))
    logp = torch.log_softmax(z, dim=-1)
    zero = torch.zeros((), dtype=F32, device=logp.device)
    lp = torch.where(valid, logp.gather(1, safe[:, None]).squeeze(1), zero).reshape(targets.shape)
    if not return_entropy:
        return lp
    kept = torch.where(torch.isfinite(logp), logp, zero)  # 0 · log 0 = 0 for a truncated id
    ent = -(logp.exp() * kept).sum(dim=-1)
    return lp, torch.where(valid, ent, zero).reshape(targets.shape)
