"""Factory of the local backend (entry point `retrain.backends: local`)."""

from __future__ import annotations

from retrain.config.schema import TrainConfig


def create_backend(config: TrainConfig) -> object:
    from retrain.models.source import require_model

    m = config.model
    require_model(m.model, m.revision, m.local_files_only)  # before torch is imported
    from retrain.backends.local.backend import LocalBackend
    from retrain.backends.local.options import LocalOptions

    return LocalBackend(config, options=LocalOptions.read(config.backend.options))
