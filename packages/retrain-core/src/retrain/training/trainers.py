"""Which trainer runs a config.

`[training] trainer` names a built-in, found through the registry's `trainer` kind
(retrain.registry.builtin.TARGETS: each target is a function `(config, reporter, *,
config_path) -> RunResult`), or a dotted path to a plugin factory (retrain.training.runner.plugin).
Adding a built-in trainer is one module with such a function plus one registry line.
"""

from __future__ import annotations

from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.registry.core import lookup
from retrain.training.console import Reporter
from retrain.training.result import RunResult


def train(config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> RunResult:
    """Run the trainer `[training] trainer` names."""
    name = config.training.trainer
    if is_dotted(name):
        from retrain.training.runner.plugin import run

        return run(config, reporter, config_path=config_path)
    result: RunResult = lookup("trainer", name).obj(config, reporter, config_path=config_path)
    return result
