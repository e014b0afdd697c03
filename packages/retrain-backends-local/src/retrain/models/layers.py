"""How each decoder layer of a model runs: the contract between a model family
(`retrain.models.family`) and a decoder that runs the model's weights itself
(`retrain.inference_engine.pytorch.forward.lean`).

A decoder asks the family for the model's `DecoderPlan` and runs a layer only when it
implements every field of that layer's `LayerPlan`; anything it does not implement is a
reason to decode on transformers' forward instead (`DecoderPlan.unsupported`). transformers'
module tree stays the source of the weights; the plan says what to do with them that the
tree does not say on its face:

- `attention`: `full` (causal over every earlier position), `sliding` (causal over the last
  `window` positions, the query's own included: a key at position j is seen from position i
  when i - window < j <= i, as transformers' masks and the trainer's forward compute it), or
  `linear` (Qwen3.5's gated delta rule: no keys and values, a recurrent state per head and
  the last `conv_kernel` inputs of a short causal convolution, both updated in place per
  token).
- `kv_source`: the layer whose keys and values this layer reads instead of computing its own
  (Gemma 4's shared-KV layers), or None.
- `mlp`: `dense` (one gated MLP) or `moe` (`experts_per_token` of `experts` experts chosen
  per token by a router).
- model-wide: `logit_softcap` (logits = c * tanh(logits / c) after the head), `logit_scale`
  (logits divided by it after the head: Granite), `per_layer_inputs` (Gemma 4's per-layer
  input embeddings added inside every layer).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Attention = Literal["full", "sliding", "linear"]
Mlp = Literal["dense", "moe"]


@dataclass(frozen=True)
class LayerPlan:
    attention: Attention = "full"
    window: int = 0  # sliding: positions seen, the query's own included
    conv_kernel: int = 0  # linear: the short convolution's width
    kv_source: int | None = None
    mlp: Mlp = "dense"
    experts: int = 0
    experts_per_token: int = 0


@dataclass(frozen=True)
class DecoderPlan:
    layers: tuple[LayerPlan, ...]
    logit_softcap: float | None = None
    logit_scale: float = 1.0
    per_layer_inputs: bool = False
    notes: tuple[str, ...] = field(default=())  # what else a decoder must know, in words

    def unsupported(self, *, columns: int, attention: Iterable[Attention] = ("full",),
                    mlp: Iterable[Mlp] = ("dense",), head_math: bool = False) -> str | None:
        """Why a decoder that implements `attention` kinds, `mlp` kinds and (`head_math`) the
        head's soft-cap and scale cannot run this model for sequences of `columns` tokens;
        None when it can. A sliding window no shorter than the sequence is full attention."""
        attention, mlp = set(attention), set(mlp)
        for i, layer in enumerate(self.layers):
            kind = layer.attention
            if kind == "sliding" and layer.window >= columns:
                kind = "full"
            if kind not in attention:
                if kind == "sliding":
                    return f"a sliding window of {layer.window} tokens (layer {i}) shorter than the sequence"
                return f"{kind} attention (layer {i})"
            if layer.kv_source is not None:
                return f"keys and values shared with layer {layer.kv_source} (layer {i})"
            if layer.mlp not in mlp:
                return f"a mixture-of-experts MLP (layer {i})"
        if not head_math and (self.logit_softcap is not None or self.logit_scale != 1.0):
            return "soft-capped or scaled logits"
        if self.per_layer_inputs:
            return "per-layer input embeddings"
        return None


def plan_of(config: Any) -> DecoderPlan:
    """The plan transformers' own config states: `layer_types` (full, sliding, linear), the
    `sliding_window` (transformers 5 keeps it on the config, not on the attention module), a
    router's expert counts, the head's soft-cap and scale. A family with more to say
    (`retrain.models.family.Family.plan`) builds on this."""
    n = int(getattr(config, "num_hidden_layers", 0) or 0)
    window = int(getattr(config, "sliding_window", 0) or 0)
    types = list(getattr(config, "layer_types", None) or [])
    if not types:
        # transformers' rule (cache_utils.get_layer_types_and_kwargs): a window on the config
        # and no layer types means every layer slides
        types = ["sliding_attention" if window else "full_attention"] * n
    experts = int(getattr(config, "num_experts", 0) or getattr(config, "num_local_experts", 0) or 0)
    per_token = int(getattr(config, "num_experts_per_tok", 0) or getattr(config, "top_k_experts", 0) or 0)
    moe_layers = _moe_layers(config, n, experts)
    layers = []
    for i, kind in enumerate(types):
        moe = i in moe_layers
        layers.append(LayerPlan(
            attention=_attention(kind),
            window=window if _attention(kind) == "sliding" else 0,
            conv_kernel=int(getattr(config, "linear_conv_kernel_dim", 0) or 0) if kind == "linear_attention" else 0,
            mlp="moe" if moe else "dense", experts=experts if moe else 0, experts_per_token=per_token if moe else 0))
    softcap = getattr(config, "final_logit_softcapping", None)
    return DecoderPlan(layers=tuple(layers), logit_softcap=float(softcap) if softcap else None,
                       logit_scale=float(getattr(config, "logits_scaling", 1.0) or 1.0))


def _attention(kind: str) -> Attention:
    if kind in ("sliding_attention", "chunked_attention", "hybrid_sliding"):
        return "sliding"
    if kind in ("linear_attention", "conv", "mamba", "hybrid"):
        return "linear"
    return "full"


def _moe_layers(config: Any, n: int, experts: int) -> set[int]:
    """Layers with a routed MLP: Qwen-MoE's `decoder_sparse_step` and `mlp_only_layers`,
    Gemma 4's `enable_moe_block`, every layer of a model with experts otherwise."""
    if not experts:
        return set()
    if getattr(config, "enable_moe_block", None) is False:
        return set()
    step = int(getattr(config, "decoder_sparse_step", 1) or 1)
    dense = set(getattr(config, "mlp_only_layers", None) or [])
    return {i for i in range(n) if i not in dense and (i + 1) % step == 0}
