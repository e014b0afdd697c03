"""A two-process (torchrun) run told to stop by SIGTERM: `retrain` hands the signal to torchrun,
torchrun to both ranks, and they stop after the same step, saved (docs/reliability.md)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from fault_run import cut, meta
from test_distributed_run import (
    reference,  # noqa: F401  (a fixture: the uninterrupted two-process run)
    two_process_run,
)
from test_training_run import outputs

pytestmark = pytest.mark.slow


def test_sigterm_stops_both_processes_of_a_torchrun_world_after_one_step(
        reference: dict[str, object], tmp_path: Path, spawn: Any) -> None:  # noqa: F811
    """`retrain` hands the stop to torchrun, which hands it to both ranks; they agree on the
    step, save together and end (no rank waits in a collective for one that left), and the
    resumed run is the uninterrupted two-process run."""
    cfg = two_process_run(tmp_path)
    run = cut(spawn(cfg), tmp_path / "logs", 2, signal.SIGTERM)  # after the warmup row and RL step 0's
    assert run.wait(timeout=300) == 143, run.stderr()[-3000:]
    logs = tmp_path / "logs"
    assert meta(logs)["status"] == "interrupted" and "stopped by SIGTERM after step" in run.stderr()
    resumed = spawn(cfg, "--resume", str(logs))
    assert resumed.wait() == 0, resumed.stderr()[-3000:]
    got = outputs(tmp_path)
    for key in ("metrics", "steps", "generations", "eval", "eval_problems", "adapter"):
        assert got[key] == reference[key], key
