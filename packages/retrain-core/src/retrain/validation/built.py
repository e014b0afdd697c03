"""What this version builds: the keys, values and backend options that no runtime code reads yet.

A config that sets one of them to anything but a live value is refused at load (so `explain`,
`trace` and a run refuse it alike) with one line naming the key, "not built yet in this
version" and what to use instead. A backend option is refused only for a value that asks for
its feature (`_asks_for`): its default is accepted (a normalised option table, such as a
campaign validates each condition with, spells every default out), and so is false for a
switch, which states what this version does. Nothing is accepted and then ignored: a test walks every
schema field and every option of a built backend and fails when one is neither read by
runtime code nor listed here. When a feature is built, its lines leave these tables.

Backends that are not built (unsloth, prime_rl) are marked in their catalog
definitions (`available=False`) and refused when a run starts; `explain` still previews them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from retrain.backends.options import BUILTIN_OPTION_SCHEMAS
from retrain.config.errors import ConfigIssue
from retrain.config.fields import (
    CoerceError,
    FieldSpec,
    all_fields,
    coerce,
    get_value,
)
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted

NOT_BUILT_TEXT = "not built yet in this version"
DOTTED = "<dotted path>"  # in `values`: any dotted plugin path


@dataclass(frozen=True)
class NotBuilt:
    """A key ("section.key") or a whole section ("section") that nothing reads yet.

    Refused: any non-default value (`values` empty), or only the listed `values`, or the
    values `refuse` accepts. `what` names the feature ({value!r} is filled in); `instead` is
    the hint.
    """

    where: str
    what: str
    instead: str
    values: tuple[Any, ...] = ()
    refuse: Callable[[Any], bool] | None = None

    def refuses(self, spec: FieldSpec, value: Any) -> bool:
        if self.refuse is not None:
            return self.refuse(value)
        if self.values:
            return value in self.values or (DOTTED in self.values and isinstance(value, str) and is_dotted(value))
        return bool(value != spec.default)

    @property
    def doc(self) -> str:
        """One phrase for the configuration reference."""
        if self.values:
            shown = ", ".join("a dotted path" if v == DOTTED else f"`{v}`" for v in self.values)
            return f"**Not built yet:** {shown}."
        if self.refuse is not None:
            return f"**Not built yet:** {self.what}."
        return "**Not built yet:** only the default is accepted."


_INFERENCE = ("inference-engine tuning", "remove it; tune an inference server with its own flags")

NOT_BUILT: tuple[NotBuilt, ...] = (
    NotBuilt("inference.engine", "{value!r}", 'engine = "pytorch", "vllm", "sglang" or "openai"',
             values=("max", "trtllm", "mlx")),
    NotBuilt("inference.attention_kernel", *_INFERENCE),
    NotBuilt("inference.dtype", *_INFERENCE),
    NotBuilt("inference.kv_cache_dtype", *_INFERENCE),
    NotBuilt("inference.prefix_caching", *_INFERENCE),
    NotBuilt("environment.auto_install", "installing a missing taskset package (auto_install)",
             "install the taskset's package yourself (pip install <package>) before the run"),
    NotBuilt("logging.generation_top_surprisal_limit", "logging the most surprising tokens of a generation", "remove it"),
    NotBuilt("plugins.strict", "lenient plugin loading", "remove it; a plugin that fails to load is always an error"),
)

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
_FAST = ("Unsloth's vLLM generation (fast_inference)",
         'remove it; sampling runs retrain\'s engine in Unsloth\'s inference mode, or [inference] engine = "vllm"')

#: The local backend's memory policy (retrain.backends.local.memory): built there, not for unsloth.
_MEMORY_POLICY: dict[str, tuple[str, str]] = {
    "train_save_on_cpu": _OFFLOAD,
    "train_save_on_cpu_pin_memory": _OFFLOAD,
    "train_save_on_cpu_min_numel": _OFFLOAD,
    "cuda_empty_cache": ("emptying the CUDA cache between phases", "remove it"),
}

#: Options of the training path shared by local and unsloth that nothing reads yet.
_TRAIN_SHARED_NOT_BUILT: dict[str, tuple[str, str]] = {
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

#: [backend.options] of built backends that nothing reads yet: backend -> option -> (what, instead).
NOT_BUILT_OPTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "local": {
        **_TRAIN_SHARED_NOT_BUILT,
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
    },
    "unsloth": {
        **_TRAIN_SHARED_NOT_BUILT,
        **_MEMORY_POLICY,
        "qwen35_gated_delta_kernel": ("the Qwen3.5 gated-delta kernel choice", "remove it"),
        "qwen35_gated_delta_chunk_size": ("the Qwen3.5 gated-delta chunk size", "remove it"),
        "fast_inference": _FAST,
        "gpu_memory_utilization": _FAST,
        "float8_kv_cache": _FAST,
    },
}

@cache
def _entries() -> dict[str, tuple[FieldSpec, NotBuilt]]:
    """Dotted key -> (field, entry), with section entries expanded to each of their keys."""
    out: dict[str, tuple[FieldSpec, NotBuilt]] = {}
    for spec in all_fields():
        for entry in NOT_BUILT:
            if entry.where in (spec.dotted, spec.section):
                out[spec.dotted] = (spec, entry)
    return out


def refused_keys() -> frozenset[str]:
    """Every dotted key some value of which is refused as not built."""
    return frozenset(_entries())


def not_built_doc(dotted: str) -> str:
    """The configuration reference's marker for a key, or ''."""
    found = _entries().get(dotted)
    return found[1].doc if found else ""


def live_values(dotted: str, names: Sequence[str]) -> list[str]:
    """`names` without the values of key `dotted` that are not built (for "available: ..." hints)."""
    found = _entries().get(dotted)
    if found is None:
        return list(names)
    spec, entry = found
    return [n for n in names if not entry.refuses(spec, n)]


def option_built(backend: str, option: str) -> bool:
    return option not in NOT_BUILT_OPTIONS.get(backend, {})


def check_built(c: TrainConfig) -> list[ConfigIssue]:
    """The refusals. Reads `[backend.options]` as written, before defaults fill it."""
    errors: list[ConfigIssue] = []
    for spec, entry in _entries().values():
        value = get_value(c, spec)
        if entry.refuses(spec, value):
            errors.append(ConfigIssue(f"{entry.what.format(value=value)} is {NOT_BUILT_TEXT}", key=spec.label,
                                      hint=entry.instead))
    backend, options = c.backend.backend, c.backend.options
    schema = BUILTIN_OPTION_SCHEMAS.get(backend, {})
    for key, (what, instead) in NOT_BUILT_OPTIONS.get(backend, {}).items():
        if key in options and _asks_for(options[key], schema[key].value_type, schema[key].default):
            errors.append(ConfigIssue(f"{what} is {NOT_BUILT_TEXT}", key=f"[backend.options] {key}", hint=instead))
    return errors


def _asks_for(raw: Any, value_type: type, default: Any) -> bool:
    """True when `raw` asks for an unbuilt option's feature: a value other than the default
    and, for a switch, other than false (off: what runs). An uncoercible value is left to the
    option schema's own error."""
    try:
        value = coerce(value_type, raw)
    except CoerceError:
        return False
    return bool(value != default) and not (value_type is bool and value is False)


def drop_superseded(issues: list[ConfigIssue], refusals: list[ConfigIssue]) -> list[ConfigIssue]:
    """Issues of the other passes, minus those about keys of features that are not built: once
    a config asks for an unbuilt feature, its cross-field rules only add noise to the refusal.
    Keys that are wholly unbuilt (any non-default value refused) always go; partly live keys
    (trainer, engine, devices, ...) go only when this config's value was refused."""
    if not refusals:
        return issues
    labels = {i.key for i in refusals}
    for spec, entry in _entries().values():
        if not entry.values and entry.refuse is None:
            labels.add(spec.label)
    return [i for i in issues if i.key not in labels]
