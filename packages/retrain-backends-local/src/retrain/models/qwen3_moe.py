"""Qwen3-MoE (`qwen3_moe`): Qwen3's attention with routed experts (`num_experts_per_tok` of
`num_experts` per token, every `decoder_sparse_step`-th layer not in `mlp_only_layers`).

A decoder running it itself routes per step on the batch: the model's router (softmax over
its logits, the top k kept and renormalised when `norm_topk_prob`) and the model's experts
module (each expert a gated SiLU MLP, run by transformers' experts implementation). Nothing
else differs from Qwen3: the plan is the config's.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of


class Qwen3Moe(Family):
    name: ClassVar[str] = "Qwen3-MoE"
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_moe",)
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|im_end|>",)

    def plan(self, config: Any) -> DecoderPlan:
        return plan_of(text_config(config))
