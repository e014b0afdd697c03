"""A run that trained nothing says so: the closing summary and `retrain status` name the RL steps
that made no update when they are all or most of the run, with the cause the steps show."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.training.console import summary_lines
from retrain.training.idle import IdleSteps
from retrain.training.state import TrainerState, read_state, write_state


def tally(*steps: tuple[bool, bool, int, int]) -> IdleSteps:
    idle = IdleSteps()
    for updated, tied, correct, total in steps:
        idle.add(updated=updated, tied=tied, correct=correct, total=total)
    return idle


def test_a_run_whose_steps_mostly_trained_has_no_verdict() -> None:
    assert IdleSteps().verdict() is None
    # half the steps idle is not most of them
    assert tally((True, False, 3, 8), (False, True, 0, 8)).verdict() is None


def test_no_step_trained_and_nothing_was_correct_is_a_sparse_reward() -> None:
    idle = tally(*[(False, True, 0, 128)] * 40)
    verdict = idle.verdict()
    assert verdict is not None and verdict.startswith("no RL step trained: ")
    assert "none scored as correct" in verdict and "too sparse" in verdict
    assert "sft_warmup_steps" in idle.remedy() and "top_p = 1.0" in idle.remedy()


def test_most_steps_idle_counts_them() -> None:
    idle = tally((True, False, 5, 128), *[(False, True, 0, 128)] * 39)
    assert idle.trained == 1
    assert (idle.verdict() or "").startswith("39 of 40 RL steps trained nothing: ")


def test_the_cause_follows_what_the_idle_steps_show() -> None:
    assert "too easy" in (tally(*[(False, True, 8, 8)] * 3).verdict() or "")
    assert "[data] difficulty" in tally(*[(False, True, 8, 8)] * 3).remedy()
    assert "each group scored one reward" in (tally(*[(False, True, 4, 8)] * 3).verdict() or "")
    masked = tally(*[(False, False, 4, 8)] * 3)
    assert "masked out of the loss" in (masked.verdict() or "")
    assert "mask_truncated_completions = false" in masked.remedy()


def test_the_count_survives_a_resume(tmp_path: Path) -> None:
    state = TrainerState()
    state.idle.add(updated=False, tied=True, correct=0, total=8)
    write_state(tmp_path, state)
    assert read_state(tmp_path).idle == state.idle


@pytest.mark.parametrize(("updates", "head"), [(0, "Run complete, nothing trained: "), (3, "Training complete: ")])
def test_the_summary_headline_and_warning(updates: int, head: str) -> None:
    summary = {"condition": "c", "steps": 4, "updates": updates}
    if updates == 0:
        summary.update({"untrained": "no RL step trained: why", "untrained_remedy": "what helps"})
    lines = summary_lines(summary)
    assert lines[0].startswith(head)
    assert ("  warning: no RL step trained: why" in lines) == (updates == 0)
    assert ("  what gives a group rewards that differ: what helps" in lines) == (updates == 0)


def test_steps_whose_reward_failed_are_blamed_on_the_reward_not_on_sparsity() -> None:
    idle = IdleSteps()
    idle.add(updated=True, tied=False, correct=3, total=8)
    for _ in range(3):  # the judge went down: every completion failed to score, every group tied at 0
        idle.add(updated=False, tied=True, correct=0, total=8, failed=8,
                 fault="a judge that could not be reached: HTTP 503 from http://127.0.0.1:9/v1/chat/completions")
    verdict = idle.verdict() or ""
    assert verdict.startswith("3 of 4 RL steps trained nothing: the reward failed on most completions")
    assert "HTTP 503" in verdict and "too sparse" not in verdict
    assert "reward_errors.log" in idle.remedy()
    assert idle.scored == 8 and idle.unscored == 24 and not idle.never_scored


def test_a_run_that_scored_nothing_is_told_apart() -> None:
    idle = IdleSteps()
    idle.add(updated=False, tied=True, correct=0, total=8, failed=8, fault="a judge that did not answer")
    assert idle.never_scored
    idle.add(updated=False, tied=True, correct=0, total=8, failed=7)
    assert not idle.never_scored and idle.fault == "a judge that did not answer"
    assert not IdleSteps().never_scored
