"""The run log of a process other than rank 0 in a multi-process run: it takes every call the
trainer makes on `RunLog` and writes nothing, so one run directory holds one run's files.
Checkpoints still go through the backend, whose save is collective (every rank takes part,
rank 0 writes); the trainer state is recorded by rank 0 alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain.training import faults
from retrain.training.log import RunLog
from retrain.training.state import TrainerState
from retrain.training.trackers.fanout import Trackers

if TYPE_CHECKING:
    from retrain.backends.protocol import TrainBackend
    from retrain.config.schema import TrainConfig
    from retrain.evaluation.evaluate import Evaluation
    from retrain.rollout.group import StepRollouts
    from retrain.training.flow import Flow


class FollowerLog(RunLog):
    writes = False

    def __init__(self, log_dir: str | Path, *, warmup_steps: int = 0) -> None:  # no super(): opens no files
        self.dir = Path(log_dir)
        self.warmup_steps = warmup_steps
        self.generations_per_prompt = 0
        self.trackers = Trackers()
        self.last_row: dict[str, Any] | None = None

    def open_trackers(self, config: TrainConfig, *, condition: str = "",
                      warn: Callable[[str], None] | None = None) -> None:
        pass

    def record_warmup(self, row: Mapping[str, Any], step: int) -> None:
        pass

    def record_step(self, row: dict[str, Any], rollouts: StepRollouts, step: int, *, correct: int,
                    total: int) -> None:
        self.last_row = row

    def record_eval(self, evaluation: Evaluation) -> dict[str, Any]:
        return evaluation.row.to_dict()

    def eval_rows(self) -> list[dict[str, Any]]:
        return []

    def checkpoint(self, backend: TrainBackend, flow: Flow | None, state: TrainerState, path: str | Path, *,
                   step: int, phase: str = "") -> str:
        saved = backend.save_checkpoint(str(path))
        faults.crash_if(faults.point(phase, "mid_checkpoint"), step)
        state.checkpoint_name, state.checkpoint_path = Path(path).name, saved
        faults.crash_if(faults.point(phase, "after_checkpoint"), step)
        return saved

    def finish_state(self, state: TrainerState) -> None:
        pass

    def write_pid(self) -> None:
        pass

    def clear_pid(self) -> None:
        pass

    def truncate_after(self, step: int, phase: str) -> None:
        pass

    def sync(self) -> None:
        pass

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        pass

    def close(self, exit_code: int = 0) -> None:
        pass
