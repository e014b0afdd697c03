"""`run_meta.json`: what ran (resolved config, secrets redacted; versions; seed) and how it ended."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.config.snapshot import config_snapshot
from retrain.registry.health import RETRAIN_DISTRIBUTIONS, installed_versions

LIBRARIES = ("torch", "transformers", "peft", "numpy", "msgspec")


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    found = installed_versions(RETRAIN_DISTRIBUTIONS + LIBRARIES)
    out.update({name: v for name, v in found.items() if v is not None})
    return out


def run_meta(config: TrainConfig, *, status: str, config_path: str = "", policy_ref: str = "",
             failure: str = "", error: str = "", last_row: dict[str, Any] | None = None,
             world_size: int = 1) -> dict[str, Any]:
    """`world_size`: the processes the run trains on (torchrun's WORLD_SIZE; 1 without it)."""
    log_dir = Path(config.logging.log_dir)
    meta: dict[str, Any] = {
        "trainer": config.training.trainer,
        "run_id": log_dir.name or "run",
        "status": status,
        "pid": os.getpid(),
        "time": time.time(),
        "config_path": config_path,
        "seed": config.training.seed,
        "world_size": world_size,
        "config": config_snapshot(config),
        "versions": versions(),
    }
    if policy_ref:
        meta["policy_ref"] = policy_ref
    if failure:
        meta["failure_status"] = failure
    if failure or error:
        meta["error_message"] = error
    if last_row is not None:
        meta["metrics"] = last_row
    return meta
