"""Qwen3-MoE (`qwen3_moe`): Qwen3's attention with routed experts (`num_experts_per_tok` of
`num_experts` per token, every `decoder_sparse_step`-th layer not in `mlp_only_layers`).

A decoder running it itself routes per step on the batch: softmax over the router's logits,
the top k kept and renormalised when `norm_topk_prob`, each expert a gated SiLU MLP.
"""

from __future__ import annotations

from typing import ClassVar

from retrain.models.family import Family


class Qwen3Moe(Family):
    name: ClassVar[str] = "Qwen3-MoE"
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_moe",)
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|im_end|>",)
