"""Gemma 3 (`gemma3` as the hub ships it with its vision tower, `gemma3_text` without):
interleaved sliding-window and full-attention layers, Gemma's turn format.

Beside its layers' kinds (`models.layers`), a decoder running Gemma 3 itself must know what
transformers' modules do that a llama decoder does not: embeddings scaled by sqrt(hidden
size) in the embeddings' dtype, RMSNorm weights applied as (1 + w), four norms per layer
(before and after attention and MLP), q/k norms, a GeLU (tanh) gated MLP, the local layers'
own rotary base (`rope_local_base_freq`), and `query_pre_attn_scalar` as the attention scale.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of

NOTES = ("embeddings scaled by sqrt(hidden_size)", "RMSNorm as (1 + weight)",
         "norms before and after attention and MLP", "q/k RMSNorm", "GeLU (tanh) gated MLP",
         "sliding layers rotate with rope_local_base_freq", "attention scale query_pre_attn_scalar ** -0.5")


class Gemma3(Family):
    name: ClassVar[str] = "Gemma 3"
    model_types: ClassVar[tuple[str, ...]] = ("gemma3", "gemma3_text")
    end_of_turn: ClassVar[tuple[str, ...]] = ("<end_of_turn>",)

    def plan(self, config: Any) -> DecoderPlan:
        text = text_config(config)
        unstated = ""
        if getattr(text, "use_bidirectional_attention", False):
            unstated = "bidirectional attention (use_bidirectional_attention)"
        elif getattr(text, "attn_logit_softcapping", None):
            unstated = "soft-capped attention logits (attn_logit_softcapping)"
        return replace(plan_of(text), norm="fp32 1 + weight", unstated=unstated, notes=NOTES)
