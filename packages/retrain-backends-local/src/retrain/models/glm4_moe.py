"""GLM-4.5 (`glm4_moe`): llama-like attention (biased q/k/v, a partial rotary: the rotary
module's tables cover `partial_rotary_factor` of each head; q/k norms per head where
`use_qk_norm`), the first `first_k_dense_replace` layers dense, the rest routed as DeepSeek-V3
routes (`retrain.models.deepseek_v3`: grouped sigmoid scores with a correction bias, a routed
scaling factor, shared experts added as they are). GLM's turn format ends a turn at the next
role's token.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retrain.models.deepseek_v3 import grouped, grouped_sigmoid
from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of


class Glm4Moe(Family):
    name: ClassVar[str] = "GLM-4.5"
    model_types: ClassVar[tuple[str, ...]] = ("glm4_moe",)
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|user|>", "<|observation|>")
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        return grouped(plan_of(text_config(config)))

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        return grouped_sigmoid(router, scores, ids)
