"""Resolve `[backend] backend` to a running backend through the catalog (entry points or a
dotted path). Only here does a backend's heavy module get imported."""

from __future__ import annotations

import importlib
from typing import Any

from retrain.backends import catalog
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted, resolve


class BackendUnavailable(RuntimeError):
    """The configured backend cannot run on this installation; the message says why and how."""


def require_runnable(config: TrainConfig) -> None:
    """Raise BackendUnavailable now, before data or models load, if the backend cannot run."""
    name = config.backend.backend
    if is_dotted(name):
        return
    entry = catalog.lookup(name)
    if entry is None:
        raise BackendUnavailable(f"unknown backend {name!r}")
    d = entry.definition
    if not entry.installed:
        raise BackendUnavailable(f"backend {name!r} is not installed: {d.hint}")
    if not d.available:
        raise BackendUnavailable(d.note or f"backend {name!r} is not available in this version")


def create_backend(config: TrainConfig) -> Any:
    name = config.backend.backend
    if is_dotted(name):
        factory, _ = resolve(name, config.plugins.search_paths)
        return factory(config)
    require_runnable(config)
    d = catalog.lookup(name).definition  # type: ignore[union-attr]
    module_name, _, attr = d.factory.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(config)


def capabilities(config: TrainConfig) -> catalog.BackendCapabilities:
    entry = catalog.entry_for(config.backend.backend, config.backend.options)
    return entry.definition.capabilities if entry is not None else catalog.PLUGIN_DEFAULT_CAPABILITIES
