"""Entry point of retrain-backends-tinker in the `retrain.backends` group (imports no torch)."""

from retrain.backends.catalog import builtin_definition

BACKEND = builtin_definition("tinker", factory="retrain.backends.tinker.create:create_backend")
