"""Entry point of retrain-backends-local in the `retrain.backends` group (imports no torch):
what the local backend can do and which options it takes."""

from retrain.backends.catalog import BackendCapabilities, BackendDefinition
from retrain.backends.local.schema import LOCAL_OPTIONS, NOT_BUILT
from retrain.config.schema import (
    LOSS_AGGREGATIONS,
    MAX_ASYNC_LEVEL,
    POLICY_LOSS_MODES,
    RATIO_LEVELS,
)

CAPABILITIES = BackendCapabilities(
    reports_sync_loss=True,
    preserves_token_advantages=True,
    supports_checkpoint_resume=True,
    resume_runtime_dependent=False,
    # exact: checkpoints hold weights, optimizer state and every RNG stream
    checkpoint_resume_mode="exact",
    supports_echo_shared_forward=True,
    loss_aggregations=LOSS_AGGREGATIONS,
    reference_kl=True,
    policy_losses=POLICY_LOSS_MODES,
    ratio_levels=RATIO_LEVELS,
    multi_device=True,
    inference_servers=True,
    sampler_correction=True,
    ppo_clipping=True,
    optimizer_batch=True,
    seeded_options=("strict_deterministic",),
    local_devices=True,
    sampler_truncation=True,
    max_async_level=MAX_ASYNC_LEVEL,
    in_process_async=True,
    tensor_objectives=True,
    routing_replay_engines=("pytorch",),
    teacher_models=True,
)

BACKEND = BackendDefinition(
    name="local",
    factory="retrain.backends.local.create:create_backend",
    distribution="retrain-backends-local",
    capabilities=CAPABILITIES,
    option_schema=LOCAL_OPTIONS,
    not_built_options=NOT_BUILT,
    dependency="torch",
    hint="pip install retrain-backends-local",
    contract=(2, 2),  # the backend contract this distribution was built against
    serving="retrain.inference_engine.pytorch.serving:create",
    tokenizer="retrain.backends.local.prompt_tokenizer:load",
    export="retrain.backends.local.export.run:export",
)
