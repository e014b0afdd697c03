"""Starting or resuming a run in its log directory and its adapter folder.

A fresh run refuses a log directory that already holds a run (nothing written is lost); a
resumed run reads trainer_state.json, drops log rows written after that checkpoint (so the
finished logs equal an uninterrupted run's) and continues from the next step.

A run owns its adapter folder (`[backend] adapter_path`): `run_owner.json` there names the log
directory of the run whose checkpoints it holds. Another run given that folder is refused by
name while the owner's log directory exists; the owner resuming (into its own folder or, with
--resume, into another log directory, which then owns it) goes on. A folder with
checkpoints and no record (written before records were kept) is refused to a fresh run and
adopted by a resumed one. The record is created with an exclusive link, so of two runs that
start at once with one folder, one is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from retrain.config.folders import adapter_folder
from retrain.config.schema import TrainConfig
from retrain.errors import RunStopped, UserError
from retrain.io.atomic import write_json_atomic
from retrain.io.layout import ADAPTER_OWNER, FINAL, METRICS
from retrain.training.integrity import damage, newest_good
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
    keep: tuple[int, str] | None = None  # (step, phase): log rows after it are dropped; None keeps all


def holds_run(log_dir: Path) -> bool:
    """A log directory that a fresh run must not write into: it has a state file or metrics."""
    metrics = log_dir / METRICS
    return (log_dir / STATE_FILE).exists() or (metrics.exists() and metrics.stat().st_size > 0)


def _checkpoints_in(folder: Path) -> list[str]:
    """The names of the checkpoints and final weights a run left in `folder`."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and (
        p.name == FINAL or p.name.startswith(("checkpoint_step_", "warmup_step_"))))


def _owner_of(folder: Path) -> Path | None:
    """The log directory `run_owner.json` in `folder` names, or None without one."""
    record = folder / ADAPTER_OWNER
    try:
        return Path(json.loads(record.read_text())["log_dir"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunDirError(f"{record} cannot be read ({exc}); it names the run that owns {folder}",
                          hint="restore it, or delete it if no other run saves there") from None


def _write_owner(folder: Path, log_dir: Path, *, replace: bool) -> bool:
    """Record `log_dir` as the folder's owner; False when another run created the record first
    (`replace` False: the record is linked into place only if none exists)."""
    record = {"log_dir": str(log_dir), "host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}
    if replace:
        write_json_atomic(folder / ADAPTER_OWNER, record)
        return True
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{ADAPTER_OWNER}.{os.getpid()}.tmp"
    write_json_atomic(tmp, record)
    try:
        os.link(tmp, folder / ADAPTER_OWNER)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: an exclusive create, written in place
        try:
            fd = os.open(folder / ADAPTER_OWNER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(tmp.read_bytes())
            os.fsync(f.fileno())
        return True
    finally:
        tmp.unlink(missing_ok=True)


def claim_adapters(config: TrainConfig, resumed_from: Path | None, *, write: bool = True) -> str:
    """Make this run the owner of its adapter folder, or raise RunDirError naming the run that
    owns it; a note when the folder changed hands. `resumed_from` is the --resume folder;
    `write` False checks without recording (the other ranks of a torchrun world)."""
    folder = adapter_folder(config)
    me = Path(config.logging.log_dir).resolve()
    for _ in range(2):  # a second pass reads the record a run that started at once just made
        owner = _owner_of(folder)
        if owner is None:
            found = _checkpoints_in(folder)
            if found and resumed_from is None:
                raise RunDirError(
                    f"[backend] adapter_path {folder} holds checkpoints of another run ({', '.join(found[:3])}"
                    f"{', ...' if len(found) > 3 else ''}) and no record of which; a new run would overwrite them",
                    hint="give this run its own adapter_path, or leave it unset (it then saves under "
                         "<log_dir>/adapters); delete the folder if those checkpoints are not needed")
            if not write or _write_owner(folder, me, replace=False):
                return ""
            continue
        if owner == me:
            return ""
        if resumed_from is not None and owner == resumed_from.resolve():
            if write:
                _write_owner(folder, me, replace=True)
            return f"{folder} now belongs to this run's log directory {me} (was {owner})"
        # the owner's log directory exists from before its claim (RunLog makes it), so a run
        # still loading its model holds the folder as firmly as one that has trained
        if owner.exists():
            raise RunDirError(
                f"[backend] adapter_path {folder} belongs to the run in {owner} ({ADAPTER_OWNER}); "
                "a second run there would overwrite its checkpoints",
                hint=f"give this run its own adapter_path, or leave it unset (it then saves under <log_dir>/adapters); "
                     f"to continue that run: --resume {owner}")
        if write:
            _write_owner(folder, me, replace=True)
        return f"{folder} was owned by {owner}, which is gone; this run takes it over"
    raise RunDirError(f"{folder / ADAPTER_OWNER} changed while it was read; start the run again")


def fresh_state(config: TrainConfig) -> TrainerState:
    t = config.training
    return TrainerState(phase="sft" if t.sft_warmup_steps > 0 or t.trainer == "sft" else "rl",
                        current_batch_size=t.batch_size, current_group_size=t.group_size)


def prepare(config: TrainConfig) -> Start:
    """Where the run starts: the state and checkpoint to load, and the log rows to drop
    (`Start.keep`); writes nothing."""
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
            return Start(fresh_state(config), note=f"{resume_dir} has no checkpoint yet: starting from step 0",
                         keep=(-1, "sft"))
        raise RunDirError(f"--resume {resume}: no {STATE_FILE} there (pass the run's log_dir)")
    state = read_state(resume_dir)
    if state.finished:
        raise RunDirError(f"the run in {resume} already finished (checkpoint 'final'); nothing to resume")
    if not same and holds_run(log_dir):
        raise RunDirError(f"resuming {resume} into {log_dir}, which already holds another run")
    checkpoint, note = state.checkpoint_path, ""
    if checkpoint and not Path(checkpoint).exists() and (resume_dir / checkpoint).exists():
        checkpoint = str(resume_dir / checkpoint)
    if checkpoint and "://" not in checkpoint and (found := damage(checkpoint)):
        state, checkpoint, note = _fall_back(Path(checkpoint), state, found, resume_dir)
    where = f"warmup step {state.sft_step}" if state.phase == "sft" else f"step {state.step}"
    note += f"resuming from {checkpoint or 'the base model'} after {where}"
    return Start(state, checkpoint, note=note, keep=progress_of(state) if same else None)


def progress_of(state: TrainerState) -> tuple[int, str]:
    """The last step a checkpoint covers, and its phase: the log rows a resume keeps."""
    return (state.sft_step if state.phase == "sft" else state.step), state.phase


def _fall_back(damaged: Path, state: TrainerState, found: list[str],
               resume_dir: Path) -> tuple[TrainerState, str, str]:
    """The newest whole checkpoint before a damaged one: (its state, its path, what to say)."""
    what = f"checkpoint {damaged} is " + (f"damaged ({'; '.join(found)})" if damaged.is_dir() else "missing")
    fallback = newest_good(damaged, state)
    if fallback is None:
        raise RunDirError(f"{what}, and no earlier checkpoint beside it is whole",
                          hint=f"restore the files, or delete {resume_dir} to start the run again")
    return fallback.state, str(fallback.path), f"{what}; falling back to {fallback.path.name}, the newest whole one: "


@contextlib.contextmanager
def running(config: TrainConfig, log: RunLog, status: RunStatus) -> Iterator[Start]:
    """Start or resume the run in `log`'s directory for the duration of the block: run.pid and
    a "running" run_meta.json while it runs; an exception that escapes closes the logs with
    exit code 1 and records run_meta.json "failed" with its type and message (an interrupt
    the run stopped at cleanly: "interrupted"). `status` writes through `log`."""
    start = prepare(config)
    resumed_from = Path(config.resume.from_) if config.resume.from_ else None
    handed = claim_adapters(config, resumed_from, write=log.writes)
    if handed:
        start.note = f"{start.note}; {handed}" if start.note else handed
    if start.keep is not None:
        log.truncate_after(*start.keep)
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
