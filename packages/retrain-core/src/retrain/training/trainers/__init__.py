"""The trainers, one module each, and which one runs a config.

Built-ins: `rl` (the RL loop, `trainer = "retrain"`), `sft`, `discover` (`ttt_discover`),
`command`, `optimizer_replay`; `plugin` runs a dotted-path factory. What they share lives one
floor down in retrain.training: the run state (meta), the step recorder (record), the run's
holdings (run), the console, the log.

`[training] trainer` names a trainer of the registry's `trainer` kind: a built-in
(retrain.registry.builtin.TARGETS), a name registered at run time, or an entry point of group
`retrain.trainers` in an installed distribution. Each is a function `(config, reporter, *,
config_path) -> RunResult` that runs the whole run and records its state in run_meta.json
through `retrain.training.meta.RunStatus`. A dotted path names a plugin factory instead
(retrain.training.trainers.plugin). Adding a trainer is one module with such a function plus one
line: in TARGETS for a built-in, in its distribution's entry points otherwise.
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
        from retrain.training.trainers.plugin import run

        return run(config, reporter, config_path=config_path)
    result: RunResult = lookup("trainer", name).obj(config, reporter, config_path=config_path)
    return result
