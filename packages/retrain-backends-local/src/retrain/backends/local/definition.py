"""Entry point of retrain-backends-local in the `retrain.backends` group (imports no torch)."""

from retrain.backends.catalog import builtin_definition

BACKEND = builtin_definition("local", factory="retrain.backends.local.create:create_backend")
