"""Run a config: detect its kind, load and validate it, then hand it to the runner."""

from __future__ import annotations

from retrain.commands.config_args import resolve_config_args
from retrain.commands.errors import UsageError
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
    raise UsageError(
        "training is not available in this version: it arrives with the local backend "
        f"({loaded.path or 'defaults'} is valid)",
        hint="`retrain explain` shows what this config would run",
    )
