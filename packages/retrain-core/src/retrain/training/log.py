"""Side effects of recording a run: one call per training step writes its metrics row, its
emergence rows and its trackers' point; one call per evaluation writes its eval.jsonl row, its
per-problem file and its trackers' point; one call per checkpoint saves the backend and the
trainer state and offers the checkpoint to the trackers (`checkpoint_artifacts`); plus
run_meta.json, run.pid, and the truncation that makes a resumed run's logs identical to an
uninterrupted run's. The rows themselves are built in `telemetry` and `retrain.evaluation`;
the trackers are retrain.training.trackers."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from retrain.io.atomic import write_json_atomic, write_text_atomic
from retrain.io.layout import (
    EVAL,
    EVAL_DIR,
    GENERATIONS,
    LATEST_SAMPLER,
    METRICS,
    PID,
    RUN_META,
    STEPS,
    eval_problems_name,
    eval_problems_step,
)
from retrain.io.log import JsonlLogger, encode_row, read_jsonl, truncate_jsonl
from retrain.training import faults
from retrain.training.integrity import seal
from retrain.training.interrupt import resume_command
from retrain.training.state import TrainerState, write_state
from retrain.training.telemetry import generation_rows, steps_row
from retrain.training.trackers.checkpoints import store_checkpoint
from retrain.training.trackers.fanout import Trackers
from retrain.training.trackers.select import open_trackers
from retrain.training.trackers.sink import ArtifactFolder, payload

if TYPE_CHECKING:
    from retrain.backends.protocol import TrainBackend
    from retrain.config.schema import TrainConfig
    from retrain.evaluation.evaluate import Evaluation
    from retrain.rollout.group import StepRollouts
    from retrain.training.flow import Flow


class CheckpointNotSaved(RuntimeError):
    """A checkpoint the backend failed to write (a full disk, most often: torch.save then says
    only "unexpected pos"); the message names it, the free space and the whole one before it."""

    @classmethod
    def of(cls, path: Path, previous: str, exc: Exception) -> CheckpointNotSaved:
        where = next((p for p in (path, *path.parents) if p.exists()), Path("."))
        free = shutil.disk_usage(where).free
        return cls(f"checkpoint {path} was not saved ({type(exc).__name__}: {exc}); {free / 1e6:.1f} MB free "
                   f"on its file system; the run's latest checkpoint is "
                   f"{previous + ', whole' if previous else 'none yet'}")


class RunLog:
    """The log directory of one run. `trackers` receive every row once `open_trackers` has
    started them; their steps are global (warmup steps first, then `warmup_steps + step`; the
    evaluation after N RL steps at `warmup_steps + N`, beside the next step's row)."""

    #: this process writes the run's files (a torchrun follower's log does not)
    writes = True

    def __init__(self, log_dir: str | Path, *, log_generations: bool = True, generations_per_prompt: int = 0,
                 warmup_steps: int = 0) -> None:
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics = JsonlLogger(self.dir / METRICS, flush_every=1)
        self.steps = JsonlLogger(self.dir / STEPS, flush_every=1)
        self.evals = JsonlLogger(self.dir / EVAL, flush_every=1)
        self.generations = JsonlLogger(self.dir / GENERATIONS, flush_every=32, flush_interval_s=1.0,
                                       enabled=log_generations)
        self.generations_per_prompt = generations_per_prompt
        self.warmup_steps = warmup_steps
        self.trackers = Trackers()
        self.artifacts = "off"  # [logging] checkpoint_artifacts, once the trackers are open
        self.artifact_meta: dict[str, Any] = {}
        self.warn: Callable[[str], None] = lambda message: None
        self.last_row: dict[str, Any] | None = None

    def open_trackers(self, config: TrainConfig, *, condition: str = "",
                      warn: Callable[[str], None] | None = None) -> None:
        """Start the trackers `config` selects; `warn` tells the console of a checkpoint a
        tracker did not store."""
        self.trackers = open_trackers(config, condition)
        self.artifacts = config.logging.checkpoint_artifacts
        self.artifact_meta = {"trainer": config.training.trainer, "backend": config.backend.backend,
                              "model": config.model.model, "save_every": config.training.save_every,
                              "log_dir": str(self.dir), "resume": resume_command(str(self.dir))}
        if warn is not None:
            self.warn = warn

    # -- one step --------------------------------------------------------------------------
    def record_warmup(self, row: Mapping[str, Any], step: int) -> None:
        self._metrics(row)
        self.trackers.log_row(payload(row), step)

    def record_step(self, row: dict[str, Any], rollouts: StepRollouts, step: int, *, correct: int,
                    total: int) -> None:
        self._metrics(row)
        self.trackers.log_row(payload(row), self.warmup_steps + step)
        self.steps.log(steps_row(row, correct, total))
        for g in rollouts.groups:
            self.generations.log_many(generation_rows(
                step, g.example.prompt, g.texts, g.rewards.tolist(), [len(x.token_ids) for x in g.completions],
                self.generations_per_prompt))
        self.last_row = row

    def record_eval(self, evaluation: Evaluation) -> dict[str, Any]:
        """The per-problem file first (atomically), then the eval.jsonl row that commits it."""
        row = evaluation.row.to_dict()
        step = evaluation.row.step
        write_text_atomic(self.dir / eval_problems_name(step),
                          "".join(encode_row(msgspec.to_builtins(p)) for p in evaluation.problems))
        self._append(self.evals, "mid_eval", row)
        self.trackers.log_row(payload(row, prefix=""), self.warmup_steps + step)
        return row

    def eval_rows(self) -> list[dict[str, Any]]:
        self.evals.flush()
        return read_jsonl(self.dir / EVAL)

    def _metrics(self, row: Mapping[str, Any]) -> None:
        self._append(self.metrics, "mid_metrics", row)

    def _append(self, logger: JsonlLogger, fault: str, row: Mapping[str, Any]) -> None:
        step = int(row.get("step", -1))
        if faults.armed(fault, step):
            line = encode_row(row)
            logger.flush()
            with open(logger.path, "a", encoding="utf-8") as f:
                f.write(line[: len(line) // 2])
                f.flush()
                os.fsync(f.fileno())
            faults.crash_if(fault, step)
        logger.log(row)

    # -- one checkpoint --------------------------------------------------------------------
    def checkpoint(self, backend: TrainBackend, flow: Flow | None, state: TrainerState, path: str | Path, *,
                   step: int, phase: str = "") -> str:
        """Save the backend under `path`, then the trainer state (the RL flow's controllers
        included; SFT has no flow) into the checkpoint, then its digests, then the state into
        the log directory, then `latest_sampler_path.txt`, then offer the checkpoint to the
        trackers. The logs are
        synced first, so a checkpoint never gets ahead of the rows it covers. `phase` is
        "warmup", "sft", or "" for an RL step (it names the fault points,
        retrain.training.faults.point)."""
        self.sync()
        try:
            saved = backend.save_checkpoint(str(path))
        except Exception as exc:
            raise CheckpointNotSaved.of(Path(path), state.checkpoint_path, exc) from exc
        faults.crash_if(faults.point(phase, "mid_checkpoint"), step)
        state.checkpoint_name, state.checkpoint_path = Path(path).name, saved
        if flow is not None:
            state.sepa, state.backpressure = flow.sepa.state(), flow.backpressure.state()
            if flow.environment is not None:
                state.environment = flow.environment.state()
        write_state(saved, state)  # the checkpoint is self-describing (step, data cursor, controllers)
        seal(saved)  # last: a checkpoint with digests is whole (retrain.training.integrity)
        self.finish_state(state)
        name = Path(path).name
        store_checkpoint(self.trackers, self.artifacts, ArtifactFolder(
            Path(saved), name, step + 1, step if phase else self.warmup_steps + step,
            {**self.artifact_meta, "checkpoint": name, "steps": step + 1, "phase": phase or "rl", "path": saved}),
            self.warn,
            resume=f"resume with: {self.artifact_meta.get('resume', '')}")
        faults.crash_if(faults.point(phase, "after_checkpoint"), step)
        return saved

    def finish_state(self, state: TrainerState) -> None:
        write_state(self.dir, state)
        if state.checkpoint_path:
            write_text_atomic(self.dir / LATEST_SAMPLER, state.checkpoint_path + "\n")

    # -- the run ---------------------------------------------------------------------------
    def write_pid(self) -> None:
        (self.dir / PID).write_text(f"{os.getpid()}\n", encoding="ascii")

    def clear_pid(self) -> None:
        try:
            (self.dir / PID).unlink()
        except FileNotFoundError:
            pass

    def truncate_after(self, step: int, phase: str) -> None:
        """Drop rows written after the checkpoint being resumed (and any torn line).

        Warmup rows carry phase "sft" and their own step counter; RL rows have no phase or
        phase "rl". While resuming RL every warmup row is kept. An evaluation's step counts
        RL steps done, so the one after RL step `step` (`step + 1`) is the last kept; none
        is kept before the first RL step (the trainer evaluates step 0 again)."""
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
        last_eval = step + 1 if phase == "rl" and step >= 0 else -1
        truncate_jsonl(self.dir / EVAL, lambda row: isinstance(row.get("step"), int) and row["step"] <= last_eval)
        folder = self.dir / EVAL_DIR
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            n = eval_problems_step(path.name)
            if n is not None and n > last_eval:
                path.unlink()

    def sync(self) -> None:
        """Flush and fsync every log."""
        for logger in (self.metrics, self.steps, self.generations, self.evals):
            logger.flush()
            logger.fsync_now()

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        write_json_atomic(self.dir / RUN_META, {**meta, "updated_at": time.time()})

    def close(self, exit_code: int = 0) -> None:
        for logger in (self.metrics, self.steps, self.generations, self.evals):
            logger.close()
        self.trackers.finish(exit_code)  # after the files: a tracker that fails to finish loses no row
