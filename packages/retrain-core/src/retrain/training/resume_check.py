"""Preflight of a resume: can `retrain --resume LOGDIR` continue this run, and from where?

Checks the log directory, trainer_state.json, the checkpoint it names (complete: weights,
optimizer, RNG streams, metadata; for a backend whose service keeps the weights, the record its
definition names, checked by that backend; every file as its digests recorded it,
retrain.training.integrity), the steps left, log rows that a resume will drop, and whether the
run is still alive. A damaged or missing checkpoint names the one a resume falls back to (the
newest whole one before it), or is an error when there is none. Issues carry a code, a
severity and a message.

Given the config the resume will run with, the checks use its `max_steps` (else the one
recorded in run_meta.json) and its `log_dir`, where the resumed run writes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.io.layout import CHECKPOINT_DIGESTS, METRICS, PID, RUN_META
from retrain.io.log import read_jsonl
from retrain.training.integrity import damage, newest_good
from retrain.training.rundir import holds_run
from retrain.training.state import STATE_FILE, StateError, TrainerState, read_state

CHECKPOINT_FILES = ("checkpoint.json", "optimizer.pt", "rng.pt")


@dataclass
class Check:
    path: str
    ok: bool = True
    facts: dict[str, Any] = field(default_factory=dict)
    issues: list[dict[str, str]] = field(default_factory=list)

    def add(self, severity: str, code: str, message: str) -> None:
        self.issues.append({"severity": severity, "code": code, "message": message})
        if severity == "error":
            self.ok = False

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok, **self.facts, "issues": self.issues}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_resume(log_dir: str | Path, *, max_steps: int | None = None, config: TrainConfig | None = None) -> Check:
    """Steps in order; one that finds nothing to resume from ends the check."""
    d = Path(log_dir)
    result = Check(str(d))
    if config is not None:
        result.facts["trainer"] = config.training.trainer
        if max_steps is None:
            max_steps = config.training.max_steps
    if not _check_dir(result, d):
        return result
    _check_alive(result, d)
    if max_steps is None:
        max_steps = _recorded_max_steps(d)
    if config is not None:
        _check_target(result, d, Path(config.logging.log_dir))
    if not (d / STATE_FILE).exists():
        _check_unstarted(result, d)
        return result
    try:
        state = read_state(d)
    except StateError as exc:
        result.add("error", "trainer_state_invalid", str(exc))
        return result
    phase_step = state.sft_step if state.phase == "sft" else state.step
    result.facts.update({"phase": state.phase, "step": phase_step, "next_step": phase_step + 1,
                         "max_steps": max_steps, "checkpoint": state.checkpoint_name or None,
                         "resume_mode": state.resume_mode, "resume_warning": state.resume_warning})
    if state.finished:
        result.add("error", "run_finished", "the run finished (checkpoint 'final'); nothing to resume")
        return result
    if max_steps is not None and state.phase == "rl" and state.step + 1 >= max_steps:
        result.add("error", "resume_beyond_max_steps", f"step {state.step} was the last of {max_steps}")
    fallback = _check_checkpoint(result, d, state)
    if fallback is not None:
        state, phase_step = fallback, (fallback.sft_step if fallback.phase == "sft" else fallback.step)
        result.facts.update({"step": phase_step, "next_step": phase_step + 1, "phase": state.phase})
    _check_later_rows(result, d, state.phase, phase_step)
    return result


def _check_dir(result: Check, d: Path) -> bool:
    if not d.exists():
        result.add("error", "resume_dir_missing", f"{d} does not exist")
        return False
    if not d.is_dir():
        result.add("error", "resume_dir_not_directory", f"{d} is not a directory")
        return False
    return True


def _check_alive(result: Check, d: Path) -> None:
    pid_file = d / PID
    if not pid_file.exists():
        return
    try:
        pid = int(pid_file.read_text().strip())
    except ValueError:
        pid = -1
    if pid > 0 and _alive(pid):
        result.add("error", "run_alive", f"the run is still running (pid {pid}); stop it before resuming")


def _recorded_max_steps(d: Path) -> int | None:
    """max_steps as run_meta.json recorded it, or None."""
    try:
        meta = json.loads((d / RUN_META).read_text())
        return int(meta["config"]["max_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check_unstarted(result: Check, d: Path) -> None:
    """No trainer state: a resume starts over, replacing what was logged (if anything was)."""
    rows = read_jsonl(d / METRICS)
    result.facts.update({"next_step": 0, "checkpoint": None})
    if rows:
        result.add("warning", "no_checkpoint",
                   f"no checkpoint yet: a resume starts over and replaces {len(rows)} logged rows")
    else:
        result.add("error", "trainer_state_missing", f"{STATE_FILE} not found and nothing logged")


def _check_checkpoint(result: Check, d: Path, state: TrainerState) -> TrainerState | None:
    """The recorded checkpoint: a remote one is not checked, a local one must be complete and
    match its digests; a damaged or missing one names the checkpoint a resume falls back to.
    The state of that fallback, or None when the resume starts from the recorded one."""
    ref = state.checkpoint_path
    if not ref:
        result.add("warning", "checkpoint_ref_missing", "no checkpoint recorded; a resume starts from the base model")
        return None
    if "://" in ref:
        result.add("warning", "remote_checkpoint_unverified", f"{ref} is remote and was not checked")
        return None
    path = Path(ref) if Path(ref).exists() else d / ref
    if not path.exists():
        return _fallback(result, Path(ref), state, "checkpoint_missing", f"checkpoint {ref} does not exist")
    result.facts["checkpoint_path"] = str(path)
    if (record := _record_checker(path)) is not None:
        found = record(path)
        result.facts.update(found.facts)
        for level, code, message in found.findings:
            result.add(level, code, message)
    else:
        missing = [f for f in CHECKPOINT_FILES if not (path / f).exists()]
        weights = _has_weights(path)
        if missing or not weights:
            result.add("error", "checkpoint_incomplete",
                       f"checkpoint {path} lacks {', '.join(missing + ([] if weights else ['weights']))}")
    if found_damage := damage(path):
        return _fallback(result, path, state, "checkpoint_damaged",
                         f"checkpoint {path} is damaged: {'; '.join(found_damage)}")
    sealed = (path / CHECKPOINT_DIGESTS).exists()
    result.facts["digests"] = "verified" if sealed else "none"
    if not sealed:
        result.add("info", "checkpoint_without_digests",
                   f"{path} has no {CHECKPOINT_DIGESTS} (written before checkpoints carried digests): "
                   "its files were checked by form only")
    return None


def _fallback(result: Check, path: Path, state: TrainerState, code: str, what: str) -> TrainerState | None:
    """A warning naming the checkpoint a resume falls back to, or an error when there is none."""
    fallback = newest_good(path, state)
    if fallback is None:
        result.add("error", code, f"{what}; no earlier checkpoint beside it is whole")
        return None
    result.facts["fallback_checkpoint"] = str(fallback.path)
    result.add("warning", code, f"{what}; a resume falls back to {fallback.path.name}, the newest whole checkpoint, "
                                "and trains the steps after it again")
    return fallback.state


def _check_later_rows(result: Check, d: Path, phase: str, phase_step: int) -> None:
    rows = read_jsonl(d / METRICS)
    later = [r for r in rows if r.get("phase", "rl") == phase and isinstance(r.get("step"), int)
             and r["step"] > phase_step]
    if later:
        result.add("info", "rows_after_checkpoint",
                   f"{len(later)} logged rows after the checkpoint will be dropped and recomputed")


def _record_checker(path: Path) -> Any:
    """The `check_record` of the installed backend whose checkpoint record `path` holds, or None."""
    from retrain.backends.catalog import all_entries
    from retrain.registry.core import load_target

    for entry in all_entries():
        d = entry.definition
        if entry.installed and d.checkpoint_record and d.check_record and (path / d.checkpoint_record).exists():
            return load_target(d.check_record, entry.name)
    return None


def _has_weights(checkpoint: Path) -> bool:
    """safetensors weights at the top level (an adapter or a full model), or under the
    `adapter/` or `model/` folder of a retrain 0.1.0 checkpoint."""
    return any(any(folder.glob("*.safetensors")) for folder in (checkpoint, checkpoint / "adapter", checkpoint / "model")
               if folder.is_dir())


def _check_target(result: Check, d: Path, target: Path) -> None:
    """The resumed run writes into the config's log_dir; elsewhere than `d`, it must be free."""
    result.facts["log_dir"] = str(target)
    if target.resolve() == d.resolve():
        return
    if holds_run(target):
        result.add("error", "resume_target_holds_run",
                   f"the config's log_dir {target} holds another run; the resumed run would write there")
    else:
        result.add("info", "resume_into_other_log_dir", f"the resumed run will write its logs to {target}, not {d}")
