"""Mixtral (`mixtral`): Mistral's layers (a sliding window where the config sets one) with routed
experts in every layer: a softmax over every expert in fp32, the top k kept and always
renormalised over them, left in fp32 (`routed_weights`); each expert a gated SiLU MLP.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of


class Mixtral(Family):
    name: ClassVar[str] = "Mixtral"
    model_types: ClassVar[tuple[str, ...]] = ("mixtral",)
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        return plan_of(text_config(config))

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        import torch

        weights = torch.softmax(scores.float(), dim=-1).gather(-1, ids)
        return weights / weights.sum(dim=-1, keepdim=True)
