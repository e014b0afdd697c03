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
- `mlp`: `dense` (one gated MLP), `moe` (`experts_per_token` of `experts` experts chosen per
  token by a router, with a sigmoid-gated shared expert where the block has one), or
  `dense+moe` (Gemma 4's: a dense MLP and a routed one side by side, each with its norms).
- `rope`: the key of the layer's rotary table where the model keeps one per layer type
  (Gemma's sliding and full layers rotate differently), or "" for the model's one table.
- model-wide: `logit_softcap` (logits = c * tanh(logits / c) after the head), `logit_scale`
  (logits divided by it after the head: Granite), `per_layer_inputs` (Gemma 4's per-layer
  input embeddings added inside every layer), `norm` (how an RMSNorm applies its weight:
  `weight` as llama, `w * x̂.to(dtype)`; `fp32 weight`, `(x̂ * w).to(dtype)` as Gemma 4;
  `fp32 1 + weight`, `(x̂ * (1 + w)).to(dtype)` as Gemma 3 and Qwen3.5), `attention_gate` (the
  query projection also yields a per-head gate: attention output times sigmoid(gate), Qwen3.5),
  `rope_axes` (position axes the rotary module takes: 3 for Qwen3.5's multimodal rotary, a
  text token at the same position on each).
- `unstated`: what the model computes that no field above states (a family retrain has no
  full description of, and why); a decoder must not run such a model.

The module tree says the rest on its face, and a decoder reads it there: sandwich norms (a
layer with `pre_feedforward_layernorm`), q/k/v norms, scaled embeddings (`embed_scale`), a
layer's scalar (`layer_scalar`), keys doubling as values (no `v_proj`), the attention scale
(`scaling`), activation functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Attention = Literal["full", "sliding", "linear"]
Mlp = Literal["dense", "moe", "dense+moe"]
Norm = Literal["weight", "fp32 weight", "fp32 1 + weight"]


@dataclass(frozen=True)
class LayerPlan:
    attention: Attention = "full"
    window: int = 0  # sliding: positions seen, the query's own included
    conv_kernel: int = 0  # linear: the short convolution's width
    kv_source: int | None = None
    mlp: Mlp = "dense"
    experts: int = 0
    experts_per_token: int = 0
    rope: str = ""


@dataclass(frozen=True)
class DecoderPlan:
    layers: tuple[LayerPlan, ...]
    logit_softcap: float | None = None
    logit_scale: float = 1.0
    per_layer_inputs: bool = False
    norm: Norm = "weight"
    attention_gate: bool = False
    rope_axes: int = 1
    unstated: str = ""
    notes: tuple[str, ...] = field(default=())  # what else a decoder must know, in words

    def unsupported(self, *, columns: int, attention: Iterable[Attention] = ("full",),
                    mlp: Iterable[Mlp] = ("dense",), norms: Iterable[Norm] = ("weight",),
                    head_math: bool = False, shared_kv: bool = False, per_layer_inputs: bool = False,
                    attention_gate: bool = False, rope_axes: Iterable[int] = (1,)) -> str | None:
        """Why a decoder that implements `attention` kinds, `mlp` kinds, `norms`, (`head_math`)
        the head's soft-cap and scale, `shared_kv` layers, `per_layer_inputs`, the
        `attention_gate` and rotary modules of `rope_axes` cannot run this model for sequences
        of `columns` tokens; None when it can. A sliding window no shorter than the sequence is
        full attention."""
        if self.unstated:
            return self.unstated
        attention, mlp = set(attention), set(mlp)
        for i, layer in enumerate(self.layers):
            kind = layer.attention
            if kind == "sliding" and layer.window >= columns:
                kind = "full"
            if kind not in attention:
                if kind == "sliding":
                    return f"a sliding window of {layer.window} tokens (layer {i}) shorter than the sequence"
                return f"{kind} attention (layer {i})"
            if layer.kv_source is not None and not shared_kv:
                return f"keys and values shared with layer {layer.kv_source} (layer {i})"
            if layer.mlp not in mlp:
                return f"a mixture-of-experts MLP (layer {i})" if layer.mlp == "moe" else \
                    f"a {layer.mlp} MLP (layer {i})"
        if not head_math and (self.logit_softcap is not None or self.logit_scale != 1.0):
            return "soft-capped or scaled logits"
        if self.per_layer_inputs and not per_layer_inputs:
            return "per-layer input embeddings"
        if self.norm not in set(norms):
            return f"RMSNorms applied as {self.norm}"
        if self.attention_gate and not attention_gate:
            return "a gated attention output"
        if self.rope_axes not in set(rope_axes):
            return f"a rotary module of {self.rope_axes} position axes"
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
    rope = getattr(config, "rope_parameters", None)
    # transformers keeps one rotary table per layer type where `rope_parameters` is keyed by them
    keyed = isinstance(rope, dict) and bool(types) and all(t in rope for t in set(types))
    layers = []
    for i, kind in enumerate(types):
        moe = i in moe_layers
        layers.append(LayerPlan(
            attention=_attention(kind),
            window=window if _attention(kind) == "sliding" else 0,
            conv_kernel=int(getattr(config, "linear_conv_kernel_dim", 0) or 0) if kind == "linear_attention" else 0,
            mlp="moe" if moe else "dense", experts=experts if moe else 0, experts_per_token=per_token if moe else 0,
            rope=kind if keyed else ""))
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
