"""Entry point of retrain-backends-local in the `retrain.backends` group (imports no torch)."""

from retrain.backends.catalog import builtin_definition

BACKEND = builtin_definition(
    "local",
    factory="retrain.backends.local.create:create_backend",
    available=False,
    note="retrain-backends-local ships its metadata only; the local backend is not available in this version",
)
