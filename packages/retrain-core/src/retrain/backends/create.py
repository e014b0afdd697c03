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


def create_backend(config: TrainConfig) -> Any:
    name = config.backend.backend
    if is_dotted(name):
        factory, _ = resolve(name, config.plugins.search_paths)
        return factory(config)
    entry = catalog.lookup(name)
    if entry is None:
        raise BackendUnavailable(f"unknown backend {name!r}")
    d = entry.definition
    if not entry.installed:
        raise BackendUnavailable(f"backend {name!r} is not installed: {d.hint}")
    if not d.available:
        raise BackendUnavailable(d.note or f"backend {name!r} is not available in this version")
    module_name, _, attr = d.factory.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(config)


def capabilities(config: TrainConfig) -> catalog.BackendCapabilities:
    name = config.backend.backend
    entry = (catalog.dotted_plugin_entry(name, config.backend.options) if is_dotted(name)
             else catalog.lookup(name))
    return entry.definition.capabilities if entry is not None else catalog.PLUGIN_DEFAULT_CAPABILITIES
