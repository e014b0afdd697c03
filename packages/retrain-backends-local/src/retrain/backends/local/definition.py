"""Entry point of retrain-backends-local in the `retrain.backends` group (imports no torch)."""

from retrain.backends.catalog import builtin_definition

BACKEND = builtin_definition(
    "local",
    contract=(1, 2),  # the backend contract this distribution was built against
    factory="retrain.backends.local.create:create_backend",
    serving="retrain.inference_engine.pytorch.serving:create",
)
