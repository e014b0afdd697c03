"""Qwen3-Next (`qwen3_next`): Qwen3.5's hybrid of Gated DeltaNet and gated full-attention layers
on a plain rotary (one position axis, partial), its (1 + w) RMSNorms, and Qwen2-MoE's routed
experts beside a sigmoid-gated shared expert. Its gated delta layers hold their projections
grouped per key head (`in_proj_qkvz`, `in_proj_ba`), which the decoder takes apart
(`forward.regroup`); their kernels are chosen as Qwen3.5's are, by the same options
(`retrain.models.qwen35`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from retrain.models.family import text_config
from retrain.models.layers import DecoderPlan, plan_of
from retrain.models.qwen3_moe import softmax_top
from retrain.models.qwen35 import Qwen35


class Qwen3Next(Qwen35):
    name: ClassVar[str] = "Qwen3-Next"
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_next",)

    def plan(self, config: Any) -> DecoderPlan:
        return replace(plan_of(text_config(config)), norm="fp32 1 + weight", attention_gate=True)

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        return softmax_top(scores, ids, renormalise=bool(getattr(router, "norm_topk_prob", False)))
