"""`[backend.options]` of the local backend as one typed value, read once when it is built.

Options arrive normalised (`retrain.backends.options.normalize_options`: every key of
`LOCAL_OPTIONS`, coerced and validated at load). A variant's schema (unsloth's) lacks some of
these keys; an absent key takes the default below, which equals `LOCAL_OPTIONS`'s. Keys this
backend does not read are ignored. Each field bears its option's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from retrain.backends.options import expandable_mode


@dataclass(frozen=True)
class LocalOptions:
    strict_deterministic: bool = False
    cpu_threads: int = 0  # 0: the CPUs this process may use
    trust_remote_code: bool = False
    # memory (CUDA; retrain.backends.local.memory)
    cuda_expandable_segments: str = "auto"  # off, auto or on (`expandable_mode`)
    cuda_empty_cache: bool = True
    train_save_on_cpu: bool = False
    train_save_on_cpu_pin_memory: bool = True
    train_save_on_cpu_min_numel: int = 0
    gradient_checkpointing: bool = True
    gradient_checkpointing_use_reentrant: str = "auto"
    gradient_checkpointing_skip_last_n: int = 0
    # what trains
    train_full_model: bool = False
    lora_target_modules: str = ""
    lora_layers_to_transform: str = ""
    lora_layers_pattern: str = "layers"
    lora_freeze_a: bool = False
    lora_detach_input: bool = False
    lora_fast_linear: bool = True  # retrain.kernels' fused LoRA linear; false: peft's own forward
    kernels: str = "auto"
    # training passes
    train_microbatch_size: int = 0  # 0: the whole batch
    train_sft_microbatch_token_budget: int = 0  # 0: off
    train_logprob_chunk_size: int = 0  # 0: the kernels' default
    # sampling
    sample_merged_lora: str = "auto"
    sample_use_cache: bool = True
    sample_decoder: str = "auto"
    sample_cuda_graphs: bool = True
    # model families' kernels (retrain.models: qwen35)
    qwen35_gated_delta_kernel: str = "auto"
    qwen35_gated_delta_chunk_size: str = "auto"

    @classmethod
    def read(cls, options: Mapping[str, Any]) -> LocalOptions:
        """The options given in `options`, each coerced as `READERS` says; defaults for the rest.
        ValueError for a `cuda_expandable_segments` that is not a mode (normalisation refuses it)."""
        return cls(**{key: coerce(options[key]) for key, coerce in READERS.items() if key in options})


#: each option's coercion, by key (the key is a field's name); every field has one. Written out
#: rather than derived from the fields: these names are how the check that every option is read
#: (test_config_built) finds the local backend's options.
READERS: dict[str, Callable[[Any], Any]] = {
    "strict_deterministic": bool,
    "cpu_threads": int,
    "trust_remote_code": bool,
    "cuda_expandable_segments": expandable_mode,
    "cuda_empty_cache": bool,
    "train_save_on_cpu": bool,
    "train_save_on_cpu_pin_memory": bool,
    "train_save_on_cpu_min_numel": int,
    "gradient_checkpointing": bool,
    "gradient_checkpointing_use_reentrant": str,
    "gradient_checkpointing_skip_last_n": int,
    "train_full_model": bool,
    "lora_target_modules": str,
    "lora_layers_to_transform": str,
    "lora_layers_pattern": str,
    "lora_freeze_a": bool,
    "lora_detach_input": bool,
    "lora_fast_linear": bool,
    "kernels": str,
    "train_microbatch_size": int,
    "train_sft_microbatch_token_budget": int,
    "train_logprob_chunk_size": int,
    "sample_merged_lora": str,
    "sample_use_cache": bool,
    "sample_decoder": str,
    "sample_cuda_graphs": bool,
    "qwen35_gated_delta_kernel": str,
    "qwen35_gated_delta_chunk_size": str,
}
