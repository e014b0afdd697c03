"""OLMoE (`olmoe`): llama's layers with routed experts in every layer (a softmax over every
expert, the top k, renormalised where `norm_topk_prob`: Qwen-MoE's router, `routed_weights`),
and two differences in attention: the q and k norms act over all heads at once (their weights
are that wide: the decoder reads it there), and where the config sets `clip_qkv` the queries,
keys and values are clamped to +-clip_qkv after their projections and norms (the plan's
`clip_qkv`: the attention module reads it from the config).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of
from retrain.models.qwen3_moe import softmax_top


class Olmoe(Family):
    name: ClassVar[str] = "OLMoE"
    model_types: ClassVar[tuple[str, ...]] = ("olmoe",)
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        text = text_config(config)
        clip = getattr(text, "clip_qkv", None)
        return replace(plan_of(text), clip_qkv=float(clip) if clip is not None else None)

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        return softmax_top(scores, ids, renormalise=bool(getattr(router, "norm_topk_prob", False)))
