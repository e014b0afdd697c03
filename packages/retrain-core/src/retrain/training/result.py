"""What every trainer returns: the run's log folder, its final adapter, the steps it trained
and a summary (retrain.training.trainers.train returns it to the CLI and the campaign runner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunResult:
    log_dir: str
    final_adapter: str
    steps: int
    summary: dict[str, Any] = field(default_factory=dict)
