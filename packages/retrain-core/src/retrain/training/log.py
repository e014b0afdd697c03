"""A run directory's files: metrics, emergence logs, run_meta.json, run.pid, and the
truncation that makes a resumed run's logs identical to an uninterrupted run's."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrain.io.atomic import write_json_atomic
from retrain.io.log import JsonlLogger, encode_row, truncate_jsonl
from retrain.training import faults

METRICS = "metrics.jsonl"
STEPS = "emergence/steps.jsonl"
GENERATIONS = "emergence/generations.jsonl"
RUN_META = "run_meta.json"
PID = "run.pid"


class RunLog:
    def __init__(self, log_dir: str | Path, *, log_generations: bool = True) -> None:
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics = JsonlLogger(self.dir / METRICS, flush_every=1)
        self.steps = JsonlLogger(self.dir / STEPS, flush_every=1)
        self.generations = JsonlLogger(self.dir / GENERATIONS, flush_every=32, flush_interval_s=1.0,
                                       enabled=log_generations)

    def write_pid(self) -> None:
        (self.dir / PID).write_text(f"{os.getpid()}\n", encoding="ascii")

    def clear_pid(self) -> None:
        try:
            (self.dir / PID).unlink()
        except FileNotFoundError:
            pass

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        step = int(row.get("step", -1))
        if faults.armed("mid_metrics", step):
            line = encode_row(row)
            self.metrics.flush()
            with open(self.dir / METRICS, "a", encoding="utf-8") as f:
                f.write(line[: len(line) // 2])
                f.flush()
                os.fsync(f.fileno())
            faults.crash_if("mid_metrics", step)
        self.metrics.log(row)

    def truncate_after(self, step: int, phase: str) -> None:
        """Drop rows written after the checkpoint being resumed (and any torn line).

        Warmup rows carry phase "sft" and their own step counter; RL rows have no phase or
        phase "rl". While resuming RL every warmup row is kept."""
        def keep(row: Mapping[str, Any]) -> bool:
            row_phase = row.get("phase", "rl")
            s = row.get("step")
            if not isinstance(s, int):
                return False
            if phase == "rl":
                return row_phase == "sft" or s <= step
            return row_phase == "sft" and s <= step

        for name in (METRICS, STEPS, GENERATIONS):
            truncate_jsonl(self.dir / name, keep)

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        write_json_atomic(self.dir / RUN_META, {**meta, "updated_at": time.time()})

    def close(self) -> None:
        for logger in (self.metrics, self.steps, self.generations):
            logger.close()
