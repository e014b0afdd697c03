"""A sequential campaign trains its runs in its own process: a run stopped by a Ctrl-C or a
scheduler's SIGTERM (saved, `interrupted`) stops the campaign too, instead of being counted a
failure while the next run starts and the stop is lost."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from retrain.campaign.expand import RunSpec
from retrain.campaign.worker import train_in_process
from retrain.config.schema import TrainConfig
from retrain.training import trainers
from retrain.training.interrupt import RunInterrupted


def test_a_run_stopped_by_sigterm_is_interrupted_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stopped(*args: Any, **kwargs: Any) -> None:
        raise RunInterrupted("stopped by SIGTERM after step 3; checkpoint saved: x", signum=signal.SIGTERM)

    monkeypatch.setattr(trainers, "train", stopped)
    run = RunSpec("grpo_s0", None, 0, TrainConfig(), "")  # type: ignore[arg-type]
    outcome = train_in_process(run, None, str(tmp_path / "grpo_s0.toml"))
    assert (outcome.status, outcome.error) == ("interrupted", "stopped by SIGTERM after step 3; checkpoint saved: x")
