"""Qwen2-MoE (`qwen2_moe`): Qwen2's attention (biased q/k/v, sliding layers where the config says)
with Qwen3-MoE's router (softmax, top k, renormalised where `norm_topk_prob`: `routed_weights`)
in every `decoder_sparse_step`-th layer not in `mlp_only_layers`, beside a shared expert whose
output a sigmoid gate scales (`shared_expert`, `shared_expert_gate`). ChatML's end of turn.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of
from retrain.models.qwen3_moe import softmax_top


class Qwen2Moe(Family):
    name: ClassVar[str] = "Qwen2-MoE"
    model_types: ClassVar[tuple[str, ...]] = ("qwen2_moe",)
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|im_end|>",)
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        return plan_of(text_config(config))

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        return softmax_top(scores, ids, renormalise=bool(getattr(router, "norm_topk_prob", False)))
