"""Softmax attention in retrain's decoder: full or a sliding window, keys and values of its
own or read from another layer (Gemma 4's shared-KV layers), q/k (and v) norms, a rotary over
all or part of each head, an optional sigmoid gate on the output (Qwen3.5).

The cache of a layer is keys and values [rows, kv heads, columns, head dim] each, zeroed (a
masked column must hold finite values: softmax gives it weight 0, and 0 x NaN is NaN). A
decoding query attends over the cache with the query heads of one KV head stacked as its rows
(the same products as repeating the KV heads). A window is the key mask of `context.Step`
(the eager step slices the columns it covers; the graphed step, of one shape, masks them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.context import Prefill, State, Step
from retrain.inference_engine.pytorch.forward.linear import Linear, split
from retrain.inference_engine.pytorch.forward.ops import Norm, rope


@dataclass(frozen=True)
class Attention:
    index: int
    qkv: tuple[Linear, ...]  # q (with its gate), k, v: one stacked product or one each; q alone when shared
    o: Linear
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    qk_norm: Norm | None  # over [heads (+ kv heads), head dim]
    v_norm: Norm | None
    gate: bool  # q_proj yields [head: query, gate] per head
    k_is_v: bool  # no v_proj: values are the keys before their norm and rotation
    source: int | None  # the layer whose keys and values this one reads
    window: int  # 0: full
    rope: str
    dtype: torch.dtype

    def allocate(self, rows: int, columns: int, device: torch.device) -> State:
        if self.source is not None:
            return []
        shape = (rows, self.kv_heads, columns, self.head_dim)
        return [torch.zeros(shape, dtype=self.dtype, device=device), torch.zeros(shape, dtype=self.dtype, device=device)]

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(queries and keys as one [..., heads (+ kv heads), head dim], normalised: they take
        the same norm and rotation, so they take them once; values [..., kv heads, head dim]
        or None when shared; the output gate [..., heads x head dim] or None)."""
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        gate = None
        if self.gate:
            q, *rest = split(self.qkv, x)
            q, gate = q.unflatten(-1, (h, 2 * d)).chunk(2, dim=-1)
            gate = gate.flatten(-2)
            qk = torch.cat([q, rest[0].unflatten(-1, (kv, d))], dim=-2) if rest else q
            v = rest[1] if len(rest) > 1 else None
        elif self.source is not None:
            qk, v = self.qkv[0](x).unflatten(-1, (h, d)), None
        elif len(self.qkv) == 1 and not self.k_is_v:
            y = self.qkv[0](x)
            qk, v = y[..., :(h + kv) * d].unflatten(-1, (h + kv, d)), y[..., (h + kv) * d:]
        else:
            q, k, *rest = split(self.qkv, x)
            qk, v = torch.cat([q, k], dim=-1).unflatten(-1, (h + kv, d)), (rest[0] if rest else None)
        if self.k_is_v:
            v = qk[..., h:, :]
        elif v is not None:
            v = v.unflatten(-1, (kv, d))
        if self.qk_norm is not None:
            qk = self.qk_norm(qk)
        if v is not None and self.v_norm is not None:
            v = self.v_norm(v)
        return qk, v, gate

    def prefill(self, x: torch.Tensor, ctx: Prefill) -> torch.Tensor:
        b, p, _ = x.shape
        h = self.heads
        qk, v, gate = self.project(x)
        cos, sin = ctx.rope[self.rope]
        qk = rope(qk.transpose(1, 2), cos, sin)
        q = qk[:, :h].to(self.dtype)
        if self.source is None:
            assert v is not None
            k, v = qk[:, h:].to(self.dtype), v.transpose(1, 2).to(self.dtype)
            keys, values = ctx.state[self.index]
            keys[ctx.rows, :, :p] = k[ctx.source]
            values[ctx.rows, :, :p] = v[ctx.source]
            if self.index in ctx.sources:
                ctx.shared[self.index] = (k, v)
        else:
            k, v = ctx.shared[self.source]
        g = h // self.kv_heads
        a = F.scaled_dot_product_attention(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1),
                                           attn_mask=ctx.attend[self.window], scale=self.scale)
        a = a.transpose(1, 2).reshape(b, p, h * self.head_dim)
        if gate is not None:
            a = a * torch.sigmoid(gate)
        return self.o(a)

    def step(self, x: torch.Tensor, ctx: Step) -> torch.Tensor:
        """The output [n, hidden] for the staged token of each row; writes the layer's keys and
        values at `ctx.column` (a shared layer's source wrote them earlier in the step)."""
        n, h, kv, d = ctx.n, self.heads, self.kv_heads, self.head_dim
        qk, v, gate = self.project(x)
        cos, sin = ctx.rope[self.rope]
        qk = rope(qk, cos, sin)
        keys, values = ctx.state[self.index if self.source is None else self.source]
        keys, values = keys[:n], values[:n]
        if self.source is None:
            assert v is not None
            keys.index_copy_(2, ctx.column, qk[:, h:].to(self.dtype)[:, :, None])
            values.index_copy_(2, ctx.column, v.to(self.dtype)[:, :, None])
        columns, bias = ctx.views[self.window]
        q = qk[:, :h].to(self.dtype).reshape(n, kv, h // kv, d)
        a = F.scaled_dot_product_attention(q, keys[:, :, columns], values[:, :, columns], attn_mask=bias,
                                           scale=self.scale).reshape(n, h * d)
        if gate is not None:
            a = a * torch.sigmoid(gate)
        return self.o(a)
