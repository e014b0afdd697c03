"""retrain's decoder built from a transformers causal LM (peft-wrapped or not; the text model
retrain loads from a multimodal checkpoint is one): the family's plan (`retrain.models.layers`) says how
each layer runs, the module tree holds the weights and says the rest on its face. Anything the
decoder does not run (the plan's answer, quantised or hooked layers, DoRA, sharded weights, a
rotary that depends on the length seen so far) raises `Unsupported` naming it, and the caller
decodes on transformers' forward instead.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.attention import Attention, Rotation
from retrain.inference_engine.pytorch.forward.context import FULL, Span
from retrain.inference_engine.pytorch.forward.delta import GatedDelta
from retrain.inference_engine.pytorch.forward.latent import LatentAttention
from retrain.inference_engine.pytorch.forward.linear import Linears, Unsupported, base
from retrain.inference_engine.pytorch.forward.mlp import (
    Dense,
    DenseAndRouted,
    InputScaled,
    Mlp,
    Routed,
)
from retrain.inference_engine.pytorch.forward.model import (
    Block,
    LeanModel,
    PerLayer,
    PerLayerInputs,
)
from retrain.inference_engine.pytorch.forward.ops import Norm, heads_norm
from retrain.inference_engine.pytorch.forward.regroup import gated_delta_parts
from retrain.models.families import family_of
from retrain.models.family import text_config
from retrain.models.layers import DecoderPlan, Implements, LayerPlan

#: rotary variants whose frequencies do not depend on the sequence length seen so far
STATIC_ROPE = frozenset({"default", "linear", "llama3", "yarn", "proportional"})
#: the short convolution's activations of a gated delta layer
CONV_ACTIVATIONS = {"silu": F.silu, "swish": F.silu}
#: what the decoder implements of a plan
IMPLEMENTS = Implements(
    attention=("full", "sliding", "chunked", "latent", "linear"), mlp=("dense", "moe", "dense+moe"),
    routing=("softmax", "softmax of top k", "grouped sigmoid", "sigmoid of top k, on inputs"),
    norms=("weight", "fp32 weight", "fp32 1 + weight"), head_math=True, shared_kv=True, per_layer_inputs=True,
    attention_gate=True, rope_axes=(1, 3), rope_tables=("dims", "pairs", "complex"),
    rope_pairs=("halves", "interleaved", "interleaved to halves"), qk_norm=("before rope", "after rope"),
    no_rope=True, sinks=True, clip_qkv=True)


def build(model: nn.Module, compute_dtype: torch.dtype | None, *, columns: int,
          pack_rows: int | None = None) -> LeanModel:
    """The decoder on `model`'s weights for sequences of `columns` tokens; raises Unsupported
    naming what does not fit. The linears of one input are stacked where their weights are
    copied anyway (a cast to the compute dtype, or `pack_rows`: oneDNN-packed for that many
    rows on the CPU)."""
    lm: Any = model.get_base_model() if hasattr(model, "get_base_model") else model
    config: Any = getattr(lm, "config", None)
    if config is None:
        raise Unsupported("a model without a transformers config")
    plan = family_of(config).plan(config)
    why = plan.unsupported(columns=columns, implements=IMPLEMENTS)
    if why is not None:
        raise Unsupported(why)
    body = _text_body(lm)
    _refuse_hooks(lm)
    if any(_is_distributed(p) for p in lm.parameters()):
        raise Unsupported("sharded (DTensor) parameters")
    embed, embed_scale = _embeddings(body.embed_tokens)
    dtype = compute_dtype or embed.dtype
    if pack_rows is not None and (embed.device.type != "cpu" or dtype != torch.float32
                                  or not torch.backends.mkldnn.is_available()):
        pack_rows = None
    linears = Linears(dtype, pack_rows, stack=pack_rows is not None or dtype != embed.dtype)
    text = text_config(config)
    blocks: list[Block] = []
    for i, (module, layer) in enumerate(zip(body.layers, plan.layers, strict=True)):
        blocks.append(_block(i, module, layer, plan, text, linears, blocks, columns))
    attention = [b.mixer for b in blocks if isinstance(b.mixer, Attention)]
    tables = {a.rotation.table for a in attention} | {b.mixer.table for b in blocks if isinstance(b.mixer, LatentAttention)}
    return LeanModel(
        embed=embed, embed_scale=embed_scale, blocks=blocks, norm=Norm.of(body.norm, plan.norm),
        head=linears.one(lm.lm_head), rotary=_rotary(body), rope_keys=tuple(sorted(t for t in tables if t is not None)),
        rope_axes=plan.rope_axes, rope_kind=plan.rope_tables, spans=tuple(sorted({a.span for a in attention} - {FULL})),
        sources=frozenset(layer.kv_source for layer in plan.layers if layer.kv_source is not None),
        per_layer=_per_layer_inputs(body, text, plan, linears) if plan.per_layer_inputs else None,
        logit_scale=plan.logit_scale, softcap=plan.logit_softcap, dtype=dtype)


def _text_body(lm: Any) -> Any:
    """The decoder stack of a causal LM. A multimodal class is refused: on text alone it can
    differ from its text model (Gemma 4's maps its placeholder tokens to padding), and retrain
    loads a multimodal checkpoint's text model alone (`retrain.models.multimodal`)."""
    body = getattr(lm, "model", None)
    if hasattr(body, "language_model"):
        raise Unsupported(f"a multimodal {type(lm).__name__} (retrain's decoder runs the text model retrain loads "
                          "from such a checkpoint)")
    if body is None or not hasattr(body, "layers") or not hasattr(lm, "lm_head"):
        raise Unsupported(f"a {type(lm).__name__} without a decoder stack and a head")
    return body


def _embeddings(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    if type(module) is nn.Embedding:
        return module.weight, None
    if type(module).__name__.endswith("ScaledWordEmbedding") and hasattr(module, "embed_scale"):
        return module.weight, module.embed_scale
    raise Unsupported(f"the embeddings are a {type(module).__name__}")


def _rotary(body: Any) -> Any:
    rotary = getattr(body, "rotary_emb", None)
    kinds = getattr(rotary, "rope_type", None)
    kinds = set(kinds.values()) if isinstance(kinds, dict) else {str(kinds or "default")}
    if rotary is None or not kinds <= STATIC_ROPE:
        raise Unsupported(f"rotary type {', '.join(sorted(kinds))}")
    return rotary


def _block(i: int, module: Any, layer: LayerPlan, plan: DecoderPlan, text: Any, linears: Linears,
           blocks: Sequence[Block], columns: int) -> Block:
    kind = plan.norm
    mixer: Attention | LatentAttention | GatedDelta
    if layer.attention == "linear":
        mixer = _gated_delta(i, module.linear_attn, kind, linears)
    elif layer.attention == "latent":
        mixer = _latent(i, module.self_attn, plan, text, linears)
    else:
        mixer = _attention(i, module.self_attn, layer, plan, text, linears, blocks, columns)
    sandwich = hasattr(module, "pre_feedforward_layernorm")  # Gemma: norms after attention and MLP too
    post_mixer = Norm.of(module.post_attention_layernorm, kind) if sandwich else None
    pre_mlp: Norm | None = Norm.of(module.pre_feedforward_layernorm if sandwich else module.post_attention_layernorm, kind)
    block_mlp = module.mlp if hasattr(module, "mlp") else module.feed_forward  # Llama 4's name
    mlp: Mlp
    if layer.mlp == "dense+moe":
        assert pre_mlp is not None
        mlp = DenseAndRouted(pre_mlp, _dense(block_mlp, linears), Norm.of(module.post_feedforward_layernorm_1, kind),
                             module.router, Norm.of(module.pre_feedforward_layernorm_2, kind), module.experts,
                             Norm.of(module.post_feedforward_layernorm_2, kind))
        pre_mlp = None
    elif layer.mlp == "moe":
        mlp = _routed(i, block_mlp, layer, linears)
    else:
        mlp = _dense(block_mlp, linears)
    per_layer = None
    if plan.per_layer_inputs:
        per_layer = PerLayer(linears.one(module.per_layer_input_gate), linears.one(module.per_layer_projection),
                             Norm.of(module.post_per_layer_input_norm, kind), module.act_fn)
    return Block(i, mixer, Norm.of(module.input_layernorm, kind), post_mixer, pre_mlp, mlp,
                 Norm.of(module.post_feedforward_layernorm, kind) if sandwich else None, per_layer,
                 getattr(module, "layer_scalar", None))


def _attention(i: int, attn: Any, layer: LayerPlan, plan: DecoderPlan, text: Any, linears: Linears,
               blocks: Sequence[Block], columns: int) -> Attention:
    if getattr(attn, "attn_logit_softcapping", None) or getattr(attn, "is_causal", True) is False:
        raise Unsupported(f"soft-capped or non-causal attention (layer {i})")
    heads, d = int(text.num_attention_heads), int(attn.head_dim)
    q_out = base(attn.q_proj).out_features
    if q_out != heads * d * (2 if plan.attention_gate else 1):
        raise Unsupported(f"a query projection of {q_out} outputs for {heads} heads of {d} (layer {i})")

    def norm(name: str) -> Norm | None:
        return Norm.of(getattr(attn, name), plan.norm) if hasattr(attn, name) else None

    q_norm, k_norm = norm("q_norm"), norm("k_norm")
    wide = q_norm is not None and q_norm.weight is not None and q_norm.weight.numel() == heads * d != d
    source = layer.kv_source
    if source is not None:
        owner = blocks[source].mixer
        if not isinstance(owner, Attention) or owner.source is not None or owner.head_dim != d:
            raise Unsupported(f"layer {i} reads the keys and values of layer {source}, which has none of its shape")
        kv, k_is_v, qkv = owner.kv_heads, False, linears(attn.q_proj)
        qk_norm = heads_norm([(q_norm, heads)])
    else:
        k_is_v = getattr(attn, "v_proj", None) is None
        kv = base(attn.k_proj).out_features // d
        qkv = linears(attn.q_proj, attn.k_proj, *(() if k_is_v else (attn.v_proj,)))
        qk_norm = None if wide else heads_norm([(q_norm, heads), (k_norm, kv)])
    if (wide or plan.clip_qkv is not None) and (source is not None or k_is_v or plan.attention_gate):
        raise Unsupported(f"norms over all heads or clipped projections beside shared, gated or key-only values (layer {i})")
    span: Span = FULL
    if layer.attention in ("sliding", "chunked") and layer.window < columns:
        span = (layer.attention, layer.window)
    return Attention(i, qkv, linears.one(attn.o_proj), heads, kv, d, float(getattr(attn, "scaling", d ** -0.5)),
                     qk_norm, norm("v_norm") if source is None else None, plan.attention_gate, k_is_v, source, span,
                     _rotation(i, attn, layer, plan), linears.dtype,
                     wide_norms=(q_norm, k_norm) if wide and q_norm is not None and k_norm is not None else None,
                     clip=plan.clip_qkv, sinks=attn.sinks if layer.sinks else None)


def _rotation(i: int, attn: Any, layer: LayerPlan, plan: DecoderPlan) -> Rotation:
    """The layer's rotary table, pairs, norm after rotation (a weightless `qk_norm` module:
    Llama 4's) and temperature tuning, as the plan says them; a module the plan does not
    account for is refused."""
    after = getattr(attn, "qk_norm", None)
    if (after is not None) != (plan.qk_norm == "after rope" and layer.rotary):
        raise Unsupported(f"a q/k norm after the rotation the plan does not state (layer {i})")
    norm_after = None
    if after is not None:
        if getattr(after, "weight", None) is not None or not isinstance(getattr(after, "eps", None), float):
            raise Unsupported(f"a {type(after).__name__} after the rotation (layer {i})")
        norm_after = Norm(None, float(after.eps))
    temperature = None
    if layer.temperature:
        temperature = (float(attn.attn_scale), float(attn.floor_scale))
    return Rotation(layer.rope if layer.rotary else None, plan.rope_pairs, norm_after, temperature)


def _latent(i: int, attn: Any, plan: DecoderPlan, text: Any, linears: Linears) -> LatentAttention:
    """DeepSeek-V3's multi-head latent attention; one KV head per query head, as its
    attention computes it (keys are expanded for every query head)."""
    heads = int(text.num_attention_heads)
    if int(getattr(text, "num_key_value_heads", heads) or heads) != heads:
        raise Unsupported(f"latent attention with {text.num_key_value_heads} KV heads for {heads} query heads (layer {i})")
    low_rank = getattr(attn, "q_a_proj", None) is not None
    first = attn.q_a_proj if low_rank else attn.q_proj
    return LatentAttention(
        i, linears(first, attn.kv_a_proj_with_mqa), Norm.of(attn.q_a_layernorm, plan.norm) if low_rank else None,
        linears.one(attn.q_b_proj) if low_rank else None, Norm.of(attn.kv_a_layernorm, plan.norm),
        linears.one(attn.kv_b_proj), linears.one(attn.o_proj), heads, int(attn.qk_nope_head_dim),
        int(attn.qk_rope_head_dim), int(attn.v_head_dim), int(attn.kv_lora_rank), float(attn.scaling),
        "", plan.rope_pairs, linears.dtype)


def _gated_delta(i: int, la: Any, kind: str, linears: Linears) -> GatedDelta:
    """A Gated DeltaNet layer; its chunked rule is the one its modeling module runs (set by the
    family's kernel choice, `retrain.models.qwen35`). Qwen3-Next's projections, grouped per
    key head, are taken apart into Qwen3.5's (`forward.regroup`)."""
    chunk_rule = getattr(sys.modules[type(la).__module__], "torch_chunk_gated_delta_rule", None)
    act = CONV_ACTIVATIONS.get(str(getattr(la, "activation", "")))
    gated = getattr(la, "norm", None)
    if chunk_rule is None or act is None or getattr(gated, "activation", None) != "silu":
        raise Unsupported(f"a {type(la).__name__} (layer {i}) unlike Qwen3.5's")
    if hasattr(la, "in_proj_qkvz"):
        proj = linears.parts(*gated_delta_parts(la))
    else:
        proj = linears(la.in_proj_qkv, la.in_proj_z, la.in_proj_b, la.in_proj_a)
    return GatedDelta(i, proj, la.conv1d.weight, la.conv1d.bias, act, la.A_log, la.dt_bias,
                      Norm(gated.weight, float(gated.variance_epsilon)), linears.one(la.out_proj), int(la.num_k_heads),
                      int(la.num_v_heads), int(la.head_k_dim), int(la.head_v_dim), chunk_rule, linears.dtype)


def _dense(mlp: Any, linears: Linears) -> Dense:
    act = getattr(mlp, "act_fn", None) or getattr(mlp, "activation_fn", None)  # Llama 4's name
    return Dense(linears(mlp.gate_proj, mlp.up_proj), linears.one(mlp.down_proj), act)


def _routed(i: int, mlp: Any, layer: LayerPlan, linears: Linears) -> Mlp:
    """The block's router and experts modules (`gate`, or gpt-oss's and Llama 4's `router`),
    with its shared expert: sigmoid-gated (`shared_expert` and `shared_expert_gate`), added as
    it is (DeepSeek's `shared_experts`, Llama 4's `shared_expert`)."""
    router = getattr(mlp, "gate", None) if hasattr(mlp, "gate") else getattr(mlp, "router", None)
    experts = getattr(mlp, "experts", None)
    if router is None or experts is None or not type(getattr(router, "base_layer", router)).__name__.endswith("Router"):
        raise Unsupported(f"a {type(mlp).__name__} whose router is not a router module (layer {i})")
    if layer.routing == "sigmoid of top k, on inputs":
        return InputScaled(router, experts, _dense(mlp.shared_expert, linears))
    shared = getattr(mlp, "shared_expert", None) or getattr(mlp, "shared_experts", None)
    if shared is None:
        return Routed(router, experts)
    gate = getattr(mlp, "shared_expert_gate", None)
    return Routed(router, experts, _dense(shared, linears), linears.one(gate) if gate is not None else None)


def _per_layer_inputs(body: Any, text: Any, plan: DecoderPlan, linears: Linears) -> PerLayerInputs:
    embed, scale = _embeddings(body.embed_tokens_per_layer)
    assert scale is not None
    return PerLayerInputs(embed, scale, linears.one(body.per_layer_model_projection),
                          float(body.per_layer_model_projection_scale), Norm.of(body.per_layer_projection_norm, plan.norm),
                          float(body.per_layer_input_scale), int(text.num_hidden_layers),
                          int(text.hidden_size_per_layer_input))


#: hooks that act on gradients only, which sampling (inference mode) has none of: retrain's
#: LoRA-input detach and the embeddings' requires-grad hook of gradient checkpointing
#: (transformers' and peft's)
GRADIENT_ONLY_HOOKS = frozenset({"retrain.kernels.lora._detach_first",
                                 "transformers.modeling_utils.make_inputs_require_grads",
                                 "peft.peft_model.make_inputs_require_grad",
                                 "peft.utils.other.make_inputs_require_grad"})


def _refuse_hooks(model: nn.Module) -> None:
    """A forward hook (accelerate's offloading, a user's patch) would be skipped here."""
    for name, module in model.named_modules():
        if getattr(module, "_hf_hook", None) is not None:
            raise Unsupported(f"an accelerate hook on {name or 'the model'}")
        hooks: Sequence[object] = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
        for hook in hooks:
            qualname = f"{getattr(hook, '__module__', '')}.{getattr(hook, '__name__', '')}"
            if qualname not in GRADIENT_ONLY_HOOKS:
                raise Unsupported(f"a forward hook on {name or 'the model'} ({qualname})")


def _is_distributed(p: torch.Tensor) -> bool:
    return type(p).__name__ == "DTensor" or type(getattr(p, "data", p)).__name__ == "DTensor"
