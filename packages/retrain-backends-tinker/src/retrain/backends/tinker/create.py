"""Factory of the tinker backend."""

from __future__ import annotations

from typing import NoReturn

from retrain.backends.errors import BackendNotAvailable


def create_backend(config: object) -> NoReturn:
    raise BackendNotAvailable("retrain-backends-tinker", "the tinker backend")
