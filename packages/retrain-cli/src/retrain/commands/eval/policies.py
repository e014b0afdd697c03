"""Which policies `retrain eval` scores: the base model, an adapter folder, or a run's final
adapter (its latest checkpoint while it has not finished), or every checkpoint of a run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from retrain.errors import UserError
from retrain.io.layout import FINAL
from retrain.training.state import STATE_FILE, StateError, read_state

_CHECKPOINT = re.compile(r"^checkpoint_step_(\d+)$")


@dataclass(frozen=True)
class Policy:
    label: str
    path: str | None  # None: the base model
    rl_steps: int | None  # RL steps the policy took, when its name or the run says


def rl_steps_of(folder: Path) -> int | None:
    match = _CHECKPOINT.match(folder.name)
    return int(match[1]) if match else None


def _latest(log_dir: Path) -> tuple[Path, int | None]:
    if not (log_dir / STATE_FILE).is_file():
        raise UserError(f"{log_dir} holds no {STATE_FILE}: the run has no checkpoint to evaluate yet",
                        hint="pass the run's log_dir, or an adapter folder with --adapter")
    try:
        state = read_state(log_dir)
    except StateError as exc:
        raise UserError(str(exc)) from None
    recorded = Path(state.checkpoint_path)
    # adapter paths are recorded as the run wrote them (often relative to its working folder)
    for candidate in (recorded, log_dir / recorded):
        if state.checkpoint_path and candidate.is_dir():
            return candidate, state.step + 1 if state.finished else rl_steps_of(candidate)
    raise UserError(f"checkpoint {state.checkpoint_path!r} recorded in {log_dir / STATE_FILE} is missing",
                    hint="run retrain eval from the folder the run ran in, or pass --adapter DIR")


def select(adapter: str | None, run: str | None, all_checkpoints: bool) -> list[Policy]:
    if adapter and run:
        raise UserError("--adapter and --run are exclusive", hint="one adapter folder, or one run's log_dir")
    if all_checkpoints and not run:
        raise UserError("--all-checkpoints needs --run LOG_DIR")
    if adapter:
        folder = Path(adapter)
        if not folder.is_dir():
            raise UserError(f"--adapter {adapter}: no such folder")
        return [Policy(str(folder), str(folder), rl_steps_of(folder))]
    if not run:
        return [Policy("base", None, 0)]
    log_dir = Path(run)
    if not log_dir.is_dir():
        raise UserError(f"--run {run}: no such folder")
    latest, steps = _latest(log_dir)
    if not all_checkpoints:
        return [Policy(latest.name, str(latest), steps)]
    found = sorted((n, p) for p in latest.parent.iterdir() if p.is_dir() and (n := rl_steps_of(p)) is not None)
    policies = [Policy(p.name, str(p), n) for n, p in found]
    final = latest.parent / FINAL
    if final.is_dir():
        policies.append(Policy(FINAL, str(final), steps if latest == final else None))
    return policies
