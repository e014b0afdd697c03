"""Entry point of retrain-backends-unsloth in the `retrain.backends` group (imports no torch):
what the unsloth backend can do and which options it takes."""

from retrain.backends.catalog import BackendCapabilities, BackendDefinition
from retrain.backends.options import UNSLOTH_OPTIONS
from retrain.config.schema import POLICY_LOSS_MODES, RATIO_LEVELS

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
    dependency="unsloth",
    hint="pip install retrain-backends-unsloth (CUDA GPU required at run time)",
    contract=(1, 0),  # the backend contract this distribution was built against
)
