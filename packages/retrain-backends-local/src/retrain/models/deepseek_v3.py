"""DeepSeek-V3 (`deepseek_v3`): multi-head latent attention in every layer (`latent` in the
plan: `forward.latent` says what it computes; the rotary dimensions come in interleaved pairs
where `rope_interleave`), the first `first_k_dense_replace` layers dense, the rest routed:

- the router (`...TopkRouter`) scores every expert with a sigmoid of its fp32 logits; the
  scores plus `e_score_correction_bias` choose the `topk_group` best of `n_group` groups (a
  group's score: its two best experts'), then the k best experts in them;
- a chosen expert's weight is its sigmoid score (without the bias), renormalised over the k
  where `norm_topk_prob` (+1e-20), times `routed_scaling_factor` (`grouped_sigmoid`);
- `shared_experts` (one gated MLP of `n_shared_experts` experts' width) add their output as it is.

GLM-4.5's MoE (`retrain.models.glm4_moe`) routes the same way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of


class DeepseekV3(Family):
    name: ClassVar[str] = "DeepSeek-V3"
    model_types: ClassVar[tuple[str, ...]] = ("deepseek_v3",)
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        text = text_config(config)
        plan = grouped(plan_of(text))
        layers = tuple(replace(layer, attention="latent") for layer in plan.layers)
        pairs = "interleaved to halves" if getattr(text, "rope_interleave", False) else "halves"
        return replace(plan, layers=layers, rope_pairs=pairs)

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        return grouped_sigmoid(router, scores, ids)


def grouped(plan: DecoderPlan) -> DecoderPlan:
    """`plan` with its routed layers routed by grouped sigmoid scores."""
    return replace(plan, layers=tuple(replace(layer, routing="grouped sigmoid") if layer.mlp == "moe" else layer
                                      for layer in plan.layers))


def grouped_sigmoid(router: Any, scores: Any, ids: Any) -> Any:
    """The weights DeepSeek-V3's and GLM-4.5's routers give experts `ids`, from their logits
    `scores` (fp32): transformers' operations in its order."""
    weights = scores.sigmoid().gather(1, ids)
    if router.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * router.routed_scaling_factor
