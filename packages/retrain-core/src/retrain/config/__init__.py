"""Config: what a run's configuration is: the schema (`TrainConfig` and its sections), the
fields' TOML keys, flags and coercion, TOML sources, overrides and the migrations of old keys.
It imports nothing of retrain but `retrain.errors`, so every package may use it; loading a file
into a validated config is `retrain.validation.load.load_config`, one floor above the packages
whose rules it checks.

Names are resolved lazily so that importing one submodule (`retrain.config.errors`) does not
pull in the rest.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retrain.config.errors import ConfigError, ConfigIssue
    from retrain.config.override import Overrides, parse_overrides
    from retrain.config.schema import TrainConfig
    from retrain.config.source import config_kind, read_toml

_EXPORTS = {
    "ConfigError": "retrain.config.errors",
    "ConfigIssue": "retrain.config.errors",
    "Overrides": "retrain.config.override",
    "parse_overrides": "retrain.config.override",
    "TrainConfig": "retrain.config.schema",
    "config_kind": "retrain.config.source",
    "read_toml": "retrain.config.source",
}

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "Overrides",
    "TrainConfig",
    "config_kind",
    "parse_overrides",
    "read_toml",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'retrain.config' has no attribute {name!r}")
    return getattr(import_module(module), name)
