"""Factory of the local backend (entry point `retrain.backends: local`)."""

from __future__ import annotations

from retrain.config.schema import TrainConfig


def create_backend(config: TrainConfig) -> object:
    from retrain.backends.local.backend import LocalBackend

    return LocalBackend(config)
