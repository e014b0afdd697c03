"""The end-of-run summary compares the first and last steps only over windows that share no
step: a 6-step run compares 3 with 3, a 1-step run states one mean."""

from __future__ import annotations

import pytest

from retrain.training.console import summary_lines
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
