"""gpt-oss (`gpt_oss`): sliding and full layers in turn, attention sinks (a learnt logit per
head in each softmax, taking no value), biased q/k/v/o projections, and routed experts: a
biased router keeps the k largest logits and weighs them by a softmax over those k alone
(`routed_weights`), each expert a SwiGLU with biases whose gate and up are clamped (the experts
module's). Its RMSNorms multiply in fp32, `(x̂ * w).to(dtype)`; its rotary module returns one
angle per pair of dimensions (rotated as halves).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of


class GptOss(Family):
    name: ClassVar[str] = "gpt-oss"
    model_types: ClassVar[tuple[str, ...]] = ("gpt_oss",)
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|return|>", "<|call|>")
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        plan = plan_of(text_config(config))
        layers = tuple(replace(layer, sinks=True, routing="softmax of top k" if layer.mlp == "moe" else "")
                       for layer in plan.layers)
        return replace(plan, layers=layers, norm="fp32 weight", rope_tables="pairs")

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        import torch

        return torch.softmax(scores.gather(-1, ids), dim=1, dtype=scores.dtype)
