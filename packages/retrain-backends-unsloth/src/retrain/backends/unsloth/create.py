"""Factory of the unsloth backend: refuses in one line where it cannot run (no CUDA GPU, or
Unsloth missing) before anything heavy is imported."""

from __future__ import annotations

from retrain.backends.errors import BackendUnavailable
from retrain.config.schema import TrainConfig


def create_backend(config: TrainConfig) -> object:
    from retrain.backends.unsloth.availability import problem
    from retrain.process.world import current_world

    if (world := current_world()).distributed:
        raise BackendUnavailable(f"the unsloth backend on {world.size} processes (torchrun) is not built yet in "
                                 'this version; run one process, or backend = "local" for FSDP2')
    if (why := problem()) is not None:
        raise BackendUnavailable(why)
    from retrain.backends.unsloth.backend import UnslothBackend

    return UnslothBackend(config)
