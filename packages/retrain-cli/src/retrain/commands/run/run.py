"""Run a config: detect its kind, load and validate it, then train."""

from __future__ import annotations

import os
import sys

from retrain.commands.config_args import resolve_config_args
from retrain.commands.errors import CommandFailed
from retrain.commands.machine import machine_warnings
from retrain.commands.warnings import print_warnings
from retrain.config import read_toml
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.validation.load import load_config


def run(args: list[str]) -> None:
    path, overrides = resolve_config_args(args)
    kind = read_toml(path).kind if path else "single"
    if kind != "single":
        if overrides:
            raise UserError(f"override flags apply to single runs; {path} is a {kind} config",
                             hint=f"edit the file's [{kind}] table or its base sections instead")
        if kind == "campaign":
            from retrain.commands.run.campaign import run as run_campaign

            return run_campaign(str(path))
        from retrain.commands.run.squeeze import run as run_squeeze

        return run_squeeze(str(path))
    loaded = load_config(path, overrides)
    print_warnings(loaded.warnings)
    for warning in machine_warnings(loaded.config):
        print(f"warning: {warning}", file=sys.stderr)
    from retrain.commands.run.launch import launch, processes

    if n := processes(loaded.config):
        return launch(n, ["run", *args])
    train(loaded.config, loaded.path)


def train(config: TrainConfig, config_path: str) -> None:
    # the first line, before the imports and the model load that take tens of seconds
    print(f"retrain: {config_path or 'the run'}: loading {config.model.model} on {config.backend.devices} ...",
          flush=True)
    from retrain.commands.run.progress import open_reporter
    from retrain.training.trainers import train as run_training

    try:
        with open_reporter() as reporter:
            run_training(config, reporter, config_path=config_path)
    except (UserError, KeyboardInterrupt, CommandFailed):
        raise
    except Exception as exc:
        if os.environ.get("RETRAIN_DEBUG"):
            raise
        print(f"Training failed (exception:{type(exc).__name__}): {exc}", file=sys.stderr)
        print("  (set RETRAIN_DEBUG=1 for the traceback)", file=sys.stderr)
        raise CommandFailed(code=1) from None
