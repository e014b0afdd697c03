"""Qwen3-MoE (`qwen3_moe`): Qwen3's attention with routed experts (`num_experts_per_tok` of
`num_experts` per token, every `decoder_sparse_step`-th layer not in `mlp_only_layers`).

A decoder running it itself routes per step on the batch: the model's router (softmax over
its logits, the top k kept and renormalised when `norm_topk_prob`) and the model's experts
module (each expert a gated SiLU MLP, run by transformers' experts implementation). Nothing
else differs from Qwen3: the plan is the config's. An expert's weight is its softmax
probability over all experts (in fp32), renormalised over the k chosen with `norm_topk_prob`,
in the logits' dtype (`routed_weights`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of


class Qwen3Moe(Family):
    name: ClassVar[str] = "Qwen3-MoE"
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_moe",)
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|im_end|>",)

    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        return plan_of(text_config(config))

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        return softmax_top(scores, ids, renormalise=bool(getattr(router, "norm_topk_prob", False)))


def softmax_top(logits: Any, ids: Any, *, renormalise: bool) -> Any:
    """Qwen-MoE's weights of experts `ids`: softmax over every expert in fp32, taken at the ids,
    renormalised over them where the router does, cast back to the logits' dtype (the
    operations of its forward, in its order, so the router's own choice gets its own weights
    bit for bit)."""
    import torch

    weights = torch.softmax(logits, dim=-1, dtype=torch.float).gather(-1, ids)
    if renormalise:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype)
