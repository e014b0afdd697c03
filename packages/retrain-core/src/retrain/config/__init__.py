"""Config: the TOML schema, loading pipeline, overrides and validation."""

from retrain.config.errors import ConfigError, ConfigIssue
from retrain.config.load import LoadedConfig, load_config
from retrain.config.override import Overrides, parse_overrides
from retrain.config.schema import TrainConfig
from retrain.config.source import config_kind, read_toml

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
