"""Qwen2-MoE (`qwen2_moe`): Qwen2's attention (biased q/k/v, sliding layers where the config says)
with Qwen3-MoE's router (softmax, top k, renormalised where `norm_topk_prob`: `routed_weights`)
in every `decoder_sparse_step`-th layer not in `mlp_only_layers`, beside a shared expert whose
output a sigmoid gate scales (`shared_expert`, `shared_expert_gate`). ChatML's end of turn.
"""

from __future__ import annotations

from typing import ClassVar

from retrain.models.qwen3_moe import Qwen3Moe


class Qwen2Moe(Qwen3Moe):
    """Qwen3-MoE's plan and routing: what differs (biases, the shared expert) is read from the
    modules by the plan, not stated by the family."""

    name: ClassVar[str] = "Qwen2-MoE"
    model_types: ClassVar[tuple[str, ...]] = ("qwen2_moe",)
