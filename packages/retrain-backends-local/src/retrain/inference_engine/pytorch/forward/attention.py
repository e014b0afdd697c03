"""Softmax attention in retrain's decoder: full, a sliding window or chunks, keys and values of
its own or read from another layer (Gemma 4's shared-KV layers), q/k (and v) norms per head or
over all heads (OLMoE), clipped projections (OLMoE), a rotary over all or part of each head in
any pairing of its dimensions, or none (Llama 4's no-RoPE layers, their queries scaled by
position), an optional sigmoid gate on the output (Qwen3.5, Qwen3-Next), attention sinks
(gpt-oss).

The cache of a layer is keys and values [rows, kv heads, columns, head dim] each, zeroed (a
masked column must hold finite values: softmax gives it weight 0, and 0 x NaN is NaN). A
decoding query attends over the cache with the query heads of one KV head stacked as its rows
(the same products as repeating the KV heads). A span other than full is the key mask of
`context.Step` (the eager step slices the columns a window covers; the graphed step, of one
shape, masks them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.context import Prefill, Span, State, Step
from retrain.inference_engine.pytorch.forward.linear import Linear, split
from retrain.inference_engine.pytorch.forward.ops import Norm, rope
from retrain.models.layers import RopePairs


@dataclass(frozen=True)
class Rotation:
    """Where a layer's queries and keys learn their positions: a rotary table (`table`, None
    for a layer without one), then a weightless norm of the rotated heads (Llama 4's), then
    the queries of a layer without rotary scaled by 1 + scale * log1p(floor((position + 1) /
    floor)) (Llama 4's temperature tuning: `temperature` = (scale, floor))."""

    table: str | None
    pairs: RopePairs = "halves"
    norm_after: Norm | None = None
    temperature: tuple[float, float] | None = None

    def __call__(self, qk: torch.Tensor, heads: int, tables: dict[str, tuple[torch.Tensor, torch.Tensor]],
                 positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(queries, keys) of `qk` [..., heads + kv heads, (columns,) head dim], positioned;
        `positions` broadcast against the queries without their last dimension."""
        if self.table is not None:
            cos, sin = tables[self.table]
            qk = rope(qk, cos, sin, self.pairs)
        if self.norm_after is not None:
            qk = self.norm_after(qk)
        q, k = qk[:, :heads], qk[:, heads:]
        if self.temperature is not None:
            scale, floor = self.temperature
            scales = torch.log1p(torch.floor((positions.float() + 1.0) / floor)) * scale + 1.0
            q = (q * scales[..., None]).to(q.dtype)
        return q, k


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
    span: Span
    rotation: Rotation
    dtype: torch.dtype
    wide_norms: tuple[Norm, Norm] | None = None  # q and k norms over all heads at once, before the split
    clip: float | None = None  # q, k, v clamped to +-clip after their projections and norms
    sinks: torch.Tensor | None = None  # [heads] a logit per head that takes no value

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
        if self.wide_norms is not None or self.clip is not None:
            return (*self._project_each(x), None)
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
        if self.qk_norm is not None and self.rotation.norm_after is None:
            qk = self.qk_norm(qk)
        if v is not None and self.v_norm is not None:
            v = self.v_norm(v)
        return qk, v, gate

    def _project_each(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """OLMoE's order: each projection, the q and k norms over all heads, the clamp."""
        q, k, v = split(self.qkv, x)
        if self.wide_norms is not None:
            q, k = self.wide_norms[0](q), self.wide_norms[1](k)
        if self.clip is not None:
            q, k, v = (t.clamp(-self.clip, self.clip) for t in (q, k, v))
        qk = torch.cat([q, k], dim=-1).unflatten(-1, (self.heads + self.kv_heads, self.head_dim))
        return qk, v.unflatten(-1, (self.kv_heads, self.head_dim))

    def prefill(self, x: torch.Tensor, ctx: Prefill) -> torch.Tensor:
        b, p, _ = x.shape
        h = self.heads
        qk, v, gate = self.project(x)
        q, k = self.rotation(qk.transpose(1, 2), h, ctx.rope, ctx.positions[:, None])
        q = q.to(self.dtype)
        if self.source is None:
            assert v is not None
            k, v = k.to(self.dtype), v.transpose(1, 2).to(self.dtype)
            keys, values = ctx.state[self.index]
            keys[ctx.rows, :, :p] = k[ctx.source]
            values[ctx.rows, :, :p] = v[ctx.source]
            if self.index in ctx.sources:
                ctx.shared[self.index] = (k, v)
        else:
            k, v = ctx.shared[self.source]
        g = h // self.kv_heads
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        attend = ctx.attend[self.span]
        if self.sinks is not None:
            a = sink_attention(q, k, v, torch.zeros((), dtype=q.dtype, device=q.device).masked_fill(~attend, float("-inf")),
                               self.scale, self.sinks.view(1, h, 1, 1))
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, scale=self.scale)
        a = a.transpose(1, 2).reshape(b, p, h * self.head_dim)
        if gate is not None:
            a = a * torch.sigmoid(gate)
        return self.o(a)

    def step(self, x: torch.Tensor, ctx: Step) -> torch.Tensor:
        """The output [n, hidden] for the staged token of each row; writes the layer's keys and
        values at `ctx.column` (a shared layer's source wrote them earlier in the step)."""
        n, h, kv, d = ctx.n, self.heads, self.kv_heads, self.head_dim
        qk, v, gate = self.project(x)
        q, k = self.rotation(qk, h, ctx.rope, ctx.positions[:, None])
        keys, values = ctx.state[self.index if self.source is None else self.source]
        keys, values = keys[:n], values[:n]
        if self.source is None:
            assert v is not None
            keys.index_copy_(2, ctx.column, k.to(self.dtype)[:, :, None])
            values.index_copy_(2, ctx.column, v.to(self.dtype)[:, :, None])
        columns, bias = ctx.views[self.span]
        q = q.to(self.dtype).reshape(n, kv, h // kv, d)
        if self.sinks is not None:
            a = sink_attention(q, keys[:, :, columns], values[:, :, columns], bias, self.scale,
                               self.sinks.view(kv, h // kv, 1))
        else:
            a = F.scaled_dot_product_attention(q, keys[:, :, columns], values[:, :, columns], attn_mask=bias,
                                               scale=self.scale)
        a = a.reshape(n, h * d)
        if gate is not None:
            a = a * torch.sigmoid(gate)
        return self.o(a)


def sink_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float,
                   sinks: torch.Tensor) -> torch.Tensor:
    """gpt-oss's attention: each query's softmax over its keys' logits (`bias` added: 0 or
    -inf) and its head's sink logit, the sink's weight dropped; transformers' eager ops in
    its order (the largest logit subtracted first, the softmax in the logits' dtype, which the
    sink's joins). q [..., g, d], k and v [..., c, d], sinks broadcast to [..., g, 1]."""
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale + bias
    logits = torch.cat([logits, sinks.expand(*logits.shape[:-1], 1)], dim=-1)
    logits = logits - logits.amax(dim=-1, keepdim=True)
    weights = torch.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1].to(v.dtype)
    return torch.matmul(weights, v)
