"""gpt-oss (`gpt_oss`): attention sinks, sliding and full layers, and routed experts with a
biased router and clamped SwiGLU experts. retrain's decoder does not run it (the plan says
what it leaves out: `family.UNSTATED`); transformers' forward samples it. The router keeps the
k largest logits and weighs them by a softmax over those k alone (`routed_weights`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from retrain.models.family import Family


class GptOss(Family):
    name: ClassVar[str] = "gpt-oss"
    model_types: ClassVar[tuple[str, ...]] = ("gpt_oss",)
    replays_routing: ClassVar[bool] = True

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        import torch

        return torch.softmax(scores.gather(-1, ids), dim=1, dtype=scores.dtype)
