"""Multi-head latent attention (`latent` in the model's plan: DeepSeek-V3's) in retrain's decoder.

Per token: queries from a projection (through a low-rank one and its norm where the model has
`q_lora_rank`), each head's split into a part without position and a rotated part; one latent
per token (`kv_a_proj_with_mqa`: the latent, normalised, and one rotated key part every head
shares); each head's keys (the latent expanded by `kv_b_proj`, then the shared rotated part) and
values (of their own width) expanded from the latent. transformers' modules in its order; the
rotation pairs dimensions as the plan says (`rope_interleave`: interleaved, written as halves).

transformers caches the latent and expands every cached token again at each step; here each
token's keys and values are expanded once, when it is written, and cached per head ([rows,
heads, columns, key or value width]): the same products on the same rows, and a step reads
the cache as any attention layer's (the memory of multi-head attention with that many heads).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.context import FULL, Prefill, State, Step
from retrain.inference_engine.pytorch.forward.linear import Linear, split
from retrain.inference_engine.pytorch.forward.ops import Norm, rope
from retrain.models.layers import RopePairs


@dataclass(frozen=True)
class LatentAttention:
    index: int
    down: tuple[Linear, ...]  # the query's (first) projection and kv_a_proj_with_mqa: stacked or one each
    q_norm: Norm | None  # with q_b: the query's low-rank projection, its norm, then q_b
    q_b: Linear | None
    kv_norm: Norm
    kv_b: Linear
    o: Linear
    heads: int
    nope_dim: int  # each head's query and key dimensions without rotary
    rope_dim: int
    v_dim: int
    rank: int  # the latent's width
    scale: float
    table: str
    pairs: RopePairs
    dtype: torch.dtype
    span = FULL

    def allocate(self, rows: int, columns: int, device: torch.device) -> State:
        h = self.heads
        return [torch.zeros((rows, h, columns, self.nope_dim + self.rope_dim), dtype=self.dtype, device=device),
                torch.zeros((rows, h, columns, self.v_dim), dtype=self.dtype, device=device)]

    def _expand(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """queries, keys [b, heads, columns, key width] and values [b, heads, columns, value
        width] of `x` [b, columns, hidden], with the rotary tables [b, 1, columns, rotary dims]."""
        h = self.heads
        first, compressed = split(self.down, x)
        q = self.q_b(self.q_norm(first)) if self.q_b is not None and self.q_norm is not None else first
        q = q.unflatten(-1, (h, self.nope_dim + self.rope_dim)).transpose(1, 2)
        q_pass, q_rot = q.split([self.nope_dim, self.rope_dim], dim=-1)
        latent, k_rot = compressed.split([self.rank, self.rope_dim], dim=-1)
        q_rot, k_rot = rope(q_rot, cos, sin, self.pairs), rope(k_rot[:, None], cos, sin, self.pairs)
        kv = self.kv_b(self.kv_norm(latent)).unflatten(-1, (h, self.nope_dim + self.v_dim)).transpose(1, 2)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_rot.expand(*k_nope.shape[:-1], self.rope_dim)], dim=-1)
        return torch.cat([q_pass, q_rot], dim=-1), k, v

    def prefill(self, x: torch.Tensor, ctx: Prefill) -> torch.Tensor:
        b, p, _ = x.shape
        cos, sin = ctx.rope[self.table]
        q, k, v = (t.to(self.dtype) for t in self._expand(x, cos, sin))
        keys, values = ctx.state[self.index]
        keys[ctx.rows, :, :p] = k[ctx.source]
        values[ctx.rows, :, :p] = v[ctx.source]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=ctx.attend[FULL], scale=self.scale)
        return self.o(a.transpose(1, 2).reshape(b, p, self.heads * self.v_dim))

    def step(self, x: torch.Tensor, ctx: Step) -> torch.Tensor:
        n = ctx.n
        cos, sin = ctx.rope[self.table]
        q, k, v = (t.to(self.dtype) for t in self._expand(x[:, None], cos[:, None], sin[:, None]))
        keys, values = (t[:n] for t in ctx.state[self.index])
        keys.index_copy_(2, ctx.column, k)
        values.index_copy_(2, ctx.column, v)
        columns, bias = ctx.views[FULL]
        a = F.scaled_dot_product_attention(q, keys[:, :, columns], values[:, :, columns], attn_mask=bias,
                                           scale=self.scale)
        return self.o(a.reshape(n, self.heads * self.v_dim))
