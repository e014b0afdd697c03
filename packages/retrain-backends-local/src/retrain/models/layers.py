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
  when i - window < j <= i, as transformers' masks and the trainer's forward compute it),
  `chunked` (causal inside the query's chunk of `window` positions: j is seen from i when
  j <= i and j // window == i // window, positions counted from the row's first real token,
  Llama 4), `latent` (multi-head latent attention, DeepSeek-V3: queries from a low-rank
  projection, keys and values expanded per head from one normalised latent per token, the
  rotary part of the keys shared by every head, values of their own width), or `linear`
  (Qwen3.5's and Qwen3-Next's gated delta rule: no keys and values, a recurrent state per head
  and the last `conv_kernel` inputs of a short causal convolution, both updated in place per
  token).
- `kv_source`: the layer whose keys and values this layer reads instead of computing its own
  (Gemma 4's shared-KV layers), or None.
- `rotary`: False for a layer that rotates nothing (Llama 4's no-RoPE layers); `temperature`:
  such a layer's queries scaled by 1 + attn_scale * log1p(floor((position + 1) / floor_scale))
  (Llama 4's attention temperature tuning; the constants are the attention module's).
- `sinks`: each head's softmax also counts a learnt logit that takes no value (gpt-oss's
  attention sinks: the weights of the real keys sum to less than 1).
- `mlp`: `dense` (one gated MLP), `moe` (`experts_per_token` of `experts` experts chosen per
  token by a router, with a shared expert where the block has one), or `dense+moe` (Gemma 4's:
  a dense MLP and a routed one side by side, each with its norms).
- `routing`: how a routed layer's router picks and weighs experts. `softmax`: a softmax over
  every expert, the top k kept (renormalised where the router's `norm_topk_prob` says;
  Qwen-MoE, Mixtral, OLMoE, Gemma 4 with its per-expert scales). `softmax of top k`: the k
  largest logits, a softmax over them alone (gpt-oss's biased router). `grouped sigmoid`:
  sigmoid scores plus a correction bias choose the best groups of experts, then the top k in
  them; the weights are the sigmoid scores, renormalised where `norm_topk_prob`, times the
  routed scaling factor (DeepSeek-V3, GLM-4.5). `sigmoid of top k, on inputs`: the k largest
  logits through a sigmoid scale each chosen expert's *input*, every expert's weights are one
  batched product (Llama 4). The first three are computed by the model's router module
  (hidden -> logits, weights, ids), the experts by its experts module; what each expert
  computes (clamped SwiGLU with biases: gpt-oss) is that module's.
- `rope`: the key of the layer's rotary table where the model keeps one per layer type
  (Gemma's sliding and full layers rotate differently), or "" for the model's one table.
- model-wide: `logit_softcap` (logits = c * tanh(logits / c) after the head), `logit_scale`
  (logits divided by it after the head: Granite), `per_layer_inputs` (Gemma 4's per-layer
  input embeddings added inside every layer), `norm` (how an RMSNorm applies its weight:
  `weight` as llama, `w * x̂.to(dtype)`; `fp32 weight`, `(x̂ * w).to(dtype)` as Gemma 4 and
  gpt-oss; `fp32 1 + weight`, `(x̂ * (1 + w)).to(dtype)` as Gemma 3, Qwen3.5 and Qwen3-Next),
  `attention_gate` (the query projection also yields a per-head gate: attention output times
  sigmoid(gate), Qwen3.5 and Qwen3-Next), `rope_axes` (position axes the rotary module takes:
  3 for Qwen3.5's multimodal rotary, a text token at the same position on each),
  `rope_tables` (what the rotary module returns per position: `dims`, a cosine and a sine per
  rotated dimension, each angle twice, as transformers' default; `pairs`, one per pair of
  dimensions, gpt-oss; `complex`, one complex number per pair, Llama 4), `rope_pairs` (which
  dimensions rotate together: `halves`, i and i + d/2 (rotate-half); `interleaved`, 2i and
  2i + 1 written back in place (Llama 4); `interleaved to halves`, 2i and 2i + 1 written out as
  the first and second half (DeepSeek-V3's `rope_interleave`)), `qk_norm` (`before rope`, as
  every q/k norm but one; `after rope`: Llama 4's weightless L2 norm of rotated queries and
  keys), `clip_qkv` (queries, keys and values clamped to +-c after their projections and
  norms: OLMoE).
- `unstated`: what the model computes that no field above states (a family retrain has no
  full description of, and why); a decoder must not run such a model.

The module tree says the rest on its face, and a decoder reads it there: sandwich norms (a
layer with `pre_feedforward_layernorm`), q/k/v norms, scaled embeddings (`embed_scale`), a
layer's scalar (`layer_scalar`), keys doubling as values (no `v_proj`), the attention scale
(`scaling`), activation functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Attention = Literal["full", "sliding", "chunked", "latent", "linear"]
Mlp = Literal["dense", "moe", "dense+moe"]
Routing = Literal["", "softmax", "softmax of top k", "grouped sigmoid", "sigmoid of top k, on inputs"]
Norm = Literal["weight", "fp32 weight", "fp32 1 + weight"]
RopeTables = Literal["dims", "pairs", "complex"]
RopePairs = Literal["halves", "interleaved", "interleaved to halves"]
QkNorm = Literal["before rope", "after rope"]


@dataclass(frozen=True)
class LayerPlan:
    attention: Attention = "full"
    window: int = 0  # sliding: positions seen, the query's own included; chunked: the chunk's length
    conv_kernel: int = 0  # linear: the short convolution's width
    kv_source: int | None = None
    mlp: Mlp = "dense"
    experts: int = 0
    experts_per_token: int = 0
    routing: Routing = ""
    rope: str = ""
    rotary: bool = True
    temperature: bool = False
    sinks: bool = False


@dataclass(frozen=True)
class Implements:
    """What a decoder runs of a plan (`DecoderPlan.unsupported`); the defaults: the llama layer."""

    attention: tuple[Attention, ...] = ("full",)
    mlp: tuple[Mlp, ...] = ("dense",)
    routing: tuple[Routing, ...] = ()
    norms: tuple[Norm, ...] = ("weight",)
    head_math: bool = False  # the head's soft-cap and scale
    shared_kv: bool = False
    per_layer_inputs: bool = False
    attention_gate: bool = False
    rope_axes: tuple[int, ...] = (1,)
    rope_tables: tuple[RopeTables, ...] = ("dims",)
    rope_pairs: tuple[RopePairs, ...] = ("halves",)
    qk_norm: tuple[QkNorm, ...] = ("before rope",)
    no_rope: bool = False  # layers without rotary, with their temperature tuning
    sinks: bool = False
    clip_qkv: bool = False


@dataclass(frozen=True)
class DecoderPlan:
    layers: tuple[LayerPlan, ...]
    logit_softcap: float | None = None
    logit_scale: float = 1.0
    per_layer_inputs: bool = False
    norm: Norm = "weight"
    attention_gate: bool = False
    rope_axes: int = 1
    rope_tables: RopeTables = "dims"
    rope_pairs: RopePairs = "halves"
    qk_norm: QkNorm = "before rope"
    clip_qkv: float | None = None
    unstated: str = ""
    notes: tuple[str, ...] = field(default=())  # what else a decoder must know, in words

    def unsupported(self, *, columns: int, implements: Implements = Implements()) -> str | None:
        """Why a decoder that runs what `implements` says cannot run this model for sequences
        of `columns` tokens; None when it can. A sliding window or a chunk no shorter than the
        sequence is full attention."""
        if self.unstated:
            return self.unstated
        for i, layer in enumerate(self.layers):
            why = _layer_unsupported(layer, columns, implements)
            if why is not None:
                return f"{why} (layer {i})"
        can = implements
        if not can.head_math and (self.logit_softcap is not None or self.logit_scale != 1.0):
            return "soft-capped or scaled logits"
        if self.per_layer_inputs and not can.per_layer_inputs:
            return "per-layer input embeddings"
        if self.norm not in can.norms:
            return f"RMSNorms applied as {self.norm}"
        if self.attention_gate and not can.attention_gate:
            return "a gated attention output"
        if self.rope_axes not in can.rope_axes:
            return f"a rotary module of {self.rope_axes} position axes"
        if self.rope_tables not in can.rope_tables or self.rope_pairs not in can.rope_pairs:
            return f"rotary tables of {self.rope_tables} rotating {self.rope_pairs}"
        if self.qk_norm not in can.qk_norm:
            return f"q/k norms {self.qk_norm}"
        if self.clip_qkv is not None and not can.clip_qkv:
            return "clipped queries, keys and values"
        return None


def _layer_unsupported(layer: LayerPlan, columns: int, can: Implements) -> str | None:
    kind = layer.attention
    if kind in ("sliding", "chunked") and layer.window >= columns:
        kind = "full"
    if kind not in can.attention:
        if kind == "sliding":
            return f"a sliding window of {layer.window} tokens shorter than the sequence"
        if kind == "chunked":
            return f"attention in chunks of {layer.window} tokens shorter than the sequence"
        return f"{kind} attention"
    if layer.kv_source is not None and not can.shared_kv:
        return f"keys and values shared with layer {layer.kv_source}"
    if (not layer.rotary or layer.temperature) and not can.no_rope:
        return "attention without rotary embeddings"
    if layer.sinks and not can.sinks:
        return "attention sinks"
    if layer.mlp not in can.mlp:
        return "a mixture-of-experts MLP" if layer.mlp == "moe" else f"a {layer.mlp} MLP"
    if layer.routing and layer.routing not in can.routing:
        return f"experts routed by {layer.routing}"
    return None


def plan_of(config: Any) -> DecoderPlan:
    """The plan transformers' own config states: `layer_types` (full, sliding, chunked,
    linear), the `sliding_window` (transformers 5 keeps it on the config, not on the attention
    module) or `attention_chunk_size`, a router's expert counts (its routing a softmax: a
    family whose router differs says so), the head's soft-cap and scale. A family with more to
    say (`retrain.models.family.Family.plan`) builds on this."""
    n = int(getattr(config, "num_hidden_layers", 0) or 0)
    window = int(getattr(config, "sliding_window", 0) or 0)
    chunk = int(getattr(config, "attention_chunk_size", 0) or 0)
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
        moe, attention = i in moe_layers, _attention(kind)
        layers.append(LayerPlan(
            attention=attention,
            window={"sliding": window, "chunked": chunk}.get(attention, 0),
            conv_kernel=int(getattr(config, "linear_conv_kernel_dim", 0) or 0) if kind == "linear_attention" else 0,
            mlp="moe" if moe else "dense", experts=experts if moe else 0, experts_per_token=per_token if moe else 0,
            routing="softmax" if moe else "", rope=kind if keyed else ""))
    softcap = getattr(config, "final_logit_softcapping", None)
    return DecoderPlan(layers=tuple(layers), logit_softcap=float(softcap) if softcap else None,
                       logit_scale=float(getattr(config, "logits_scaling", 1.0) or 1.0))


def _attention(kind: str) -> Attention:
    if kind in ("sliding_attention", "hybrid_sliding"):
        return "sliding"
    if kind == "chunked_attention":
        return "chunked"
    if kind in ("linear_attention", "conv", "mamba", "hybrid"):
        return "linear"
    return "full"


def _moe_layers(config: Any, n: int, experts: int) -> set[int]:
    """Layers with a routed MLP: Qwen-MoE's `decoder_sparse_step` and `mlp_only_layers`,
    DeepSeek's `first_k_dense_replace`, Llama 4's `moe_layers`, Gemma 4's `enable_moe_block`,
    every layer of a model with experts otherwise."""
    if not experts:
        return set()
    if getattr(config, "enable_moe_block", None) is False:
        return set()
    listed = getattr(config, "moe_layers", None)
    if isinstance(listed, (list, tuple)):
        return {int(i) for i in listed}
    step = int(getattr(config, "decoder_sparse_step", 1) or 1)
    dense = set(getattr(config, "mlp_only_layers", None) or [])
    first = int(getattr(config, "first_k_dense_replace", 0) or 0)
    return {i for i in range(n) if i not in dense and i >= first and (i + 1) % step == 0}
