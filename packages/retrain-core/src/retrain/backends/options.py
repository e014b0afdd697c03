"""`[backend.options]` schemas of the built-in backends, and their normalisation.

A normalised options table holds every schema key (defaults filled in) with its value coerced
to the declared type, so backends never re-parse strings. Unknown keys are errors.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from retrain.config.errors import ConfigIssue, did_you_mean
from retrain.config.fields import CoerceError, coerce


@dataclass(frozen=True)
class OptionSpec:
    value_type: type
    default: Any
    choices: tuple[Any, ...] | None = None
    validator: Callable[[Any], str | None] | None = None
    description: str = ""
    # why the option does nothing when the run trains on the CPU ("" when it acts anywhere);
    # set away from its default on a CPU run it is warned about (retrain.validation.inert)
    cuda_only: str = ""


OptionSchema = Mapping[str, OptionSpec]


def _ge0(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def _gt0(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def _unit(v: Any) -> str | None:
    return None if 0 < v <= 1 else "must be in (0, 1]"


def _port(v: Any) -> str | None:
    return None if 1 <= v <= 65535 else "must be in 1..65535"


def _b(default: bool, description: str = "") -> OptionSpec:
    return OptionSpec(bool, default, description=description)


def _i(default: int, validator: Callable[[Any], str | None] | None = _ge0, description: str = "",
       choices: tuple[Any, ...] | None = None) -> OptionSpec:
    return OptionSpec(int, default, choices=choices, validator=validator, description=description)


def _s(default: str, choices: tuple[str, ...] | None = None, description: str = "") -> OptionSpec:
    return OptionSpec(str, default, choices=choices, description=description)


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


_TRAIN_SHARED: dict[str, OptionSpec] = {
    "train_microbatch_size": _i(0, description="Rows per micro-batch; 0 = whole batch."),
    "train_logprob_chunk_size": _i(0, description="Tokens per chunk of the selected-token logprob path; 0 = auto."),
    "train_selective_suffix_logits": _b(False, "Compute logits only for completion positions."),
    "train_save_on_cpu": _b(False, "CUDA: keep the activations autograd saves in CPU memory until the backward."),
    "train_save_on_cpu_pin_memory": _b(True, "CUDA: pinned host memory for the offloaded activations (non-blocking copies)."),
    "train_save_on_cpu_min_numel": _i(0, description="CUDA: offload only saved tensors of at least this many elements; 0 = all."),
    "train_supervised_context_tokens": _i(0),
    "train_unsloth_fused_ce": _s("off", ("off", "auto", "require")),
    "train_unsloth_fused_ce_target_gb": OptionSpec(float, 0.0, validator=_ge0),
    "train_unsloth_fused_ce_torch_compile": _b(True),
    "train_compile_selective_ce": _s("off", ("off", "auto", "require")),
    "train_compile_selective_ce_min_tokens": _i(128),
    "lora_target_modules": _s("", description="Comma list of module-name suffixes; empty = all attention and MLP projections."),
    "liger_kernel": _b(False, "Liger's fused kernels (not built yet: true is refused)."),
    "liger_fused_linear_ce": _b(False, "Liger's fused linear cross-entropy (not built yet: true is refused)."),
    "cuda_empty_cache": _b(True, "CUDA: empty the allocator's cache after each sample and train call."),
    "sample_use_cache": _b(True, "KV cache during PyTorch sampling."),
    "gradient_checkpointing": _b(True),
    "qwen35_gated_delta_kernel": _s("auto", ("auto", "off", "torch", "flash_qla"),
                                    description="Qwen3.5's gated delta rule: auto (the fastest installed that runs here), "
                                                "off (transformers' choice), torch (its reference), flash_qla."),
}

LOCAL_OPTIONS: dict[str, OptionSpec] = {
    **_TRAIN_SHARED,
    "train_sft_microbatch_token_budget": _i(0, description="SFT: padded tokens per micro-batch (rows x widest row); 0 = off."),
    "cuda_expandable_segments": OptionSpec(str, "auto", validator=_expandable,
                                           description="CUDA allocator's expandable segments: off, auto (when layers skip checkpointing), on."),
    "strict_deterministic": _b(False, "Deterministic kernels; needs a seed."),
    "sample_kv_quantization": _s("off", ("off", "oscar")),
    "sample_oscar_repo": _s(""),
    "sample_oscar_bits": _i(2, None, choices=(2, 4)),
    "sample_oscar_quant_mode": _s("k-channel"),
    "sample_oscar_group_size": _i(0),
    "sample_oscar_kv_rotation": _s("hadamard"),
    "sample_oscar_kv_norm": _s("1"),
    "sample_oscar_residual_block_size": _i(128, _gt0),
    "sample_oscar_attn_implementation": _s("sdpa"),
    "gradient_checkpointing_use_reentrant": _s("auto", ("auto", "true", "false"),
                                               description="CUDA: torch.utils.checkpoint's reentrant variant; auto = transformers' default."),
    "gradient_checkpointing_skip_last_n": _i(0, description="CUDA: the last N layers keep their activations (no recompute)."),
    "cudnn_causal_conv1d_shim": _b(False, "Qwen3.5: cuDNN's causal conv1d standing in for the causal-conv1d package "
                                          "(not built yet: true is refused)."),
    "qwen35_gated_delta_chunk_size": _s("auto", description="Qwen3.5: chunk length of the torch gated delta rule "
                                                            "(auto = 64); a number selects the torch reference."),
    "lora_layers_to_transform": _s("", description="Layers to adapt: last:N, first:N, 0,2-3, all."),
    "lora_layers_pattern": _s("layers"),
    "lora_detach_input": _b(False, "The LoRA branch sends its input no gradient (the base path's gradient alone flows back)."),
    "lora_fast_linear": _b(True, "LoRA layers run retrain's fused linear (one custom autograd function, forward and backward; kernels picks Triton or torch); false: peft's own forward."),
    "lora_freeze_a": _b(False, "LoRA-FA: A keeps its random init, only B trains."),
    "trust_remote_code": _b(False),
    "sample_decoder": _s("auto", ("auto", "retrain", "transformers"),
                         description="Sampling forward: retrain's own (static KV cache, CUDA graphs) for llama, mistral, "
                                     "qwen2 and qwen3 models; transformers' for the rest; auto = retrain's where it runs."),
    "sample_cuda_graphs": _b(True, "CUDA: replay retrain's decoding step as CUDA graphs (one capture per batch size)."),
    "cpu_threads": _i(0, description="Threads of torch's CPU kernels; 0 = the CPUs this process may use "
                                     "(affinity and cgroup quota), shared among torchrun's local processes."),
    "sample_merged_lora": _s("auto", ("auto", "true", "false"),
                             description="Sample from a copy with LoRA merged into the weights (auto: on the CPU)."),
    "train_full_model": _b(False, "Train every weight instead of a LoRA adapter (small models; "
                                  "checkpoints then hold full weights)."),
    "kernels": _s("auto", ("auto", "triton", "torch"), description="Selected-token logprob and LoRA kernels: auto (Triton on CUDA when supported), triton, or torch."),
}

_CHECKPOINTING_ON_CUDA = "gradient checkpointing is used on CUDA only"
_ACTIVATIONS_ON_CPU = "activations are in CPU memory already"
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
}
LOCAL_OPTIONS = {name: replace(spec, cuda_only=_LOCAL_CUDA_ONLY.get(name, "")) for name, spec in LOCAL_OPTIONS.items()}

UNSLOTH_OPTIONS: dict[str, OptionSpec] = {
    **_TRAIN_SHARED,
    "train_selective_suffix_logits": _b(True),
    "train_unsloth_fused_ce": _s("auto", ("off", "auto", "require")),
    "liger_kernel": _b(False),
    "max_seq_length": _i(0, description="0 = max(2048, max_tokens)."),
    "load_in_4bit": _b(True),
    "load_in_8bit": _b(False),
    "load_in_16bit": _b(False),
    "fast_inference": _b(False),
    "gpu_memory_utilization": OptionSpec(float, 0.5, validator=_unit),
    "float8_kv_cache": _b(False),
    "max_lora_rank": _i(64, _gt0),
    "use_gradient_checkpointing": _s("unsloth"),
    "device_map": _s("retrain"),
    "trust_remote_code": _b(False),
    "use_exact_model_name": _b(False),
    "offload_embedding": _b(False),
    "unsloth_tiled_mlp": _b(False),
    "unsloth_tiled_mlp_mode": _s(""),
    "text_only": _b(False),
    "use_rslora": _b(False),
    "random_state": _i(3407, None),
    "qwen35_gated_delta_chunk_size": _s("auto"),
}

PRIME_RL_OPTIONS: dict[str, OptionSpec] = {
    "transport": _s("filesystem", ("filesystem", "zmq")),
    "zmq_host": _s("localhost"),
    "zmq_port": _i(5555, _port),
    "zmq_hwm": _i(10, _gt0),
    "strict_advantages": _b(True),
    "sync_wait_s": _i(30),
    "sync_poll_s": OptionSpec(float, 0.2, validator=_gt0),
}

TINKER_OPTIONS: dict[str, OptionSpec] = {
    "api_key": _s("", description="Tinker API key; empty = the TINKER_API_KEY environment variable. "
                               "Never written to logs, run_meta.json or config snapshots."),
    "train_mlp": _b(True, "Train LoRA adapters on the MLP layers."),
    "train_attn": _b(True, "Train LoRA adapters on the attention layers."),
    "train_unembed": _b(True, "Train a LoRA adapter on the unembedding (output) layer."),
    "call_timeout_s": OptionSpec(float, 600.0, validator=_gt0,
                                 description="Longest wait for one remote call (first calls compile: be generous)."),
    "max_retries": _i(3, description="Retries of an idempotent remote call (sample, save, load) after a "
                                     "timeout, a 429 or a 5xx; forward_backward and optim_step are never resent."),
    "retry_backoff_s": OptionSpec(float, 2.0, validator=_ge0,
                                  description="First retry delay, doubled at each retry."),
}

BUILTIN_OPTION_SCHEMAS: dict[str, OptionSchema] = {
    "local": LOCAL_OPTIONS,
    "unsloth": UNSLOTH_OPTIONS,
    "tinker": TINKER_OPTIONS,
    "prime_rl": PRIME_RL_OPTIONS,
}


def normalize_options(
    backend: str, options: Mapping[str, Any], schema: OptionSchema | None
) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """Every schema key with a coerced value, and the problems found (all of them).

    A backend with no schema (a plugin that declares none) gets its options untouched.
    """
    if schema is None:
        return dict(options), []
    issues: list[ConfigIssue] = []
    out = {k: spec.default for k, spec in schema.items()}
    for key in sorted(options):
        raw = options[key]
        label = f"[backend.options] {key}"
        spec = schema.get(key)
        if spec is None:
            if not schema:
                msg = f"backend {backend!r} takes no options"
                hint = "remove the [backend.options] table"
            else:
                msg = f"unknown option for backend {backend!r}"
                hint = did_you_mean(key, schema) or "see `retrain backends` for the option list"
            issues.append(ConfigIssue(msg, key=label, hint=hint))
            continue
        try:
            value = coerce(spec.value_type, raw)
        except CoerceError as exc:
            issues.append(ConfigIssue(f"{raw!r}: {exc}", key=label, hint=f"{key} = {_toml(spec.default)}"))
            continue
        if spec.choices is not None and value not in spec.choices:
            choices = ", ".join(map(str, spec.choices))
            issues.append(ConfigIssue(f"{raw!r}: must be one of {choices}", key=label,
                                      hint=did_you_mean(str(value), map(str, spec.choices))))
            continue
        if spec.validator is not None and (problem := spec.validator(value)):
            issues.append(ConfigIssue(f"{raw!r}: {problem}", key=label, hint=f"{key} = {_toml(spec.default)}"))
            continue
        out[key] = value
    return out, issues


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def describe_schema(schema: OptionSchema, unbuilt: Collection[str] = ()) -> dict[str, dict[str, Any]]:
    """Each option as data; `built` is false for the options named in `unbuilt` (refused as
    not built yet: retrain.validation.built)."""
    return {
        key: {
            "type": spec.value_type.__name__,
            "default": spec.default,
            "choices": list(spec.choices) if spec.choices is not None else None,
            "has_validator": spec.validator is not None,
            "description": spec.description,
            "cuda_only": spec.cuda_only,
            "built": key not in unbuilt,
        }
        for key, spec in sorted(schema.items())
    }
