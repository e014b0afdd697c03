"""Starting or resuming a run in its log directory.

A fresh run refuses a log directory that already holds a run (nothing written is lost); a
resumed run reads trainer_state.json, drops log rows written after that checkpoint (so the
finished logs equal an uninterrupted run's) and continues from the next step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from retrain.config.schema import TrainConfig
from retrain.errors import RunStopped, UserError
from retrain.io.layout import METRICS
from retrain.training.log import RunLog
from retrain.training.meta import RunStatus
from retrain.training.state import STATE_FILE, TrainerState, read_state


class RunDirError(UserError, RuntimeError):
    """The log directory cannot be used as asked; the message says what to do."""


@dataclass
class Start:
    state: TrainerState
    checkpoint: str = ""  # checkpoint directory to load, "" when starting from the base model
    note: str = ""


def holds_run(log_dir: Path) -> bool:
    """A log directory that a fresh run must not write into: it has a state file or metrics."""
    metrics = log_dir / METRICS
    return (log_dir / STATE_FILE).exists() or (metrics.exists() and metrics.stat().st_size > 0)


def fresh_state(config: TrainConfig) -> TrainerState:
    t = config.training
    return TrainerState(phase="sft" if t.sft_warmup_steps > 0 or t.trainer == "sft" else "rl",
                        current_batch_size=t.batch_size, current_group_size=t.group_size)


def prepare(config: TrainConfig, log: RunLog) -> Start:
    log_dir = Path(config.logging.log_dir)
    resume = config.resume.from_
    if not resume:
        if holds_run(log_dir):
            raise RunDirError(
                f"{log_dir} already holds a run; resume it with --resume {log_dir}, or choose another "
                f"[logging] log_dir (--log-dir), or delete the folder")
        return Start(fresh_state(config))
    resume_dir = Path(resume)
    same = resume_dir.resolve() == log_dir.resolve()
    if not (resume_dir / STATE_FILE).exists():
        if same and resume_dir.is_dir():
            log.truncate_after(-1, "sft")
            return Start(fresh_state(config), note=f"{resume_dir} has no checkpoint yet: starting from step 0")
        raise RunDirError(f"--resume {resume}: no {STATE_FILE} there (pass the run's log_dir)")
    state = read_state(resume_dir)
    if state.finished:
        raise RunDirError(f"the run in {resume} already finished (checkpoint 'final'); nothing to resume")
    if not same and holds_run(log_dir):
        raise RunDirError(f"resuming {resume} into {log_dir}, which already holds another run")
    checkpoint = state.checkpoint_path
    if checkpoint and not Path(checkpoint).exists():
        candidate = resume_dir / checkpoint
        if not candidate.exists():
            raise RunDirError(f"checkpoint {checkpoint} recorded in {resume_dir / STATE_FILE} is missing")
        checkpoint = str(candidate)
    if same:
        log.truncate_after(state.sft_step if state.phase == "sft" else state.step, state.phase)
    where = f"warmup step {state.sft_step}" if state.phase == "sft" else f"step {state.step}"
    return Start(state, checkpoint, note=f"resuming from {checkpoint or 'the base model'} after {where}")


@contextlib.contextmanager
def running(config: TrainConfig, log: RunLog, status: RunStatus) -> Iterator[Start]:
    """Start or resume the run in `log`'s directory for the duration of the block: run.pid and
    a "running" run_meta.json while it runs; an exception that escapes closes the logs with
    exit code 1 and records run_meta.json "failed" with its type and message (an interrupt
    the run stopped at cleanly: "interrupted"). `status` writes through `log`."""
    start = prepare(config, log)
    log.write_pid()
    try:
        status.running()
        yield start
    except BaseException as exc:
        log.close(exit_code=exc.exit_code if isinstance(exc, RunStopped) else 1)
        status.ended_by(exc)
        raise
    finally:
        log.clear_pid()
