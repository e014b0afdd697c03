"""Reward failures, loud and bounded.

A reward that raises, overruns or returns no number scores 0 for that completion and is
counted (`retrain.rewards.bounded`); the run goes on, since one bad completion must not kill
hours of training. What must not happen is a run that trains on zeros for hours because the
reward function has a typo. So:

- the first failure of each kind (exception type and where it was raised) is printed once,
  as one line, and its full traceback appended to `reward_errors.log` in the log directory;
- the step line shows the failure count when it is non-zero (`retrain.training.console`);
- when at least `[reward] max_error_share` of a step's completions fail for
  `[reward] max_error_steps` steps in a row, the run saves a checkpoint and stops with
  `RewardErrorBudget` (exit status 3), naming the fault;
- a run shorter than that whose reward scored none of its completions (every one failed: a
  judge that was down from the start) ends the same way at its last step, exit status 3, and
  not as a run that completed and trained nothing: the reward, not the data, is at fault.
  `max_error_steps = 0` switches both stops off; the closing verdict still names the failure
  (retrain.training.idle).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from retrain.errors import RunStopped
from retrain.io.layout import REWARD_ERRORS
from retrain.rewards.types import RewardFault
from retrain.training.idle import IdleSteps


class RewardErrorBudget(RunStopped):
    """Too many completions failed to score for too many steps in a row."""


class RewardFaults:
    def __init__(self, log_dir: str | Path | None, max_share: float, max_steps: int,
                 report: Callable[[str], None]) -> None:
        """`log_dir` None: a process that does not write the run's files (torchrun ranks > 0)."""
        self.path = Path(log_dir) / REWARD_ERRORS if log_dir is not None else None
        self.max_share, self.max_steps, self.report = max_share, max_steps, report
        self.seen: dict[str, RewardFault] = {}
        self.streak = 0

    def observe(self, step: int, faults: Sequence[RewardFault], failed: int, completions: int) -> bool:
        """Record step `step`'s failures; True when the budget is spent (the caller stops)."""
        self.announce(faults, f"step {step}")
        heavy = completions > 0 and failed / completions >= self.max_share
        self.streak = self.streak + 1 if heavy else 0
        return self.max_steps > 0 and self.streak >= self.max_steps

    def announce(self, faults: Sequence[RewardFault], when: str) -> None:
        """Print and log each fault of a kind not seen before; `when` says where it happened
        ("step 3", "eval after 0 RL steps"). Evaluation's faults come here too, but only
        training steps count toward the budget."""
        for fault in faults:
            if fault.kind in self.seen:
                continue
            self.seen[fault.kind] = fault
            self._append(when, fault)
            where = f"  [traceback: {self.path}]" if fault.traceback and self.path is not None else ""
            self.report(f"reward failed (first of its kind, {when}): {fault.line()}{where}")

    def budget_error(self, failed: int, completions: int, saved: str, resume_hint: str) -> RewardErrorBudget:
        latest = next(reversed(self.seen.values()), None)
        cause = f": {latest.line()}" if latest is not None else ""
        return RewardErrorBudget(
            f"the reward failed on {failed} of {completions} completions for {self.streak} steps in a row "
            f"([reward] max_error_share = {self.max_share:g}, max_error_steps = {self.max_steps}){cause}"
            + (f"; tracebacks in {self.path}" if self.path is not None else "") + f"; checkpoint saved: {saved}",
            hint=f"fix the reward, then {resume_hint}")

    def never_scored_error(self, idle: IdleSteps, saved: str) -> RewardErrorBudget:
        latest = next(reversed(self.seen.values()), None)
        cause = latest.line() if latest is not None else idle.fault or "it failed on every one"
        return RewardErrorBudget(
            f"the reward scored none of the run's {idle.unscored} completions ({idle.steps} RL steps): {cause}"
            + (f"; failures logged in {self.path}" if self.path is not None else "") + f"; checkpoint saved: {saved}",
            hint="fix the reward (or the judge's endpoint), then run again: nothing was learned from it")

    def _append(self, when: str, fault: RewardFault) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(f"== {when}, {time.strftime('%Y-%m-%d %H:%M:%S')}: {fault.kind}\n")
            out.write((fault.traceback or fault.line()).rstrip("\n") + "\n\n")
