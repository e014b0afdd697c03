"""RL steps that trained nothing, and why: a step whose tokens all have a zero advantage makes
no update (retrain.training.step.train_on), and that happens when every group of the step tied
(the same reward for each of its completions; retrain.training.signals.group_disposition).

A run in which no step, or most steps, made an update is not a run that trained, whatever its
exit status; `IdleSteps` counts them in the trainer state (so a resumed run counts the whole
run); `verdict` says so in one line with the likely cause, and `remedy` what gives a group
rewards that differ, for the closing summary (retrain.training.console) and `retrain status`.

A completion the reward failed to score (it raised, overran, returned no number: a judge that
was down) scores 0, so a step whose reward failed on most of its completions ties at 0 like a
step of a sparse reward; the failures are counted here too, and such steps are blamed on the
reward's failure (the last one's line kept in `fault`), never on sparsity. A run whose reward
scored none of its completions (`never_scored`) is stopped as the reward-fault budget stops one
(retrain.training.reward_faults): whatever its length, it learned nothing from its reward.
"""

from __future__ import annotations

import msgspec

SPARSE = ("every group's completions tied, and none scored as correct: the reward is too sparse for the "
          "policy as it starts RL")
SPARSE_REMEDY = ("a longer supervised warmup ([training] sft_warmup_steps), partial credit ([reward] type = "
                 "\"partial\"), a larger group_size, or freer sampling (temperature, top_p = 1.0)")
EASY = "every group's completions tied, all correct: the problems are too easy for the policy"
EASY_REMEDY = "harder problems ([data] difficulty, or another source)"
TIED = "every group's completions tied (each group scored one reward)"
MASKED = ("the groups whose rewards differed left no token with a non-zero advantage (masked out of the "
          "loss, as mask_truncated_completions does to completions cut at max_tokens, or zeroed by the "
          "transform)")
MASKED_REMEDY = "a larger max_tokens, mask_truncated_completions = false, or transform_mode = \"none\""
FAILED = "the reward failed on most completions of those steps, and a completion it fails on scores 0"
FAILED_REMEDY = ("fix the reward: its failures are in <log_dir>/reward_errors.log ([reward] max_error_share and "
                 "max_error_steps stop a run whose reward keeps failing)")


class IdleSteps(msgspec.Struct, kw_only=True):
    """RL steps done, and of them those that made no update, by the cause the step shows."""

    steps: int = 0
    idle: int = 0
    none_correct: int = 0  # idle, every group tied, no completion scored as correct
    all_correct: int = 0  # idle, every group tied, every completion scored as correct
    tied: int = 0  # idle, every group tied (the two above included)
    faulty: int = 0  # idle, the reward failed on at least half of the step's completions
    scored: int = 0  # completions the reward scored, over the run
    unscored: int = 0  # completions the reward failed to score, over the run
    fault: str = ""  # the line of the reward's latest failure

    def add(self, *, updated: bool, tied: bool, correct: int, total: int, failed: int = 0, fault: str = "") -> None:
        """One RL step: whether it updated the policy, whether every group of it tied, how
        many of its `total` completions scored as correct, how many the reward failed to
        score, and its latest failure's line."""
        self.steps += 1
        self.scored += total - failed
        self.unscored += failed
        self.fault = fault or self.fault
        if updated:
            return
        self.idle += 1
        self.faulty += int(total > 0 and 2 * failed >= total)
        if tied:
            self.tied += 1
            self.none_correct += int(total > 0 and correct == 0)
            self.all_correct += int(total > 0 and correct == total)

    @property
    def trained(self) -> int:
        return self.steps - self.idle

    @property
    def never_scored(self) -> bool:
        """The reward failed on every completion of the run so far."""
        return self.unscored > 0 and self.scored == 0

    def verdict(self) -> str | None:
        """None when most RL steps updated the policy; else how many did not, and why."""
        if self.steps == 0 or 2 * self.idle <= self.steps:
            return None
        head = ("no RL step trained" if self.trained == 0
                else f"{self.idle} of {self.steps} RL steps trained nothing")
        return f"{head}: {self._cause()[0]}"

    def remedy(self) -> str:
        """What gives a group rewards that differ, for the cause `verdict` names."""
        return self._cause()[1]

    def _cause(self) -> tuple[str, str]:
        if 2 * self.faulty > self.idle:
            return FAILED + (f" (the last: {self.fault})" if self.fault else ""), FAILED_REMEDY
        if 2 * self.tied <= self.idle:
            return MASKED, MASKED_REMEDY
        if 2 * self.none_correct > self.idle:
            return SPARSE, SPARSE_REMEDY
        if 2 * self.all_correct > self.idle:
            return EASY, EASY_REMEDY
        return TIED, SPARSE_REMEDY
