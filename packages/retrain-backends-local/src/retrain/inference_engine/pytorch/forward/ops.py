"""The elementwise ops of retrain's decoder, as transformers writes them: RMSNorm in its three
weight conventions (`retrain.models.layers.Norm`), rotary embeddings over all or the first
dimensions of a head in each pairing of dimensions (`retrain.models.layers.RopePairs`), the L2
norm of the gated delta rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.linear import Unsupported
from retrain.models.layers import Norm as NormKind
from retrain.models.layers import RopePairs


@dataclass(frozen=True)
class Norm:
    """RMSNorm over the last dimension, the mean square in fp32. `weight` is what multiplies
    (None: no weight); `fp32`: the product is taken in fp32 and cast back, `(x̂ * w).to(dtype)`
    (Gemma, Qwen3.5), else llama's `w * x̂.to(dtype)`. Both are one fused op in fp32."""

    weight: torch.Tensor | None
    eps: float
    fp32: bool = False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        w, d = self.weight, x.shape[-1]
        if w is None:
            return F.rms_norm(x.float(), (d,), None, self.eps).to(x.dtype)
        if x.dtype == w.dtype == torch.float32 and w.dim() == 1:
            return F.rms_norm(x, (d,), w, self.eps)
        if self.fp32:
            return (F.rms_norm(x.float(), (d,), None, self.eps) * w).to(x.dtype)
        return w * F.rms_norm(x.float(), (d,), None, self.eps).to(x.dtype)

    @classmethod
    def of(cls, module: Any, kind: NormKind) -> Norm:
        """The norm `module` applies under the plan's `kind`. The weight of an fp32 kind is
        taken in fp32 once (`1 + w` for the offset kind), as transformers computes it per call."""
        name = type(module).__name__
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
        if not name.endswith("RMSNorm") or eps is None:
            raise Unsupported(f"a {name} norm")
        weight = getattr(module, "weight", None) if getattr(module, "with_scale", True) else None
        if weight is None or kind == "weight":
            return cls(weight, float(eps))
        weight = 1.0 + weight.float() if kind == "fp32 1 + weight" else weight.float()
        return cls(weight, float(eps), fp32=True)


def heads_norm(norms: list[tuple[Norm | None, int]]) -> Norm | None:
    """Per-head norms of consecutive head groups ((norm, heads) each, one head dim) as one norm
    over [sum of heads, head dim]: queries and keys take their norms in one op. None when no
    group has a norm; a group without one takes a weight of ones."""
    if all(n is None for n, _ in norms):
        return None
    first = next(n for n, _ in norms if n is not None)
    if any(n is not None and (n.eps != first.eps or n.fp32 != first.fp32 or n.weight is None) for n, _ in norms):
        raise Unsupported("query and key norms of different kinds")
    assert first.weight is not None
    dim = first.weight.shape[-1]
    weights = [(n.weight if n is not None and n.weight is not None else first.weight.new_ones(dim)).expand(h, dim)
               for n, h in norms]
    return Norm(torch.cat(weights), first.eps, first.fp32)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairs: RopePairs = "halves") -> torch.Tensor:
    """Rotate the first `cos.shape[-1]` dimensions of each head of `x` (all of them, or a
    partial rotary's share: the rest pass through). The tables hold each angle twice, as
    transformers' default rotary returns them (cos(f) for the first and the second half).
    `pairs`: which dimensions rotate together (`retrain.models.layers.RopePairs`); each way is
    the same products and sums as transformers' code for it (a complex product for Llama 4's)."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat((rope(x[..., :r], cos, sin, pairs), x[..., r:]), dim=-1)
    half = r // 2
    if pairs == "interleaved":
        c, s, even, odd = cos[..., :half], sin[..., :half], x[..., 0::2], x[..., 1::2]
        return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2)
    if pairs == "interleaved to halves":
        x = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """The gated delta rule's `x * rsqrt(sum(x²) + 1e-6)` (transformers' and FLA's)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)
