"""Resolve `[environment] provider` to a running environment, the way backends resolve: a name
registered at run time, an entry point of `retrain.environments` (checked against the
environment contract by the catalog), or a dotted path to a factory `(TrainConfig) -> env`."""

from __future__ import annotations

from typing import Any

from retrain.config.schema import TrainConfig
from retrain.environments import catalog
from retrain.environments.protocol import EnvironmentDefinition
from retrain.errors import UserError
from retrain.plugins.resolve import is_dotted
from retrain.registry.core import load_target, lookup, registered


class EnvironmentUnavailable(UserError, RuntimeError):
    """The configured provider is not installed, not built, or built for another contract."""


def create_environment(config: TrainConfig) -> Any | None:
    """The run's environment, or None when `[environment] provider` is empty."""
    name = config.environment.provider
    if not name:
        return None
    if not is_dotted(name) and name not in registered("environment"):
        entry = catalog.lookup(name)
        if entry is None:
            raise EnvironmentUnavailable(f"environment provider {name!r} is not installed",
                                         hint="pip install retrain-envs")
        if not entry.runnable:
            d = entry.definition
            why = "; ".join(entry.problems) or (d.note if d is not None else "") or "not available"
            raise EnvironmentUnavailable(f"environment provider {name!r}: {why}")
    factory = lookup("environment", name, config.plugins.search_paths).obj
    if isinstance(factory, EnvironmentDefinition):
        factory = load_target(factory.factory, name)
    return factory(config)
