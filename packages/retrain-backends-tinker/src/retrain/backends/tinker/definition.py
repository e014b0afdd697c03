"""Entry point of retrain-backends-tinker in the `retrain.backends` group (imports no torch)."""

from retrain.backends.catalog import builtin_definition

BACKEND = builtin_definition(
    "tinker",
    contract=(1, 0),  # the backend contract this distribution was built against
    factory="retrain.backends.tinker.create:create_backend",
    probe="retrain.backends.tinker.doctor:probe",
)
