"""`trainer = "command"`: an external training program run through the shell.

`[training] trainer_command` is a template with four placeholders, substituted as they are
(quote them in the template if a path may hold spaces; `{{` and `}}` are literal braces):

    {config_path}   <log_dir>/retrain_config.json: every config field, flat and unredacted
    {log_dir}       [logging] log_dir
    {adapter_path}  [backend] adapter_path: where the program must leave its adapter
    {model}         [model] model

The run succeeds only when the program exits 0 **and** `adapter_path` exists afterwards;
`run_meta.json` records `exit_code:N` or `missing_policy_ref` otherwise.

The trackers of `[logging]` get, once the program has exited, the rows it wrote to
`<log_dir>/metrics.jsonl` in retrain's format (at the steps a retrain run gives them: phase
"sft" rows at their step, the others after them), then `command/exit_code` and
`command/wall_s`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrain.config.fields import flat_dict
from retrain.config.folders import adapter_folder
from retrain.config.schema import TrainConfig
from retrain.io.atomic import write_json_atomic
from retrain.io.layout import COMMAND_CONFIG, METRICS
from retrain.io.log import read_jsonl
from retrain.metrics.scan import is_sft_row, row_step
from retrain.process.spans import span
from retrain.training.meta import RunStatus
from retrain.training.result import RunResult
from retrain.training.trackers.fanout import Trackers
from retrain.training.trackers.select import tracking
from retrain.training.trackers.sink import payload


class TrainerCommandFailed(RuntimeError):
    """The trainer command exited non-zero or left no adapter."""


def render(template: str, config: TrainConfig, config_path: Path) -> str:
    return template.format(config_path=str(config_path), log_dir=config.logging.log_dir,
                           adapter_path=str(adapter_folder(config)), model=config.model.model)


def run_command(config: TrainConfig, *, config_path: str = "") -> tuple[str, str]:
    """Run the command; (adapter path, the command as run). Raises TrainerCommandFailed."""
    log_dir = Path(config.logging.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    dumped = log_dir / COMMAND_CONFIG
    write_json_atomic(dumped, flat_dict(config))
    command = render(config.training.trainer_command, config, dumped)
    status = RunStatus(config, config_path=config_path)
    with status.recorded(), tracking(config, "command") as trackers:
        with span("command") as ran:
            code = subprocess.run(command, shell=True, check=False).returncode
        mirror_rows(trackers, read_jsonl(log_dir / METRICS),
                    {"command/exit_code": code, "command/wall_s": round(ran.seconds, 6)})
        adapter = str(adapter_folder(config))
        failure, error = "", ""
        if code != 0:
            failure, error = f"exit_code:{code}", f"trainer command exited with status {code}: {command}"
        elif not Path(adapter).exists():
            failure, error = "missing_policy_ref", f"trainer command exited 0 but left no adapter at {adapter}"
        if failure:
            status.failed(failure, error)
            raise TrainerCommandFailed(error)
    status.succeeded(adapter)
    return adapter, command


def mirror_rows(trackers: Trackers, rows: list[dict[str, Any]], outcome: Mapping[str, int | float]) -> None:
    """The program's rows, then its outcome at the last row's step."""
    warmup = sum(1 for row in rows if is_sft_row(row))
    step = 0
    for i, row in enumerate(rows):
        step = row_step(row, i) + (0 if is_sft_row(row) else warmup)
        trackers.log_row(payload(row), step)
    trackers.log_row(payload(outcome), step)


def run(config: TrainConfig, reporter: object = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "command"`: the command trains; the result names its adapter."""
    adapter, command = run_command(config, config_path=config_path)
    return RunResult(config.logging.log_dir, adapter, 0, {"command": command})
