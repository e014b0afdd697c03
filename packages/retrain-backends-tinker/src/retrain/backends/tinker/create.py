"""Factory of the tinker backend (entry point `retrain.backends: tinker`)."""

from __future__ import annotations

from retrain.config.schema import TrainConfig


def create_backend(config: TrainConfig) -> object:
    from retrain.backends.tinker.train import TinkerBackend

    return TinkerBackend(config)
