"""The local backend's `[backend.options]` schema (torch-free: its definition imports it).

`TRAIN_SHARED` is the training path's options, which unsloth's schema shares (it trains through
the local backend). Each option states its type, default and choices once, here;
`retrain.backends.local.options.LocalOptions` reads them by these names.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from retrain.backends.options import OptionSpec, bool_option, ge0, gt0, int_option, str_option

_OFF = frozenset({"off", "0", "false", "no", "none", "disabled"})
_ON = frozenset({"on", "1", "true", "yes", "enabled"})


def expandable_mode(raw: object) -> str:
    """`cuda_expandable_segments` as `off`, `auto` or `on` (its aliases: 0/false/no/none/disabled,
    1/true/yes/enabled); ValueError for anything else."""
    text = str(raw).strip().lower()
    if text in _OFF:
        return "off"
    if text in _ON:
        return "on"
    if text == "auto":
        return "auto"
    raise ValueError("must be off, auto or on (or 0/1, false/true, no/yes)")


def _expandable(v: Any) -> str | None:
    try:
        expandable_mode(v)
    except ValueError as e:
        return str(e)
    return None



TRAIN_SHARED: dict[str, OptionSpec] = {
    "train_microbatch_size": int_option(0, description="Rows per micro-batch; 0 = whole batch."),
    "train_logprob_chunk_size": int_option(0, description="Tokens per chunk of the selected-token logprob path; 0 = auto."),
    "train_selective_suffix_logits": bool_option(False, "Run the LM head only at the positions the loss reads (else at every position)."),
    "train_save_on_cpu": bool_option(False, "CUDA: keep the activations autograd saves in CPU memory until the backward."),
    "train_save_on_cpu_pin_memory": bool_option(True, "CUDA: pinned host memory for the offloaded activations (non-blocking copies)."),
    "train_save_on_cpu_min_numel": int_option(0, description="CUDA: offload only saved tensors of at least this many elements; 0 = all."),
    "train_supervised_context_tokens": int_option(0, description="Train each row on at most this many tokens before its first "
                                                                 "trained one (the rest of the prompt is dropped); 0 = all."),
    "train_unsloth_fused_ce": str_option("off", ("off", "auto", "require")),
    "train_unsloth_fused_ce_target_gb": OptionSpec(float, 0.0, validator=ge0),
    "train_unsloth_fused_ce_torch_compile": bool_option(True),
    "train_compile_selective_ce": str_option("off", ("off", "auto", "require"),
                                             description="CUDA: the LM head and log-softmax of the selected positions as one "
                                                         "torch.compile'd graph (auto: where it applies, require: or fail)."),
    "train_compile_selective_ce_min_tokens": int_option(128, description="Fewest selected positions worth the compiled graph."),
    "train_keep_dropout": bool_option(False, "Keep the checkpoint's dropout in the trainer's forward (off by default: "
                                             "the sampler runs without it, and its noise would enter every ratio)."),
    "lora_target_modules": str_option("", description="Comma list of module-name suffixes; empty = all attention and MLP projections."),
    "liger_kernel": bool_option(False, "Liger's fused kernels (not built yet: true is refused)."),
    "liger_fused_linear_ce": bool_option(False, "Liger's fused linear cross-entropy (not built yet: true is refused)."),
    "cuda_empty_cache": bool_option(True, "CUDA: empty the allocator's cache after each sample and train call."),
    "sample_use_cache": bool_option(True, "KV cache during PyTorch sampling."),
    "gradient_checkpointing": bool_option(True),
    "qwen35_gated_delta_kernel": str_option("auto", ("auto", "off", "torch", "flash_qla"),
                                            description="Qwen3.5's gated delta rule: auto (the fastest installed that runs here), "
                                                        "off (transformers' choice), torch (its reference), flash_qla."),
}

LOCAL_OPTIONS: dict[str, OptionSpec] = {
    **TRAIN_SHARED,
    "train_selective_suffix_logits": bool_option(True, "Run the LM head only at the positions the loss reads (else at every position)."),
    "train_microbatch_token_budget": int_option(0, description="Tokens one training micro-batch runs over (RL and SFT): a packed "
                                                               "stream's tokens, or rows x widest row when padded; 0 = no cap."),
    "train_sft_microbatch_token_budget": int_option(0, description="SFT: train_microbatch_token_budget for supervised steps "
                                                                   "(the reference's name); 0 = that budget."),
    "train_padding_free": str_option("auto", ("auto", "true", "false"),
                                     description="Pack each micro-batch's rows end to end without padding, a prompt shared by "
                                                 "several rows computed once (auto: where the model supports it)."),
    "train_base_dtype": str_option("auto", ("auto", "bfloat16", "float32"),
                                   description="The frozen base weights of a LoRA run (auto: bfloat16 on CUDA, float32 on the "
                                               "CPU); adapters and optimizer state stay float32."),
    "cuda_expandable_segments": OptionSpec(str, "auto", validator=_expandable,
                                           description="CUDA allocator's expandable segments: off, auto (when layers skip checkpointing), on."),
    "strict_deterministic": bool_option(False, "Deterministic kernels; needs a seed."),
    "sample_kv_quantization": str_option("off", ("off", "oscar")),
    "sample_oscar_repo": str_option(""),
    "sample_oscar_bits": int_option(2, None, choices=(2, 4)),
    "sample_oscar_quant_mode": str_option("k-channel"),
    "sample_oscar_group_size": int_option(0),
    "sample_oscar_kv_rotation": str_option("hadamard"),
    "sample_oscar_kv_norm": str_option("1"),
    "sample_oscar_residual_block_size": int_option(128, gt0),
    "sample_oscar_attn_implementation": str_option("sdpa"),
    "gradient_checkpointing_use_reentrant": str_option("auto", ("auto", "true", "false"),
                                                       description="CUDA: torch.utils.checkpoint's reentrant variant; auto = transformers' default."),
    "gradient_checkpointing_skip_last_n": int_option(0, description="CUDA: the last N layers keep their activations (no recompute)."),
    "cudnn_causal_conv1d_shim": bool_option(False, "Qwen3.5: cuDNN's causal conv1d standing in for the causal-conv1d package "
                                                   "(not built yet: true is refused)."),
    "qwen35_gated_delta_chunk_size": str_option("auto", description="Qwen3.5: chunk length of the torch gated delta rule "
                                                                    "(auto = 64); a number selects the torch reference."),
    "lora_layers_to_transform": str_option("", description="Layers to adapt: last:N, first:N, 0,2-3, all."),
    "lora_layers_pattern": str_option("layers"),
    "lora_detach_input": bool_option(False, "The LoRA branch sends its input no gradient (the base path's gradient alone flows back)."),
    "lora_fast_linear": bool_option(True, "LoRA layers run retrain's fused linear (one custom autograd function, forward and backward; kernels picks Triton or torch); false: peft's own forward."),
    "lora_freeze_a": bool_option(False, "LoRA-FA: A keeps its random init, only B trains."),
    "trust_remote_code": bool_option(False),
    "sample_decoder": str_option("auto", ("auto", "retrain", "transformers"),
                                 description="Sampling forward: retrain's own (static KV cache, CUDA graphs) for llama, mistral, "
                                             "qwen2 and qwen3 models; transformers' for the rest; auto = retrain's where it runs."),
    "sample_cuda_graphs": bool_option(True, "CUDA: replay retrain's decoding step as CUDA graphs (one capture per batch size)."),
    "cpu_threads": int_option(0, description="Threads of torch's CPU kernels; 0 = the CPUs this process may use "
                                             "(affinity and cgroup quota), shared among torchrun's local processes."),
    "sample_merged_lora": str_option("auto", ("auto", "true", "false"),
                                     description="Sample from a copy with LoRA merged into the weights (auto: on the CPU)."),
    "train_full_model": bool_option(False, "Train every weight instead of a LoRA adapter (small models; "
                                           "checkpoints then hold full weights)."),
    "kernels": str_option("auto", ("auto", "triton", "torch"), description="Selected-token logprob and LoRA kernels: auto (Triton on CUDA when supported), triton, or torch."),
}

_CHECKPOINTING_ON_CUDA = "gradient checkpointing is used on CUDA only"
_ACTIVATIONS_ON_CPU = "activations are in CPU memory already"
_COMPILED_ON_CUDA = "the compiled selected-token graph is built for CUDA only"
#: The local backend's options that only CUDA reads, and why each does nothing on the CPU
_LOCAL_CUDA_ONLY = {
    "gradient_checkpointing": _CHECKPOINTING_ON_CUDA,
    "gradient_checkpointing_use_reentrant": _CHECKPOINTING_ON_CUDA,
    "gradient_checkpointing_skip_last_n": _CHECKPOINTING_ON_CUDA,
    "train_save_on_cpu": _ACTIVATIONS_ON_CPU,
    "train_save_on_cpu_pin_memory": _ACTIVATIONS_ON_CPU,
    "train_save_on_cpu_min_numel": _ACTIVATIONS_ON_CPU,
    "cuda_empty_cache": "there is no CUDA cache",
    "cuda_expandable_segments": "there is no CUDA allocator",
    "sample_cuda_graphs": "CUDA graphs need a CUDA device",
    "train_compile_selective_ce": _COMPILED_ON_CUDA,
    "train_compile_selective_ce_min_tokens": _COMPILED_ON_CUDA,
}
LOCAL_OPTIONS = {name: replace(spec, cuda_only=_LOCAL_CUDA_ONLY.get(name, "")) for name, spec in LOCAL_OPTIONS.items()}

_OFFLOAD = ("activation offload to CPU memory", "remove it; lower train_microbatch_size to save memory")
_FUSED_CE = ("the fused cross-entropy path", 'remove it; kernels = "auto" picks the selected-token logprob kernel')
_UNSLOTH_CE = ("Unsloth's fused cross-entropy (unsloth_zoo's kernel on cut-cross-entropy runs on CUDA GPUs only, so "
               "it cannot be built and tested without one)",
               'remove it; kernels = "auto" picks the selected-token logprob kernel')
_LIGER = ("Liger's kernels (liger-kernel: Triton kernels for CUDA and ROCm GPUs, patched into each model family's "
          "modules before the model loads; not integrated, retrain's own kernels cover the logprob and LoRA paths)",
          "remove it; kernels = \"auto\" picks retrain's own Triton kernels")
_OSCAR = ("OScaR KV-cache quantization (it loads a checkout of the OScaR research repository, sample_oscar_repo, "
          "that no package index ships, and runs flash-attn's flash_attn_with_kvcache, a CUDA-only kernel)",
          "remove it; sample_use_cache keeps a full-precision KV cache")

#: The local backend's memory policy (retrain.backends.local.memory): built here, not for unsloth.
MEMORY_POLICY: dict[str, tuple[str, str]] = {
    "train_save_on_cpu": _OFFLOAD,
    "train_save_on_cpu_pin_memory": _OFFLOAD,
    "train_save_on_cpu_min_numel": _OFFLOAD,
    "cuda_empty_cache": ("emptying the CUDA cache between phases", "remove it"),
}

#: Options of the training path (TRAIN_SHARED) that nothing reads yet, for unsloth; local builds some.
TRAIN_SHARED_NOT_BUILT: dict[str, tuple[str, str]] = {
    "train_selective_suffix_logits": ("completion-only logits", "remove it"),
    "train_supervised_context_tokens": ("supervised context-token masking", "remove it"),
    "train_unsloth_fused_ce": _UNSLOTH_CE,
    "train_unsloth_fused_ce_target_gb": _UNSLOTH_CE,
    "train_unsloth_fused_ce_torch_compile": _UNSLOTH_CE,
    "train_compile_selective_ce": _FUSED_CE,
    "train_compile_selective_ce_min_tokens": _FUSED_CE,
    "liger_kernel": _LIGER,
    "liger_fused_linear_ce": _LIGER,
}

#: The shared training options the local backend builds (its training path: micro-batches, logits)
_LOCAL_TRAIN_BUILT = ("train_selective_suffix_logits", "train_supervised_context_tokens", "train_compile_selective_ce",
                      "train_compile_selective_ce_min_tokens")

#: The options nothing reads yet: option -> (what, instead); refused when set (retrain.validation.built)
NOT_BUILT: dict[str, tuple[str, str]] = {
    **{k: v for k, v in TRAIN_SHARED_NOT_BUILT.items() if k not in _LOCAL_TRAIN_BUILT},
    "sample_kv_quantization": _OSCAR,
    "sample_oscar_repo": _OSCAR,
    "sample_oscar_bits": _OSCAR,
    "sample_oscar_quant_mode": _OSCAR,
    "sample_oscar_group_size": _OSCAR,
    "sample_oscar_kv_rotation": _OSCAR,
    "sample_oscar_kv_norm": _OSCAR,
    "sample_oscar_residual_block_size": _OSCAR,
    "sample_oscar_attn_implementation": _OSCAR,
    "cudnn_causal_conv1d_shim": ("the cuDNN causal-conv1d shim (cuDNN's conv1d standing in for causal-conv1d "
                                 "in Qwen3.5's layers)", "remove it; Qwen3.5's conv1d runs causal-conv1d where "
                                 "installed, else transformers' torch reference"),
}
