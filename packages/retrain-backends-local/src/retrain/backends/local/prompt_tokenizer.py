"""The local backend's tokenizer without its model (`BackendDefinition.tokenizer`): what
`retrain data` renders prompts with, the same object a run's backend builds."""

from __future__ import annotations

from retrain.backends.tokenizer import HFTokenizer
from retrain.config.schema import TrainConfig


def load(config: TrainConfig) -> HFTokenizer:
    from retrain.models.load import ModelSpec, load_tokenizer
    from retrain.models.tiny import is_tiny

    spec = ModelSpec(config.model.model, config.model.revision, config.model.local_files_only,
                     bool(config.backend.options.get("trust_remote_code", False)))
    return HFTokenizer(load_tokenizer(spec), reads_instructions=not is_tiny(spec.name))
