"""Gemma 4 (`gemma4` as the hub ships it with its vision and audio towers, `gemma4_text`
without): sliding and full layers of different head sizes, layers that read another layer's
keys and values, per-layer input embeddings, optional MoE blocks, Gemma 4's turn format.

LoRA targets follow the reference's exact-target rule (`multimodal.exact_targets`): only
linear layers of the text model are adapted, by their full names; the towers' clipped linears
(which peft cannot wrap) are never loaded in the first place (`models.multimodal`).

A decoder running Gemma 4 itself must also know: full-attention layers use `global_head_dim`
and a partial ("proportional") rotary, keys double as values where `attention_k_eq_v`,
values are RMS-normalised without a weight, the logits are soft-capped
(`final_logit_softcapping`), and the embeddings are scaled as Gemma 3's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of

NOTES = ("full layers: global_head_dim, proportional partial rotary", "keys double as values when attention_k_eq_v",
         "values RMS-normalised without weight", "embeddings scaled by sqrt(hidden_size)",
         "norms before and after attention and MLP", "attention scale 1", "each layer's output times layer_scalar")


class Gemma4(Family):
    name: ClassVar[str] = "Gemma 4"
    model_types: ClassVar[tuple[str, ...]] = ("gemma4", "gemma4_text")
    end_of_turn: ClassVar[tuple[str, ...]] = ("<turn|>",)
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        text = text_config(config)
        plan = plan_of(text)
        layers = list(plan.layers)
        types = list(getattr(text, "layer_types", None) or [])
        shared = int(getattr(text, "num_kv_shared_layers", 0) or 0)
        first = len(layers) - shared
        if shared and 0 < first <= len(types):
            # transformers' rule (Gemma4TextAttention): a shared layer reads the last earlier
            # non-shared layer of its own kind
            for i in range(first, len(layers)):
                source = max(j for j in range(first) if types[j] == types[i])
                layers[i] = replace(layers[i], kv_source=source)
        # Gemma 4's routed experts run beside the dense MLP, not instead of it
        layers = [replace(layer, mlp="dense+moe") if layer.mlp == "moe" else layer for layer in layers]
        per_layer = bool(getattr(text, "hidden_size_per_layer_input", 0)) and \
            bool(getattr(text, "vocab_size_per_layer_input", 0))
        unstated = "bidirectional attention (use_bidirectional_attention = \"all\")" \
            if getattr(text, "use_bidirectional_attention", None) == "all" else ""
        return replace(plan, layers=tuple(layers), per_layer_inputs=per_layer, norm="fp32 weight", unstated=unstated,
                       notes=NOTES)

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        """Gemma 4's router returns its probabilities (a softmax in fp32): those of the k
        experts, renormalised over them, times each expert's learnt scale."""
        weights = scores.gather(-1, ids)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * router.per_expert_scale[ids]
