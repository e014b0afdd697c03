"""Entry point of retrain-backends-unsloth in the `retrain.backends` group (imports no torch):
what the unsloth backend can do and which options it takes."""

from retrain.backends.catalog import BackendCapabilities, BackendDefinition
from retrain.backends.local.schema import MEMORY_POLICY, TRAIN_SHARED, TRAIN_SHARED_NOT_BUILT
from retrain.backends.options import OptionSpec, bool_option, gt0, int_option, str_option, unit
from retrain.config.schema import POLICY_LOSS_MODES, RATIO_LEVELS

UNSLOTH_OPTIONS: dict[str, OptionSpec] = {
    **TRAIN_SHARED,
    "train_selective_suffix_logits": bool_option(True),
    "train_unsloth_fused_ce": str_option("auto", ("off", "auto", "require")),
    "liger_kernel": bool_option(False),
    "max_seq_length": int_option(0, description="0 = max(2048, max_tokens)."),
    "load_in_4bit": bool_option(True),
    "load_in_8bit": bool_option(False),
    "load_in_16bit": bool_option(False),
    "fast_inference": bool_option(False),
    "gpu_memory_utilization": OptionSpec(float, 0.5, validator=unit),
    "float8_kv_cache": bool_option(False),
    "max_lora_rank": int_option(64, gt0),
    "use_gradient_checkpointing": str_option("unsloth"),
    "device_map": str_option("retrain"),
    "trust_remote_code": bool_option(False),
    "use_exact_model_name": bool_option(False),
    "offload_embedding": bool_option(False),
    "unsloth_tiled_mlp": bool_option(False),
    "unsloth_tiled_mlp_mode": str_option(""),
    "text_only": bool_option(False),
    "use_rslora": bool_option(False),
    "random_state": int_option(3407, None),
    "qwen35_gated_delta_chunk_size": str_option("auto"),
}

_FAST = ("Unsloth's vLLM generation (fast_inference)",
         'remove it; sampling runs retrain\'s engine in Unsloth\'s inference mode, or [inference] engine = "vllm"')
#: The options nothing reads yet: option -> (what, instead); refused when set (retrain.validation.built)
NOT_BUILT: dict[str, tuple[str, str]] = {
    **TRAIN_SHARED_NOT_BUILT,
    **MEMORY_POLICY,
    "qwen35_gated_delta_kernel": ("the Qwen3.5 gated-delta kernel choice", "remove it"),
    "qwen35_gated_delta_chunk_size": ("the Qwen3.5 gated-delta chunk size", "remove it"),
    "fast_inference": _FAST,
    "gpu_memory_utilization": _FAST,
    "float8_kv_cache": _FAST,
}

CAPABILITIES = BackendCapabilities(
    reports_sync_loss=True,
    preserves_token_advantages=True,
    supports_checkpoint_resume=True,
    resume_runtime_dependent=False,
    checkpoint_resume_mode="adapter_only",
    supports_echo_shared_forward=True,
    # token_mean only: the other loss aggregations are not built yet for unsloth
    loss_aggregations=("token_mean",),
    # the local backend's policy losses: it trains through LocalBackend.policy_gradients
    policy_losses=POLICY_LOSS_MODES,
    ratio_levels=RATIO_LEVELS,
    ppo_clipping=True,
    local_devices=True,
    tensor_objectives=True,
    exclusive_precisions=("load_in_4bit", "load_in_8bit", "load_in_16bit"),
)

BACKEND = BackendDefinition(
    name="unsloth",
    factory="retrain.backends.unsloth.create:create_backend",
    distribution="retrain-backends-unsloth",
    capabilities=CAPABILITIES,
    option_schema=UNSLOTH_OPTIONS,
    not_built_options=NOT_BUILT,
    dependency="unsloth",
    hint="pip install retrain-backends-unsloth (CUDA GPU required at run time)",
    contract=(2, 2),  # the backend contract this distribution was built against
    # its checkpoints are the local backend's (a LoRA adapter on the full-precision base)
    export="retrain.backends.local.export.run:export",
)
