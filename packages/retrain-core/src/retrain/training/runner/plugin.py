"""Dotted-path trainer plugins: `[training] trainer = "pkg.module.factory"`.

The factory is called with the validated TrainConfig and must return an object with
`.run(config)`; that call replaces the RL loop. Whatever `.run` returns is kept in the run's
summary; a returned string is taken as the final adapter's path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.io.atomic import write_json_atomic
from retrain.io.layout import RUN_META
from retrain.plugins.resolve import resolve
from retrain.training.meta import run_meta
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
    meta = Path(config.logging.log_dir) / RUN_META
    meta.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(meta, run_meta(config, status="running", config_path=config_path))
    try:
        result = trainer.run(config)
    except BaseException as exc:
        write_json_atomic(meta, run_meta(config, status="failed", config_path=config_path,
                                         failure=f"exception:{type(exc).__name__}", error=str(exc)))
        raise
    policy = result if isinstance(result, str) else ""
    write_json_atomic(meta, run_meta(config, status="succeeded", config_path=config_path, policy_ref=policy))
    return result


def run(config: TrainConfig, reporter: object = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "pkg.module.factory"`: the plugin's `.run(config)` result, kept in
    the summary; a string is the final adapter's path."""
    result = run_plugin(config, config_path=config_path)
    return RunResult(config.logging.log_dir, result if isinstance(result, str) else "", 0, {"result": result})
