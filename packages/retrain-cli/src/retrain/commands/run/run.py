"""Run a config: detect its kind, load and validate it, then train."""

from __future__ import annotations

import os
import sys

from retrain.commands.config_args import resolve_config_args
from retrain.commands.errors import CommandFailed, UsageError
from retrain.commands.warnings import print_warnings
from retrain.config import load_config, read_toml


def run(args: list[str]) -> None:
    path, overrides = resolve_config_args(args)
    kind = read_toml(path).kind if path else "single"
    if kind != "single":
        if overrides:
            raise UsageError(f"override flags apply to single runs; {path} is a {kind} config",
                             hint=f"edit the file's [{kind}] table or its base sections instead")
        raise UsageError(f"{kind} runs are not available in this version of retrain ({path})",
                         hint="`retrain explain` previews it")
    loaded = load_config(path, overrides)
    print_warnings(loaded.warnings)
    config = loaded.config
    if config.training.trainer != "retrain":
        raise UsageError(f"trainer {config.training.trainer!r} is not available in this version "
                         "(only the RL trainer 'retrain' is)", hint='[training] trainer = "retrain"')
    train(config, loaded.path)


def train(config: object, config_path: str) -> None:
    from retrain.backends.create import BackendUnavailable
    from retrain.commands.run.progress import open_reporter
    from retrain.data.source import DataError
    from retrain.plugins.resolve import PluginError
    from retrain.rewards.types import RewardUnavailable
    from retrain.training.rundir import RunDirError
    from retrain.training.state import StateError
    from retrain.training.trainer import FlowError
    from retrain.training.trainer import train as run_training
    from retrain.training.wandb import WandbMissing

    try:
        with open_reporter() as reporter:
            run_training(config, reporter, config_path=config_path)  # type: ignore[arg-type]
    except (BackendUnavailable, DataError, RewardUnavailable, RunDirError, StateError, PluginError,
            FlowError, WandbMissing) as exc:
        raise UsageError(str(exc)) from None
    except (KeyboardInterrupt, CommandFailed):
        raise
    except Exception as exc:
        if os.environ.get("RETRAIN_DEBUG"):
            raise
        print(f"Training failed (exception:{type(exc).__name__}): {exc}", file=sys.stderr)
        print("  (set RETRAIN_DEBUG=1 for the traceback)", file=sys.stderr)
        raise CommandFailed(code=1) from None
