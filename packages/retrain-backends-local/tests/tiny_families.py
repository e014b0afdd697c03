"""Tiny random checkpoints of every decoder family transformers ships that people RL-train,
written as the hub ships them (a multimodal family with its towers) with the built-in
character tokenizer plus the families' end-of-turn tokens. Each builds in well under a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from retrain.models.tiny import ASSETS

V = 120  # the tiny tokenizer's 103 tokens, the end-of-turn tokens below, room for image tokens
END_OF_TURN = ["<|im_end|>", "<end_of_turn>", "<turn|>"]
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
COMMON: dict[str, Any] = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, **IDS)
QWEN35 = dict(COMMON, head_dim=8, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
              linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"])
GEMMA3 = dict(COMMON, head_dim=8, sliding_window=4, layer_types=["sliding_attention", "full_attention"])
GEMMA4 = dict(COMMON, head_dim=8, global_head_dim=16, sliding_window=4, final_logit_softcapping=30.0,
              layer_types=["sliding_attention", "full_attention"], vocab_size_per_layer_input=V,
              hidden_size_per_layer_input=8)
MULTIMODAL = {
    "qwen3_5": dict(text_config=QWEN35, vision_config=dict(
        depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=4,
        temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16),
        image_token_id=V - 4, video_token_id=V - 3, vision_start_token_id=V - 2, vision_end_token_id=V - 1),
    "gemma3": dict(text_config=GEMMA3, vision_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
        patch_size=4), mm_tokens_per_image=4, image_token_index=V - 2, boi_token_index=V - 4, eoi_token_index=V - 3),
    "gemma4": dict(text_config=GEMMA4, vision_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        head_dim=8, patch_size=4, position_embedding_size=64),
        audio_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, output_proj_dims=16),
        boi_token_id=V - 10, eoi_token_id=V - 9, image_token_id=V - 8, video_token_id=V - 7, boa_token_id=V - 6,
        eoa_token_index=V - 5, audio_token_id=V - 4),
}
#: name -> (model_type, config); "<type> multimodal" is the hub's class with its towers
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", COMMON),
    "mistral short window": ("mistral", dict(COMMON, sliding_window=4)),
    "qwen2": ("qwen2", COMMON),
    "qwen3": ("qwen3", dict(COMMON, head_dim=8)),
    "qwen3_moe": ("qwen3_moe", dict(COMMON, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=16, mlp_only_layers=[])),
    "qwen3_5 text": ("qwen3_5_text", QWEN35),
    "qwen3_5 multimodal": ("qwen3_5", MULTIMODAL["qwen3_5"]),
    "gemma3 text": ("gemma3_text", GEMMA3),
    "gemma3 multimodal": ("gemma3", MULTIMODAL["gemma3"]),
    "gemma4 text": ("gemma4_text", GEMMA4),
    "gemma4 multimodal": ("gemma4", MULTIMODAL["gemma4"]),
    "smollm3": ("smollm3", COMMON),
    "olmo2": ("olmo2", COMMON),
    "phi3": ("phi3", COMMON),
    "granite": ("granite", dict(COMMON, logits_scaling=4.0)),
    "gpt_oss": ("gpt_oss", dict(COMMON, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                                layer_types=["sliding_attention", "full_attention"])),
    # mixture-of-experts and attention kinds of 2026's families: each family's routing, shared
    # experts and dense first layers, latent attention (a yarn rotary in interleaved pairs),
    # clipped q/k/v, chunks and no-RoPE layers shorter than the sequences sampled
    "mixtral": ("mixtral", dict(COMMON, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": ("qwen2_moe", dict(COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                    shared_expert_intermediate_size=16)),
    "olmoe": ("olmoe", dict(COMMON, num_experts=4, num_experts_per_tok=2, clip_qkv=0.5)),
    "deepseek_v3": ("deepseek_v3", dict(COMMON, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16,
                                        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8,
                                        num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
                                        first_k_dense_replace=1, moe_intermediate_size=16,
                                        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                             original_max_position_embeddings=64, mscale=1.0,
                                                             mscale_all_dim=1.0))),
    "glm4_moe": ("glm4_moe", dict(COMMON, head_dim=8, n_routed_experts=8, num_experts_per_tok=2, n_group=2,
                                  topk_group=1, n_shared_experts=1, first_k_dense_replace=1, moe_intermediate_size=16,
                                  use_qk_norm=True, attention_bias=True)),
    "qwen3_next": ("qwen3_next", dict(QWEN35, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                      shared_expert_intermediate_size=16)),
    "llama4_text": ("llama4_text", dict(COMMON, head_dim=8, intermediate_size=16, intermediate_size_mlp=64,
                                        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
                                        no_rope_layer_interval=2, attention_chunk_size=4, floor_scale=4)),
}


#: variants of the families beyond the matrix, for the decoder's tests: Gemma 4 with shared-KV
#: layers (keys doubling as values, double-wide MLPs), Gemma 4 and Qwen3.5 with experts
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma4 shared kv": ("gemma4_text", dict(GEMMA4, num_hidden_layers=6, num_kv_shared_layers=3,
                                             attention_k_eq_v=True, use_double_wide_mlp=True, num_global_key_value_heads=1,
                                             layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2)),
    "gemma4 moe": ("gemma4_text", dict(GEMMA4, enable_moe_block=True, num_experts=4, top_k_experts=2,
                                       moe_intermediate_size=16)),
    "qwen3_5 moe": ("qwen3_5_moe_text", dict(QWEN35, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                             shared_expert_intermediate_size=16)),
}


def config_of(name: str) -> Any:
    from retrain.models.deferred import deferred_optional_imports
    from retrain.models.quiet import import_model_classes

    with deferred_optional_imports():  # as the backend imports them: scikit-learn's seconds deferred
        import_model_classes()
    from transformers import AutoConfig

    model_type, values = SHAPES[name] if name in SHAPES else VARIANTS[name]
    return AutoConfig.for_model(model_type, **values)


def hub_model(name: str, seed: int = 0) -> torch.nn.Module:
    """The class the hub ships for `name` (a multimodal one with its towers), random weights."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    config = config_of(name)
    auto = AutoModelForImageTextToText if name.endswith("multimodal") else AutoModelForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return auto.from_config(config).eval()


def tokenizer() -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ASSETS), local_files_only=True)
    tok.add_special_tokens({"additional_special_tokens": END_OF_TURN})
    return tok


def write_checkpoint(name: str, folder: Path, seed: int = 0) -> Path:
    """`folder` holding `name`'s checkpoint and tokenizer, as `save_pretrained` writes them."""
    from retrain.models.quiet import no_progress_bars

    with no_progress_bars():
        hub_model(name, seed).save_pretrained(str(folder))
        tokenizer().save_pretrained(str(folder))
    return folder
