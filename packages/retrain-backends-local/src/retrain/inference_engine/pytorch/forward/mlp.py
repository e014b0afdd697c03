"""The MLPs of retrain's decoder (`mlp` in the model's plan): a gated dense MLP; routed experts
(Qwen3-MoE, Qwen3.5-MoE with its sigmoid-gated shared expert); Gemma 4's dense MLP and routed
experts side by side.

Routing is per step on the batch, with the model's own router and experts modules: the
router's top-k of a softmax, the experts run by the implementation transformers set on the
model (`grouped_mm` by default: fixed shapes, so a decoding step with experts is captured as
a CUDA graph like any other; a capture that fails leaves the eager step). The router and
experts modules are called as they are (wrapped by peft's parameter LoRA where a user adapted
them; retrain's own LoRA targets leave them alone), so they compute exactly what the trainer's
forward computes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from retrain.inference_engine.pytorch.forward.linear import Linear, split
from retrain.inference_engine.pytorch.forward.ops import Norm


@dataclass(frozen=True)
class Dense:
    gate_up: tuple[Linear, ...]  # gate and up stacked, or one each
    down: Linear
    act: Callable[[torch.Tensor], torch.Tensor]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = split(self.gate_up, x)
        return self.down(self.act(gate) * up)


def _routed(router: Any, experts: Any, x: torch.Tensor) -> torch.Tensor:
    """`experts` on each token of `x` [..., hidden] as `router` picks and weighs them."""
    flat = x.reshape(-1, x.shape[-1])
    _, weights, index = router(flat)
    return experts(flat, index, weights).reshape(x.shape)


@dataclass(frozen=True)
class Routed:
    router: Any  # module: hidden [tokens, hidden] -> (logits, top-k weights, top-k expert ids)
    experts: Any  # module: (hidden, ids, weights) -> [tokens, hidden]
    shared: Dense | None = None
    shared_gate: Linear | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = _routed(self.router, self.experts, x)
        if self.shared is not None and self.shared_gate is not None:
            y = y + torch.sigmoid(self.shared_gate(x)) * self.shared(x)
        return y


@dataclass(frozen=True)
class DenseAndRouted:
    """Gemma 4's MoE block: the dense MLP on the pre-feed-forward norm of the residual, the
    experts on another norm of it (the router normalises it its own way), each output
    normalised, the two added. Takes the residual itself."""

    pre: Norm
    dense: Dense
    post_dense: Norm
    router: Any
    pre_routed: Norm
    experts: Any
    post_routed: Norm

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        dense = self.post_dense(self.dense(self.pre(h)))
        flat = h.reshape(-1, h.shape[-1])
        _, weights, index = self.router(flat)
        routed = self.experts(self.pre_routed(flat), index, weights).reshape(h.shape)
        return dense + self.post_routed(routed)
