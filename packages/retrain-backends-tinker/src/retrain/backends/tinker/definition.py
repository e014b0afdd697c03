"""Entry point of retrain-backends-tinker in the `retrain.backends` group (imports no torch)."""

from retrain.backends.catalog import builtin_definition

BACKEND = builtin_definition(
    "tinker",
    factory="retrain.backends.tinker.create:create_backend",
    available=False,
    note="retrain-backends-tinker ships its metadata only; the tinker backend is not available in this version",
)
