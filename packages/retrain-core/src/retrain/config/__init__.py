"""Config: the TOML schema, loading pipeline, overrides and validation.

Names are resolved lazily so that importing a submodule (`retrain.config.errors`) from low
layers such as `retrain.backends.options` does not pull in the whole loader.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retrain.config.errors import ConfigError, ConfigIssue
    from retrain.config.load import LoadedConfig, load_config
    from retrain.config.override import Overrides, parse_overrides
    from retrain.config.schema import TrainConfig
    from retrain.config.source import config_kind, read_toml

_EXPORTS = {
    "ConfigError": "retrain.config.errors",
    "ConfigIssue": "retrain.config.errors",
    "LoadedConfig": "retrain.config.load",
    "load_config": "retrain.config.load",
    "Overrides": "retrain.config.override",
    "parse_overrides": "retrain.config.override",
    "TrainConfig": "retrain.config.schema",
    "config_kind": "retrain.config.source",
    "read_toml": "retrain.config.source",
}

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "LoadedConfig",
    "Overrides",
    "TrainConfig",
    "config_kind",
    "load_config",
    "parse_overrides",
    "read_toml",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'retrain.config' has no attribute {name!r}")
    return getattr(import_module(module), name)
