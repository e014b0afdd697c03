"""Dotted-path trainer plugins: `[training] trainer = "pkg.module.factory"`.

The factory is called with the validated TrainConfig and must return an object with
`.run(config)`; that call replaces the RL loop. Whatever `.run` returns is kept in the run's
summary; a returned string is taken as the final adapter's path.
"""

from __future__ import annotations

from typing import Any

from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.plugins.resolve import resolve
from retrain.training.meta import RunStatus
from retrain.training.result import RunResult


class TrainerPluginError(UserError, TypeError):
    """A trainer plugin that does not follow the factory(config) -> object-with-run contract."""


def load_trainer(config: TrainConfig) -> Any:
    target = config.training.trainer
    factory, _ = resolve(target, config.plugins.search_paths)
    if not callable(factory):
        raise TrainerPluginError(f"[training] trainer: {target!r} is not callable (expected factory(config))")
    trainer = factory(config)
    if not callable(getattr(trainer, "run", None)):
        raise TrainerPluginError(f"[training] trainer: {target!r} returned {type(trainer).__name__}, "
                                 "which has no run(config) method")
    return trainer


def run_plugin(config: TrainConfig, *, config_path: str = "") -> Any:
    """Load and run the plugin, recording running / succeeded / failed in run_meta.json."""
    trainer = load_trainer(config)
    status = RunStatus(config, config_path=config_path)
    with status.recorded():
        result = trainer.run(config)
    status.succeeded(result if isinstance(result, str) else "")
    return result


def run(config: TrainConfig, reporter: object = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "pkg.module.factory"`: the plugin's `.run(config)` result, kept in
    the summary; a string is the final adapter's path."""
    result = run_plugin(config, config_path=config_path)
    return RunResult(config.logging.log_dir, result if isinstance(result, str) else "", 0, {"result": result})
