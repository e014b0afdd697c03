"""The linear layers of retrain's decoder: one or several transformers/peft linears of one
input run as one product, every LoRA delta folded into one low-rank product.

Numerics follow peft: `y = x W^T + b + B(A x) * s` in the compute dtype. Under autocast the
compute dtype is autocast's and the base weights are cast once per sampling call (autocast
casts them at every forward); otherwise it is the weights' own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

#: CPU decoding packs weights of at least this many elements, in calls of at least PACK_MIN_STEPS
PACK_MIN_NUMEL, PACK_MIN_STEPS = 1 << 16, 32


class Unsupported(Exception):
    """Why this model cannot run on retrain's decoder (the caller uses transformers')."""


@dataclass(frozen=True)
class Part:
    """One linear layer as the model holds it: base weight and bias, and each active LoRA
    adapter's (A, B, scaling)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    loras: tuple[tuple[torch.Tensor, torch.Tensor, float], ...] = ()


@dataclass(frozen=True)
class Linear:
    """One or several linears of one input as one product: `weight` [sum of outs, in] in the
    compute dtype (oneDNN-packed when `packed`), `bias`, and every LoRA delta of every part as
    one low-rank product: `lora_a` [sum of ranks, in], `lora_b` [sum of outs, sum of ranks],
    block-diagonal over the parts, each adapter's B scaled by its scaling (peft scales the
    product instead: the same value when the scaling is a power of two, as alpha = 2r makes
    it, else within one rounding). `sizes` splits the output back into the parts."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    sizes: tuple[int, ...]
    dtype: torch.dtype
    lora_a: torch.Tensor | None = None
    lora_b: torch.Tensor | None = None
    packed: bool = False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)
        if self.packed and x.dim() == 2:
            y = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        elif self.packed:
            y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), self.weight, self.bias,
                                                   "none", [], "").unflatten(0, x.shape[:-1])
        else:
            y = F.linear(x, self.weight, self.bias)
        if self.lora_a is not None and self.lora_b is not None:
            y = y + F.linear(F.linear(x, self.lora_a), self.lora_b)
        return y

    @classmethod
    def of(cls, parts: Sequence[Part], dtype: torch.dtype, pack_rows: int | None) -> Linear:
        """`parts` stacked into one product (several parts are only stacked when their weights
        are copied anyway: cast to the compute dtype, or packed)."""
        weight = parts[0].weight if len(parts) == 1 else torch.cat([p.weight for p in parts])
        weight = weight.to(dtype)
        sizes = tuple(int(p.weight.shape[0]) for p in parts)
        bias = None
        if any(p.bias is not None for p in parts):
            bias = torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0])
                              for p in parts]).to(dtype)
        lora_a = lora_b = None
        ranks = [sum(int(a.shape[0]) for a, _, _ in p.loras) for p in parts]
        if sum(ranks):
            lora_a = torch.cat([a for p in parts for a, _, _ in p.loras]).to(dtype)
            lora_b = weight.new_zeros((sum(sizes), sum(ranks)), dtype=torch.float32)
            row = col = 0
            for p, size in zip(parts, sizes, strict=True):
                for a, b, scaling in p.loras:
                    lora_b[row:row + size, col:col + a.shape[0]] = b.float() * scaling
                    col += a.shape[0]
                row += size
            lora_b = lora_b.to(dtype)
        packed = pack_rows is not None and weight.numel() >= PACK_MIN_NUMEL
        if packed:
            weight = torch.ops.mkldnn._reorder_linear_weight(weight, pack_rows)
        return cls(weight, bias, sizes, dtype, lora_a, lora_b, packed)


@dataclass(frozen=True)
class Linears:
    """How a model's linears become `Linear`s for one sampling call: stacked where their
    weights are copied anyway (a cast to the compute dtype, or `pack_rows`: oneDNN-packed for
    that many rows on the CPU)."""

    dtype: torch.dtype
    pack_rows: int | None
    stack: bool

    def __call__(self, *modules: Any) -> tuple[Linear, ...]:
        return self.parts(*(part(module) for module in modules))

    def parts(self, *parts: Part) -> tuple[Linear, ...]:
        if self.stack:
            return (Linear.of(parts, self.dtype, self.pack_rows),)
        return tuple(Linear.of([p], self.dtype, self.pack_rows) for p in parts)

    def one(self, module: Any) -> Linear:
        return Linear.of([part(module)], self.dtype, self.pack_rows)


def split(linears: tuple[Linear, ...], x: torch.Tensor) -> Sequence[torch.Tensor]:
    """The parts' outputs of `linears` (one stacked product, or one product each) on `x`."""
    if len(linears) == 1:
        return linears[0](x).split(list(linears[0].sizes), dim=-1)
    return [lin(x) for lin in linears]


def base(module: Any) -> nn.Linear:
    base_layer = getattr(module, "base_layer", module)
    if type(base_layer) is not nn.Linear or not base_layer.weight.is_floating_point():
        raise Unsupported(f"a {type(base_layer).__name__} layer (quantised or custom)")
    return base_layer


def part(module: Any) -> Part:
    """`module` is an nn.Linear or a peft LoRA layer over one."""
    base_layer = base(module)
    if module is base_layer or getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
        return Part(base_layer.weight, base_layer.bias)
    loras: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if name in getattr(module, "lora_variant", {}) or getattr(module, "use_dora", {}).get(name, False):
            raise Unsupported(f"the LoRA variant of adapter {name!r} (DoRA or another)")
        a, b = module.lora_A[name], module.lora_B[name]
        if type(a) is not nn.Linear or type(b) is not nn.Linear or b.bias is not None:
            raise Unsupported(f"adapter {name!r} is not a plain LoRA pair")
        loras.append((a.weight, b.weight, float(module.scaling[name])))
    return Part(base_layer.weight, base_layer.bias, tuple(loras))
