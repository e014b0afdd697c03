"""The end-of-run summary compares the first and last steps only over windows that share no
step: a 6-step run compares 3 with 3, a 1-step run states one mean. Every count reads as
English for any number: "1 RL step", "first RL step", "3 RL steps"."""

from __future__ import annotations

import pytest

from retrain.training.console import eval_line, summary_lines
from retrain.training.state import RewardWindow


@pytest.mark.parametrize(("steps", "n"), [(2, 1), (6, 3), (19, 9), (20, 10), (400, 10)])
def test_windows_never_overlap(steps: int, n: int) -> None:
    window = RewardWindow()
    for step in range(steps):
        window.add(float(step))
    halves = window.halves()
    assert halves is not None
    got_n, first, last = halves
    assert got_n == n and 2 * got_n <= steps
    assert first == sum(range(n)) / n and last == sum(range(steps - n, steps)) / n


def test_one_step_states_one_mean() -> None:
    window = RewardWindow()
    window.add(0.25)
    assert window.halves() is None and window.mean() == 0.25
    lines = summary_lines({"condition": "c", "steps": 1, "mean_reward": 0.25})
    assert "  mean reward over the run: 0.250" in lines and not any("first" in line for line in lines)


def test_six_steps_compare_three_with_three() -> None:
    lines = summary_lines({"condition": "c", "steps": 6, "window": 3, "first_reward": 0.1, "last_reward": 0.4})
    assert "  mean reward, first 3 RL steps: 0.100" in lines
    assert "  mean reward, last 3 RL steps:  0.400  (+0.300)" in lines


def test_counts_of_one_read_singular() -> None:
    """A 3-step run compares its first step with its last, evaluated once after 1 step."""
    row = {"step": 1, "eval/k": 1, "eval/pass@1": 0.5, "eval/mean_reward": 0.5, "eval/examples": 1,
           "eval/wall_s": 0.2}
    lines = summary_lines({"condition": "c", "steps": 3, "window": 1, "first_reward": 0.1, "last_reward": 0.4,
                           "eval_first": {**row, "step": 0}, "eval_last": row, "updates": 3})
    assert lines[0] == "Training complete: c, 3 RL steps in 0.0s"
    assert "  mean reward, first RL step: 0.100" in lines
    assert "  mean reward, last RL step:  0.400  (+0.300)" in lines
    assert "  held-out (1 problem), after 0 RL steps: pass@1=0.500" in lines
    assert "  held-out (1 problem), after 1 RL step: pass@1=0.500  (pass@1 +0.000)" in lines
    assert eval_line(row) == "eval after 1 RL step: pass@1=0.500 reward=0.500 (1 held-out problem, 0.2s)"
    assert summary_lines({"condition": "c", "steps": 1, "mean_reward": 0.25})[0] == "Training complete: c, 1 RL step in 0.0s"
    sft = summary_lines({"condition": "sft", "steps": 2, "unit": "SFT steps", "window": 1, "first_loss": 2.0,
                         "last_loss": 1.0})
    assert sft == ["Training complete: sft, 2 SFT steps in 0.0s", "  mean loss, first step: 2.0000",
                   "  mean loss, last step:  1.0000"]
