"""The MLPs of retrain's decoder (`mlp` in the model's plan): a gated dense MLP; routed experts
(Qwen3-MoE, Mixtral, OLMoE, gpt-oss; Qwen2-MoE, Qwen3-Next and Qwen3.5-MoE with a
sigmoid-gated shared expert; DeepSeek-V3 and GLM-4.5 with shared experts added as they are);
Gemma 4's dense MLP and routed experts side by side; Llama 4's experts on inputs their router
scaled, with its shared expert.

Routing is per step on the batch, with the model's own router and experts modules: the
router's choice however it makes it (`retrain.models.layers.Routing`), the experts run by the
implementation transformers set on the model (`grouped_mm` by default: fixed shapes, so a decoding step with experts is captured as
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
    shared_gate: Linear | None = None  # None: the shared experts' output is added as it is

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = _routed(self.router, self.experts, x)
        if self.shared is None:
            return y
        if self.shared_gate is None:
            return y + self.shared(x)
        return y + torch.sigmoid(self.shared_gate(x)) * self.shared(x)


@dataclass(frozen=True)
class InputScaled:
    """Llama 4's MoE block: its router's sigmoid scores over every expert (0 off its top k)
    scale copies of each token's input, every expert runs on its copies in one batched
    product (the experts module), the experts' outputs are summed onto the shared expert's.
    transformers' ops in its order; an expert whose input was scaled to 0 adds 0."""

    router: Any  # module: hidden [tokens, hidden] -> (scores [tokens, experts], logits)
    experts: Any  # module: [experts x tokens, hidden] -> [experts x tokens, hidden]
    shared: Dense

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        scores, _ = self.router(flat)
        routed_in = flat.repeat(scores.shape[1], 1) * scores.transpose(0, 1).reshape(-1, 1)
        routed = self.experts(routed_in).reshape(scores.shape[1], -1, flat.shape[-1]).sum(dim=0)
        return self.shared(flat).add_(routed).reshape(x.shape)


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


Mlp = Dense | Routed | DenseAndRouted | InputScaled
