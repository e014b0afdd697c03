"""Resolve `[backend] backend` to a running backend. The name resolves through the registry
like every plugin kind (registered at run time, an entry point of `retrain.backends`, or a
dotted path); the catalog says beforehand whether a built-in or entry-point backend can run
here. Only here does a backend's heavy module get imported."""

from __future__ import annotations

from typing import Any

from retrain.backends import catalog
from retrain.backends.errors import BackendUnavailable
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.registry.core import load_target, lookup, registered

__all__ = ["BackendUnavailable", "capabilities", "create_backend", "require_runnable"]


def require_runnable(config: TrainConfig) -> None:
    """Raise BackendUnavailable now, before data or models load, if the backend cannot run."""
    name = config.backend.backend
    if is_dotted(name) or name in registered("backend"):
        return
    entry = catalog.lookup(name)
    if entry is None:
        raise BackendUnavailable(f"unknown backend {name!r}")
    d = entry.definition
    if entry.problems:
        raise BackendUnavailable("; ".join(entry.problems))
    if not d.available:  # before "not installed": installing a backend that is not built does not help
        raise BackendUnavailable(d.note or f"backend {name!r} is not built yet in this version")
    if not entry.installed:
        raise BackendUnavailable(f"backend {name!r} is not installed: {d.hint}")


def create_backend(config: TrainConfig) -> Any:
    require_runnable(config)
    name = config.backend.backend
    factory = lookup("backend", name, config.plugins.search_paths).obj
    if isinstance(factory, catalog.BackendDefinition):
        factory = load_target(factory.factory, name)
    return factory(config)


def capabilities(config: TrainConfig) -> catalog.BackendCapabilities:
    name = config.backend.backend
    own = registered("backend").get(name)
    if own is not None:
        return own.capabilities if isinstance(own, catalog.BackendDefinition) else catalog.PLUGIN_DEFAULT_CAPABILITIES
    entry = catalog.entry_for(name, config.backend.options)
    return entry.definition.capabilities if entry is not None else catalog.PLUGIN_DEFAULT_CAPABILITIES
