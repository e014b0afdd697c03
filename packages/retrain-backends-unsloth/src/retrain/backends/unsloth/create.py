"""Factory of the unsloth backend."""

from __future__ import annotations

from typing import NoReturn

from retrain.backends.errors import BackendUnavailable


def create_backend(config: object) -> NoReturn:
    raise BackendUnavailable.not_built("retrain-backends-unsloth", "the unsloth backend")
