"""The llama.cpp architectures a GGUF export writes, as llama.cpp's own converter
(convert_hf_to_gguf.py) writes them: the header fields each reads, the per-architecture changes
to the weights (llama's rotary row order for q and k, Gemma's norms stored as 1 + w), and the
configurations llama.cpp cannot express, refused by name before anything is written.

Tensor names come from the gguf package's own table (`gguf.get_tensor_name_map`), the one
llama.cpp's converter uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrain.errors import UserError


@dataclass(frozen=True)
class Arch:
    gguf_arch: str  # general.architecture
    model_types: tuple[str, ...]  # transformers' model types written as it
    permute_qk: bool = False  # llama.cpp's LlamaModel reorders q/k rows for its rotary kernel
    norm_offset: float = 0.0  # Gemma's RMSNorm scales by 1 + w; llama.cpp stores 1 + w


ARCHS = (
    Arch("llama", ("llama",), permute_qk=True),
    Arch("qwen2", ("qwen2",)),
    Arch("qwen3", ("qwen3",)),
    Arch("gemma3", ("gemma3_text",), norm_offset=1.0),
)
BUILT = ", ".join(a.gguf_arch for a in ARCHS)


def arch_of(config: Any, multimodal: str | None) -> Arch:
    """The architecture of a text model's config; UserError naming the model type when no
    GGUF writer is built for it, or when llama.cpp cannot express the configuration."""
    kind = str(getattr(config, "model_type", ""))
    if multimodal is not None:
        raise UserError(f"--format gguf of a multimodal checkpoint ({multimodal}) is not built yet in this version: "
                        "llama.cpp keeps its towers in a separate mmproj file, which this export does not write",
                        hint="--format hf keeps the towers")
    for arch in ARCHS:
        if kind in arch.model_types:
            refusal = REFUSALS[arch.gguf_arch](config)
            if refusal:
                raise UserError(f"--format gguf: this {kind} model {refusal}, which llama.cpp's {arch.gguf_arch} "
                                "architecture cannot express", hint="--format hf exports it")
            return arch
    raise UserError(f"--format gguf is built for {BUILT} models, and this is a {kind or 'model of unknown type'} "
                    "model", hint="--format hf exports any model")


def head_dim(config: Any) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def rope_of(config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The config's rotary parameters (one layer type's, for a config that has several)."""
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if layer_type is not None and layer_type in rope:
        rope = dict(rope[layer_type])
    rope.setdefault("rope_type", "default")
    if "rope_theta" not in rope and getattr(config, "rope_theta", None) is not None:
        rope["rope_theta"] = config.rope_theta
    return rope


def _rope_refusal(rope: Mapping[str, Any], what: str = "") -> str:
    kind = rope.get("rope_type", "default")
    if kind in ("default", "linear"):
        return ""
    return f"has {what}rotary scaling of type {kind!r} (built: none and linear)"


def _plain_refusal(config: Any) -> str:
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return f"attends through a sliding window of {config.sliding_window} tokens"
    return _rope_refusal(rope_of(config))


def gemma3_pattern(layers: int) -> list[str]:
    """llama.cpp's Gemma 3 layers: five sliding-window layers, then one global, repeated."""
    return ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]


def _gemma3_refusal(config: Any) -> str:
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    if list(getattr(config, "layer_types", None) or gemma3_pattern(layers)) != gemma3_pattern(layers):
        return "alternates sliding-window and global layers in another pattern than five to one"
    scalar = getattr(config, "query_pre_attn_scalar", None)
    allowed = {head_dim(config)} | ({config.hidden_size // heads} if layers == 62 else set())
    if scalar not in allowed:
        return f"scales attention by 1/sqrt({scalar}) instead of 1/sqrt(head_dim)"
    for name in ("final_logit_softcapping", "attn_logit_softcapping"):
        if getattr(config, name, None):
            return f"soft-caps with {name} = {getattr(config, name)}"
    local = rope_of(config, "sliding_attention")
    if local.get("rope_type") != "default" or float(local.get("rope_theta", 10000.0)) != 10000.0:
        return "rotates its sliding-window layers with another base than 10,000 or with scaling"
    return _rope_refusal(rope_of(config, "full_attention"), "global layers' ")


REFUSALS: dict[str, Callable[[Any], str]] = {"llama": _plain_refusal, "qwen2": _plain_refusal,
                                             "qwen3": _plain_refusal, "gemma3": _gemma3_refusal}


def write_metadata(writer: Any, arch: Arch, config: Any, name: str) -> None:
    """The header fields llama.cpp reads for `arch` (its converter's `set_gguf_parameters`)."""
    import gguf

    dim = head_dim(config)
    writer.add_name(name)
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_key_length(dim)
    writer.add_value_length(dim)
    if arch.gguf_arch == "gemma3":
        rope = rope_of(config, "full_attention")
        writer.add_sliding_window(config.sliding_window)
    else:
        rope = rope_of(config)
        writer.add_rope_dimension_count(dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", 10000.0)))
    if rope.get("rope_type") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))


def stored(key: str, data: np.ndarray, arch: Arch, config: Any) -> np.ndarray:
    """What the file stores for the transformers tensor `key`."""
    if arch.permute_qk and key.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")):
        heads = config.num_attention_heads if "q_proj" in key else config.num_key_value_heads
        return permute(data, heads)
    if arch.norm_offset and key.endswith("norm.weight"):
        return data + np.float32(arch.norm_offset)
    return data


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: each head's rotary halves interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
