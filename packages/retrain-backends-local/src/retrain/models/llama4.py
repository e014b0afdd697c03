"""Llama 4's text model (`llama4_text`, and the text model of a `llama4` checkpoint):

- layers with rotary embeddings (`no_rope_layers[i]` = 1) attend in chunks of
  `attention_chunk_size` positions; every `no_rope_layer_interval`-th layer has no rotary and
  attends to every earlier position, its queries scaled by position where
  `attn_temperature_tuning` (`LayerPlan.temperature`);
- the rotary is a complex number per pair of adjacent dimensions (`rope_tables` "complex",
  `rope_pairs` "interleaved"), and where `use_qk_norm` the rotated queries and keys are
  L2-normalised without a weight (`qk_norm` "after rope");
- the MoE layers (`moe_layers`) route by a sigmoid of the k largest router logits that scales
  each chosen expert's input; every expert runs as one batched product, and a shared expert's
  output is added (`routing` "sigmoid of top k, on inputs"). Its router returns other outputs
  than a top-k router's, so routing replay is not built for it.

transformers counts the temperature's positions from the cache's length (a left-padded row's
padding included); retrain's decoder counts them from the row's first real token, as an
unpadded forward and the trainer's right-padded one do.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of


class Llama4(Family):
    name: ClassVar[str] = "Llama 4"
    model_types: ClassVar[tuple[str, ...]] = ("llama4_text",)
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|eot|>",)

    def plan(self, config: Any) -> DecoderPlan:
        text = text_config(config)
        plan = plan_of(text)
        rotates = list(getattr(text, "no_rope_layers", None) or [1] * len(plan.layers))
        tuning = bool(getattr(text, "attn_temperature_tuning", False))
        layers = tuple(replace(layer, rotary=bool(rotates[i]), temperature=tuning and not rotates[i],
                               routing="sigmoid of top k, on inputs" if layer.mlp == "moe" else "")
                       for i, layer in enumerate(plan.layers))
        return replace(plan, layers=layers, rope_tables="complex", rope_pairs="interleaved",
                       qk_norm="after rope" if getattr(text, "use_qk_norm", False) else "before rope")
