"""retrain's decoder as data: the model's weights (and the modules of its routers and experts)
arranged per layer as its plan says to run them (`retrain.models.layers`), built once per
sampling call by `forward.build`, run by `forward.lean`.

A layer (`Block`) is a token mixer (`Attention`, `LatentAttention` or `GatedDelta`) and an MLP
with the norms around them: llama's before each; Gemma's also after each (sandwich norms); then
Gemma 4's per-layer input term and layer scalar. The residual stream stays in the embeddings'
dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.attention import Attention
from retrain.inference_engine.pytorch.forward.context import Prefill, Span, Step
from retrain.inference_engine.pytorch.forward.delta import GatedDelta
from retrain.inference_engine.pytorch.forward.latent import LatentAttention
from retrain.inference_engine.pytorch.forward.linear import Linear
from retrain.inference_engine.pytorch.forward.mlp import Mlp
from retrain.inference_engine.pytorch.forward.ops import Norm
from retrain.models.layers import RopeTables


@dataclass(frozen=True)
class PerLayer:
    """Gemma 4's per-layer input term of one layer: norm(proj(act(gate(h)) * input))."""

    gate: Linear
    projection: Linear
    norm: Norm
    act: Callable[[torch.Tensor], torch.Tensor]

    def __call__(self, h: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        return self.norm(self.projection(self.act(self.gate(h)) * inputs))


@dataclass(frozen=True)
class PerLayerInputs:
    """Gemma 4's per-layer inputs [..., layers, size] of token ids and their embeddings: a scaled
    lookup per token plus a normalised projection of the embeddings, their sum scaled."""

    embed: torch.Tensor  # [vocab, layers x size]
    embed_scale: torch.Tensor
    projection: Linear
    projection_scale: float
    norm: Norm
    input_scale: float
    layers: int
    size: int

    def __call__(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        shape = (*ids.shape, self.layers, self.size)
        looked_up = (F.embedding(ids, self.embed) * self.embed_scale.to(self.embed.dtype)).reshape(shape)
        projected = self.norm((self.projection(x) * self.projection_scale).reshape(shape))
        return (projected + looked_up) * self.input_scale


@dataclass(frozen=True)
class Block:
    index: int
    mixer: Attention | LatentAttention | GatedDelta
    norm_in: Norm
    post_mixer: Norm | None  # Gemma's norm after attention
    pre_mlp: Norm | None  # None: the MLP normalises the residual itself (Gemma 4's MoE block)
    mlp: Mlp
    post_mlp: Norm | None
    per_layer: PerLayer | None
    scalar: torch.Tensor | None

    def prefill(self, h: torch.Tensor, ctx: Prefill) -> torch.Tensor:
        return self._rest(h, self.mixer.prefill(self.norm_in(h), ctx), ctx.per_layer)

    def step(self, h: torch.Tensor, ctx: Step) -> torch.Tensor:
        return self._rest(h, self.mixer.step(self.norm_in(h), ctx), ctx.per_layer)

    def _rest(self, h: torch.Tensor, mixed: torch.Tensor, per_layer: torch.Tensor | None) -> torch.Tensor:
        if self.post_mixer is not None:
            mixed = self.post_mixer(mixed)
        h = h + mixed
        m = self.mlp(self.pre_mlp(h) if self.pre_mlp is not None else h)
        h = h + (self.post_mlp(m) if self.post_mlp is not None else m)
        if self.per_layer is not None and per_layer is not None:
            h = h + self.per_layer(h, per_layer[..., self.index, :])
        if self.scalar is not None:
            h = h * self.scalar
        return h


@dataclass
class LeanModel:
    embed: torch.Tensor
    embed_scale: torch.Tensor | None  # Gemma's sqrt(hidden size), applied in the embeddings' dtype
    blocks: list[Block]
    norm: Norm
    head: Linear
    rotary: Any  # the model's rotary-embedding module
    rope_keys: tuple[str, ...]  # its tables the layers use ("": its one table)
    rope_axes: int
    rope_kind: RopeTables  # what the rotary module returns (`retrain.models.layers.RopeTables`)
    spans: tuple[Span, ...]  # the layers' windows and chunks, shorter than the sequence
    sources: frozenset[int]  # layers whose keys and values a shared layer reads
    per_layer: PerLayerInputs | None
    logit_scale: float
    softcap: float | None
    dtype: torch.dtype  # compute dtype of the linears and the KV cache

    def embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        x = F.embedding(ids, self.embed)
        return x if self.embed_scale is None else x * self.embed_scale.to(self.embed.dtype)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.norm(h))
        if self.logit_scale != 1.0:
            logits = logits / self.logit_scale
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def rope_tables(self, length: int, device: torch.device) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """cos, sin [length, rotary dims] in fp32 for positions 0..length-1 per table, each
        angle twice as transformers' default rotary returns them (a module returning one per
        pair, or complex numbers, repeated to that form; transformers computes them in fp32 and
        casts to the residual dtype, fp32 under autocast). A rotary of several position axes
        gets a text token's: one position on each."""
        probe = torch.zeros((), dtype=self.embed.dtype, device=device)
        positions = torch.arange(length, device=device)[None]
        if self.rope_axes > 1:
            positions = positions[None].expand(self.rope_axes, 1, length)
        tables = {}
        for key in self.rope_keys:
            out = self.rotary(probe, positions, key) if key else self.rotary(probe, positions)
            cos, sin = (out.real, out.imag) if self.rope_kind == "complex" else out
            if self.rope_kind != "dims":
                cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
            tables[key] = (cos[0], sin[0])
        return tables
