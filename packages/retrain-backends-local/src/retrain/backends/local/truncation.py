"""The sampler's truncation (top-k, top-p, min-p) applied to the trainer's logprobs.

retrain's engine draws each token from softmax(logits / T) truncated by top-k, then the top-p
nucleus of the renormalised rest, then min-p relative to the most likely token, and returns
the token's logprob under that truncated, renormalised distribution
(retrain.inference_engine.pytorch.choice). The trainer scores the token the same way: at each
sampled position it recomputes the kept set from its own logits with the same rule, in the
same order, and normalises over it, so an on-policy ratio is 1 (and not the kept mass Z) and
every loss that reads the ratio, and the sampler-mismatch correction, sees the policy's change
and the engine's numerics, never the truncation.

Each filter keeps a prefix of the vocabulary sorted by logit, so a row's kept set is "every
logit at or above a floor". The floor is put halfway between the last kept and the first
dropped logit: the logprob kernels recompute the logits with other products than this pass,
and a floor on a kept logit itself could drop it by one rounding. The sampled token always
counts, even where the trainer's logits would have dropped it (its logprob then stays
finite). Ties exactly at the boundary are all kept (the engine's sort broke them one way).

The floors need each position's full vocabulary row, which the selected-token path never
forms: they are computed without gradient, from the selected positions' hidden states only,
in row chunks, and handed to the kernels (retrain.kernels.selected_logprobs `floor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from retrain.inference_engine.pytorch.choice import truncate_sorted

# Logits alive at once while finding floors (fp32; the sort and its cumulative sum add a few more)
CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Truncation:
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0

    @classmethod
    def of(cls, top_p: float, top_k: int, min_p: float, temperature: float) -> Truncation | None:
        """The rule the engine applies with these settings; None when it keeps every token
        (no filter, or greedy decoding, which draws without truncating)."""
        if temperature <= 0 or (top_p >= 1.0 and top_k <= 0 and min_p <= 0.0):
            return None
        return cls(top_p, top_k, min_p)

    def floor(self, z: torch.Tensor) -> torch.Tensor:
        """[n] floors of scaled logits z [n, V] (fp32): the engine's kept set is z >= floor."""
        sorted_z = torch.sort(z, dim=-1, descending=True).values
        kept = truncate_sorted((sorted_z - torch.logsumexp(z, dim=-1, keepdim=True)).exp_(), self.top_k,
                               self.top_p, self.min_p)
        vocab = kept.shape[-1]
        count = (kept > 0).sum(dim=-1).clamp(1, vocab)  # each filter keeps a prefix
        last = sorted_z.gather(1, (count - 1)[:, None]).squeeze(1)
        first_dropped = sorted_z.gather(1, count.clamp(max=vocab - 1)[:, None]).squeeze(1)
        return torch.where(count < vocab, (last + first_dropped) / 2, float("-inf"))

    def floors(self, hidden: torch.Tensor, head: Any, temperature: float, rows: torch.Tensor | None = None,
               vocab: int = 0) -> torch.Tensor:
        """[N] floors for hidden states [N, H] under the LM head `head` (its logits, a
        soft-capped head's included, over `vocab` ids); `rows` [N] bool marks the positions the
        sampler truncated (the others get -inf: their whole vocabulary)."""
        out = torch.full((hidden.shape[0],), float("-inf"), dtype=torch.float32, device=hidden.device)
        index = torch.arange(hidden.shape[0], device=hidden.device) if rows is None else rows.nonzero().squeeze(1)
        if index.numel() == 0:
            return out
        logits = head_logits(head)
        step = max(1, CHUNK_ELEMENTS // max(1, vocab or vocab_size(head)))
        with torch.no_grad():
            for start in range(0, index.numel(), step):
                at = index[start:start + step]
                z = logits(hidden[at].detach()).float()
                if temperature != 1.0:
                    z = z / temperature
                out[at] = self.floor(z)
        return out


def head_logits(head: Any) -> Any:
    """h -> logits of the head, its LoRA delta included but never its dropout (the floors must
    not draw random numbers: they would shift the run's random stream)."""
    from retrain.kernels import lm_head_operands
    from retrain.kernels.matmul import mm_f32

    operands = lm_head_operands(head)
    if operands is None:
        return head
    weight, bias, lora = operands

    def logits(h: torch.Tensor) -> torch.Tensor:
        z = mm_f32(h, weight.t())
        if lora is not None:
            z += lora.scaling * mm_f32(mm_f32(h, lora.a.t()), lora.b.t().float())
        return z + bias.float() if bias is not None else z

    return logits


def vocab_size(head: Any) -> int:
    """The LM head's output size (a peft-wrapped head's base layer's), 1 when it cannot tell."""
    get_base: Any = getattr(head, "get_base_layer", None)
    base = get_base() if callable(get_base) else head
    weight = getattr(base, "weight", None)
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) else 1
