"""Mirroring metrics rows to Weights & Biases when `[logging] wandb_project` is set.

wandb is optional (`pip install 'retrain-core[wandb]'`) and imported only when a sink is
created. `WANDB_MODE=offline` needs no network: the run is written under
`<log_dir>/wandb/` for a later `wandb sync`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.config.snapshot import sections_snapshot
from retrain.errors import UserError

WANDB_HINT = "pip install 'retrain-core[wandb]'"
PREFIX = "train/"


class WandbMissing(UserError, RuntimeError):
    def __init__(self) -> None:
        super().__init__(f"[logging] wandb_project is set but the `wandb` package is not installed "
                         f"({WANDB_HINT}, or clear wandb_project)")


def wandb_payload(row: Mapping[str, Any], prefix: str = PREFIX) -> dict[str, float | int]:
    """`train/<key>` for every numeric field of a metrics row but `step` (bools as 0/1);
    strings (condition, modes, digests) belong to the run config, not the series."""
    out: dict[str, float | int] = {}
    for key, value in row.items():
        if key == "step":
            continue
        if isinstance(value, bool):
            out[prefix + key] = int(value)
        elif isinstance(value, (int, float)):
            out[prefix + key] = value
    return out


def run_name(config: TrainConfig, condition: str = "") -> str:
    """`wandb_run_name`, else the log folder's name, else the condition label."""
    log = config.logging
    folder = os.path.basename(os.path.abspath(log.log_dir)) if log.log_dir else ""
    return log.wandb_run_name or folder or condition


def parse_tags(text: str) -> list[str]:
    return [tag.strip() for tag in text.split(",") if tag.strip()]


def _import_wandb() -> Any:
    try:
        return importlib.import_module("wandb")
    except ImportError:
        raise WandbMissing() from None


class WandbSink:
    """One W&B run per training run: `log_step` per metrics row, `finish` at the end."""

    def __init__(self, config: TrainConfig, *, condition: str = "") -> None:
        log = config.logging
        if not log.wandb_project:
            raise ValueError("WandbSink needs [logging] wandb_project")
        wandb = _import_wandb()
        log_dir = Path(log.log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.run: Any = wandb.init(
            project=log.wandb_project,
            name=run_name(config, condition),
            entity=log.wandb_entity or None,
            group=log.wandb_group or None,
            tags=parse_tags(log.wandb_tags) or None,
            dir=str(log_dir),
            config=sections_snapshot(config),
        )

    def log_step(self, row: Mapping[str, Any], step: int) -> None:
        self.run.log(wandb_payload(row), step=step)

    def log_eval(self, row: Mapping[str, Any], step: int) -> None:
        """An eval.jsonl row: its `eval/...` keys as they are."""
        self.run.log(wandb_payload(row, prefix=""), step=step)

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)

    def __enter__(self) -> WandbSink:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.finish(0 if exc_type is None else 1)


class NullSink:
    """What a run without `[logging] wandb_project` logs to."""

    def log_step(self, row: Mapping[str, Any], step: int) -> None:
        return None

    def log_eval(self, row: Mapping[str, Any], step: int) -> None:
        return None

    def finish(self, exit_code: int = 0) -> None:
        return None


def create_wandb_sink(config: TrainConfig, *, condition: str = "") -> WandbSink | NullSink:
    """A W&B sink when `[logging] wandb_project` is set, else a sink that drops rows."""
    return WandbSink(config, condition=condition) if config.logging.wandb_project else NullSink()
