"""Entry point of retrain-backends-unsloth in the `retrain.backends` group (imports no torch)."""

from retrain.backends.catalog import builtin_definition

BACKEND = builtin_definition(
    "unsloth",
    contract=(1, 0),  # the backend contract this distribution was built against
    factory="retrain.backends.unsloth.create:create_backend",
)
