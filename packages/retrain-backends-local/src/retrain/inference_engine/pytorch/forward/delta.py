"""Qwen3.5's Gated DeltaNet layers (`linear` in the model's plan) in retrain's decoder.

A layer keeps, per row, the last `conv_kernel - 1` inputs of its short causal convolution and
its recurrent state [value heads, key dim, value dim] in fp32, both updated in place at each
decoded token (a CUDA graph replays the same buffers). A prompt is prefilled through the
chunked gated delta rule the model's modeling module runs (the one `retrain.models.qwen35`
chose: the torch reference or flash-linear-attention's), a decoded token through the
recurrent rule below: transformers' torch reference for one token, op for op in fp32 but with
the state's three products as batched matrix products (one pass over the state each).

Padding: transformers zeroes a padded position's input, so its convolution input, keys and
values are zero and a left-padded prompt leaves the same state as the prompt alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.context import Prefill, State, Step
from retrain.inference_engine.pytorch.forward.linear import Linear, split
from retrain.inference_engine.pytorch.forward.ops import Norm, l2norm


@dataclass(frozen=True)
class GatedDelta:
    index: int
    proj: tuple[Linear, ...]  # in_proj_qkv, in_proj_z, in_proj_b, in_proj_a: stacked or one each
    conv: torch.Tensor  # [channels, 1, kernel]
    conv_bias: torch.Tensor | None
    act: Callable[[torch.Tensor], torch.Tensor]
    a_log: torch.Tensor
    dt_bias: torch.Tensor
    norm: Norm  # the output's RMSNorm, gated by silu(z)
    out: Linear
    k_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    chunk_rule: Callable[..., Any]
    dtype: torch.dtype

    def allocate(self, rows: int, columns: int, device: torch.device) -> State:
        channels, _, kernel = self.conv.shape
        return [torch.zeros((rows, channels, kernel - 1), dtype=self.dtype, device=device),
                torch.zeros((rows, self.v_heads, self.k_dim, self.v_dim), dtype=torch.float32, device=device)]

    def prefill(self, x: torch.Tensor, ctx: Prefill) -> torch.Tensor:
        b, p, _ = x.shape
        x = (x * ctx.mask[:, :, None]).to(x.dtype)
        mixed, z, beta, a = split(self.proj, x)
        mixed = mixed.transpose(1, 2)  # [b, channels, p]
        channels, _, kernel = self.conv.shape
        past = F.pad(mixed, (kernel - 1 - p, 0)) if p < kernel - 1 else mixed[:, :, p - (kernel - 1):]
        conv_state, state = ctx.state[self.index]
        conv_state[ctx.rows] = past[ctx.source]
        y = F.conv1d(mixed.to(self.conv.dtype), self.conv, self.conv_bias, padding=kernel - 1, groups=channels)
        y = self.act(y[:, :, :p]).to(mixed.dtype).transpose(1, 2)
        q, k, v = self._heads(y)
        beta, g = self._gates(beta, a)
        core, final = self.chunk_rule(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True)
        state[ctx.rows] = final[ctx.source]
        return self.out(self._gated_norm(core, z).reshape(b, p, -1))

    def step(self, x: torch.Tensor, ctx: Step) -> torch.Tensor:
        n = ctx.n
        mixed, z, beta, a = split(self.proj, x)
        conv_state, state = (t[:n] for t in ctx.state[self.index])
        window = torch.cat([conv_state, mixed[:, :, None].to(conv_state.dtype)], dim=-1)  # [n, channels, kernel]
        conv_state.copy_(window[:, :, 1:])
        y = F.conv1d(window.to(self.conv.dtype), self.conv, self.conv_bias, groups=window.shape[1])
        y = self.act(y[:, :, 0]).to(mixed.dtype)
        q, k, v = self._heads(y)
        beta, g = self._gates(beta, a)
        core = _recurrent_step(state, q, k, v, beta, g).to(y.dtype)
        return self.out(self._gated_norm(core, z).reshape(n, -1))

    def _heads(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k [..., value heads, key dim] (each key head repeated for its value heads), v
        [..., value heads, value dim], from the convolution's output [..., channels]."""
        key = self.k_heads * self.k_dim
        q, k, v = y.split([key, key, self.v_heads * self.v_dim], dim=-1)
        q, k = q.unflatten(-1, (self.k_heads, self.k_dim)), k.unflatten(-1, (self.k_heads, self.k_dim))
        if self.v_heads > self.k_heads:
            q = q.repeat_interleave(self.v_heads // self.k_heads, dim=-2)
            k = k.repeat_interleave(self.v_heads // self.k_heads, dim=-2)
        return q, k, v.unflatten(-1, (self.v_heads, self.v_dim))

    def _gates(self, b: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The write strength beta = sigmoid(b) and the log decay g = -exp(A) softplus(a + dt),
        in fp32 (an fp16 A could round exp(A) to inf)."""
        return b.sigmoid(), -self.a_log.float().exp() * F.softplus(a.float() + self.dt_bias)

    def _gated_norm(self, core: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """transformers' gated RMSNorm: the norm in the output's dtype, times silu(z) in fp32."""
        z = z.unflatten(-1, (self.v_heads, self.v_dim))
        return (self.norm(core) * F.silu(z.float())).to(core.dtype)


def _recurrent_step(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                    g: torch.Tensor) -> torch.Tensor:
    """One token of the gated delta rule for each row, the state [n, heads, key dim, value dim]
    updated in place: S <- exp(g) S; S <- S + k (beta (v - k S)); out = q S, queries and keys
    L2-normalised and queries scaled by key dim ** -0.5. Returns [n, heads, value dim], fp32."""
    n, heads, dk, dv = state.shape
    q = l2norm(q.float()) / dk ** 0.5
    k = l2norm(k.float())
    state.mul_(g.exp()[..., None, None])
    flat = state.view(n * heads, dk, dv)
    read = torch.bmm(k.reshape(n * heads, 1, dk), flat).view(n, heads, dv)
    delta = (v.float() - read) * beta.float()[..., None]
    flat.baddbmm_(k.reshape(n * heads, dk, 1), delta.view(n * heads, 1, dv))
    return torch.bmm(q.reshape(n * heads, 1, dk), flat).view(n, heads, dv)
