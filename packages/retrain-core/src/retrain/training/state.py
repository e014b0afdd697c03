"""`trainer_state.json`: where a run stands, written atomically after each checkpoint.

`step` is the last completed RL step (0-based; -1 before the first); `checkpoint_name` is
`final` once the run finished. The reference's six integer fields keep their names so
`retrain status` and the reference's readers understand our run directories.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from retrain.errors import UserError
from retrain.io.atomic import write_json_atomic

STATE_FILE = "trainer_state.json"


class TrainerState(msgspec.Struct, kw_only=True):
    step: int = -1
    example_idx: int = 0
    total_correct: int = 0
    total_completions: int = 0
    current_batch_size: int = 0
    current_group_size: int = 0
    checkpoint_name: str = ""
    checkpoint_path: str = ""
    phase: str = "rl"  # sft (warmup) | rl
    sft_step: int = -1  # last completed warmup step
    resume_mode: str = ""
    resume_warning: str = ""
    sepa: dict[str, Any] = msgspec.field(default_factory=dict)
    backpressure: dict[str, Any] = msgspec.field(default_factory=dict)
    wall_time_s: float = 0.0

    @property
    def finished(self) -> bool:
        return self.checkpoint_name == "final"


class StateError(UserError, ValueError):
    """A trainer_state.json that cannot be used to resume."""


def write_state(log_dir: str | Path, state: TrainerState) -> None:
    write_json_atomic(Path(log_dir) / STATE_FILE, msgspec.to_builtins(state))


def read_state(log_dir: str | Path) -> TrainerState:
    path = Path(log_dir) / STATE_FILE
    if not path.is_file():
        raise StateError(f"{path} not found: nothing to resume from")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StateError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise StateError(f"{path} does not hold an object")
    known = {f.encode_name for f in msgspec.inspect.type_info(TrainerState).fields}  # type: ignore[attr-defined]
    try:
        return msgspec.convert({k: v for k, v in raw.items() if k in known}, TrainerState, strict=False)
    except msgspec.ValidationError as exc:
        raise StateError(f"{path}: {exc}") from None
