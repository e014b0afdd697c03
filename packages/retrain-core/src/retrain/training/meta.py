"""`run_meta.json`: what ran (resolved config, secrets redacted; versions; seed) and how it ended.

Every trainer records its run's state through one `RunStatus`: `running` when it starts, then
`succeeded` (with the policy it produced), `failed` (with a failure code and the message) or
`interrupted` (a user's stop the run saved itself at).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.config.snapshot import config_snapshot
from retrain.io.atomic import write_json_atomic
from retrain.io.layout import RUN_META
from retrain.registry.health import RETRAIN_DISTRIBUTIONS, installed_versions
from retrain.training.interrupt import RunInterrupted

LIBRARIES = ("torch", "transformers", "peft", "numpy", "msgspec")


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    found = installed_versions(RETRAIN_DISTRIBUTIONS + LIBRARIES)
    out.update({name: v for name, v in found.items() if v is not None})
    return out


def run_meta(config: TrainConfig, *, status: str, config_path: str = "", policy_ref: str = "",
             failure: str = "", error: str = "", last_row: dict[str, Any] | None = None,
             world_size: int = 1, sft_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`world_size`: the processes the run trains on (torchrun's WORLD_SIZE; 1 without it);
    `sft_data`: the provenance of the SFT data the run trains on, its audits included."""
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
    if sft_data is not None:
        meta["sft_data"] = dict(sft_data)
    return meta


def exception_failure(exc: BaseException) -> str:
    """The failure code of a run an exception ended: `exception:<type>`."""
    return f"exception:{type(exc).__name__}"


class RunStatus:
    """The run's state in `run_meta.json`, written whole at each change.

    `write` takes the finished record; by default it is written atomically to
    `<log_dir>/run_meta.json` (the folder made when missing). The RL and SFT trainers pass
    their RunLog's writer (which stamps `updated_at`; a torchrun follower's writes nothing)."""

    def __init__(self, config: TrainConfig, *, config_path: str = "", world_size: int = 1,
                 write: Callable[[Mapping[str, Any]], None] | None = None,
                 sft_data: Mapping[str, Any] | None = None) -> None:
        self.config, self.config_path, self.world_size = config, config_path, world_size
        self.sft_data = sft_data
        self._write = write or self._write_file
        self.ended = False  # succeeded, failed or interrupted has been written

    def _write_file(self, meta: Mapping[str, Any]) -> None:
        path = Path(self.config.logging.log_dir) / RUN_META
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, dict(meta))

    def _record(self, status: str, **fields: Any) -> None:
        self.ended = status != "running"
        self._write(run_meta(self.config, status=status, config_path=self.config_path,
                             world_size=self.world_size, sft_data=self.sft_data, **fields))

    def running(self) -> None:
        self._record("running")

    def succeeded(self, policy_ref: str = "", last_row: dict[str, Any] | None = None) -> None:
        self._record("succeeded", policy_ref=policy_ref, last_row=last_row)

    def failed(self, failure: str, error: str) -> None:
        self._record("failed", failure=failure, error=error)

    def interrupted(self, error: str) -> None:
        self._record("interrupted", error=error)

    def ended_by(self, exc: BaseException) -> None:
        """`interrupted` when the run stopped cleanly at a user's interrupt (RunInterrupted),
        else `failed` with `exception:<type>` and the exception's message."""
        if isinstance(exc, RunInterrupted):
            self.interrupted(str(exc))
        else:
            self.failed(exception_failure(exc), str(exc))

    @contextmanager
    def recorded(self) -> Iterator[RunStatus]:
        """`running` for the block; an exception that escapes it is recorded (`ended_by`)
        unless the block recorded how the run ended first, and raised on. The block records
        success itself: only it knows the policy."""
        self.running()
        try:
            yield self
        except BaseException as exc:
            if not self.ended:
                self.ended_by(exc)
            raise
