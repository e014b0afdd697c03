"""The tokenizer `retrain data` reads prompts with (the run's backend's, loaded without its
model), and the text of token ids under it, special tokens shown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retrain.config.schema import TrainConfig


def prompt_tokenizer(config: TrainConfig) -> tuple[Any, str]:
    """The tokenizer the run's backend reads prompts with, or None and why there is none."""
    from retrain.backends import catalog
    from retrain.registry.core import load_target

    entry = catalog.entry_for(config.backend.backend, config.backend.options)
    if entry is None or not entry.installed:
        return None, f"backend {config.backend.backend!r} is not installed here"
    if not entry.definition.tokenizer:
        return None, f"backend {config.backend.backend!r} offers no tokenizer without its model"
    return load_target(entry.definition.tokenizer, entry.name)(config), ""


def token_text(tokenizer: Any, ids: Sequence[int]) -> str:
    hf = getattr(tokenizer, "hf", None)
    if hf is not None:
        return str(hf.decode(list(ids), skip_special_tokens=False))
    return "".join(tokenizer.token_strings(ids))
