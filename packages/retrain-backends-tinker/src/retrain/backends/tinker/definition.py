"""Entry point of retrain-backends-tinker in the `retrain.backends` group (imports no torch):
what the Tinker service can do, what it cannot honour, and which options it takes."""

from retrain.backends.catalog import BackendCapabilities, BackendDefinition, RefusedSetting
from retrain.backends.options import OptionSpec, bool_option, ge0, gt0, int_option, str_option
from retrain.backends.tinker.record import CHECKPOINT
from retrain.config.schema import LOSS_AGGREGATIONS

TINKER_OPTIONS: dict[str, OptionSpec] = {
    "api_key": str_option("", description="Tinker API key; empty = the TINKER_API_KEY environment variable. "
                                       "Never written to logs, run_meta.json or config snapshots."),
    "train_mlp": bool_option(True, "Train LoRA adapters on the MLP layers."),
    "train_attn": bool_option(True, "Train LoRA adapters on the attention layers."),
    "train_unembed": bool_option(True, "Train a LoRA adapter on the unembedding (output) layer."),
    "call_timeout_s": OptionSpec(float, 600.0, validator=gt0,
                                 description="Longest wait for one remote call (first calls compile: be generous)."),
    "max_retries": int_option(3, description="Retries of an idempotent remote call (sample, save, load) after a "
                                             "timeout, a 429 or a 5xx; forward_backward and optim_step are never resent."),
    "retry_backoff_s": OptionSpec(float, 2.0, validator=ge0,
                                  description="First retry delay, doubled at each retry."),
}

#: settings the service cannot honour: it samples and computes the loss itself
REFUSED = (
    RefusedSetting("inference.engine", "the service samples; inference engines serve the local backend"),
    RefusedSetting("inference.importance_sampling_correction",
                   "the sampler-mismatch correction is built for the local backend only"),
    RefusedSetting("training.min_p", "the Tinker sampler has no min_p", "remove it; top_p and top_k work"),
    RefusedSetting("training.clip_ratio_c", "Tinker's ppo loss has no dual clip"),
    RefusedSetting("lora.alpha", "the service chooses LoRA alpha", "remove it; [model] lora_rank sets the rank"),
    RefusedSetting("lora.dropout", "the service trains without LoRA dropout"),
)

CAPABILITIES = BackendCapabilities(
    reports_sync_loss=True,
    preserves_token_advantages=True,
    supports_checkpoint_resume=True,
    # exact and runtime-dependent: weights and optimizer state live in the service's
    # checkpoints (save_state / load_state_with_optimizer), sampling seeds derive from the
    # batch; a resume needs the service to still hold the checkpoint
    resume_runtime_dependent=True,
    checkpoint_resume_mode="exact",
    supports_echo_shared_forward=False,
    # every aggregation: its per-token weights are folded into the advantages (tinker/loss.py)
    loss_aggregations=LOSS_AGGREGATIONS,
    # those the service computes (ppo for a clipped standard, cispo), token-level ratios only
    policy_losses=("standard", "cispo"),
    service_settings=True,
    samples_apart_from_training=True,
    refused_settings=REFUSED,
    full_token_distributions=False,
    ppo_clipping=True,
)

BACKEND = BackendDefinition(
    name="tinker",
    factory="retrain.backends.tinker.create:create_backend",
    distribution="retrain-backends-tinker",
    capabilities=CAPABILITIES,
    option_schema=TINKER_OPTIONS,
    dependency="tinker",
    hint="pip install retrain-backends-tinker",
    contract=(2, 1),  # the backend contract this distribution was built against
    probe="retrain.backends.tinker.doctor:probe",
    checkpoint_record=CHECKPOINT,
    check_record="retrain.backends.tinker.record:check",
)
