"""Factory of the tinker backend."""

from __future__ import annotations

from typing import NoReturn

from retrain.backends.errors import BackendUnavailable


def create_backend(config: object) -> NoReturn:
    raise BackendUnavailable.not_built("retrain-backends-tinker", "the tinker backend")
