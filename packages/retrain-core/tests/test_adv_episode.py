"""Episode-level advantages and REINFORCE++ batch normalisation (spec algorithms.md §2)."""

import numpy as np
import pytest

from retrain.advantages.episode import batch_normalize, grpo, maxrl, reinforce_pp


def close(actual, expected, tol=1e-6):
    assert np.asarray(actual).tolist() == pytest.approx(expected, abs=tol)


def test_grpo_worked_example():
    close(grpo([1, 0, 0, 0]), [0.75, -0.25, -0.25, -0.25])


def test_grpo_edges():
    assert grpo([]).tolist() == []
    assert grpo([3.0]).tolist() == [0.0]
    # Identical non-binary rewards give exact zeros, not float noise (-1.39e-17 in the reference).
    assert grpo([0.1, 0.1, 0.1]).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([1, 0, 0, 0], [2.999988, -0.999996, -0.999996, -0.999996]),
        ([1, 1, 1, 0], [0.333333, 0.333333, 0.333333, -0.999999]),
        ([-1, 0], [0.0, 0.0]),
        ([0.5, 0], [0.999996, -0.999996]),
    ],
)
def test_maxrl_worked_examples(rewards, expected):
    close(maxrl(rewards), expected)


def test_reinforce_pp_group_step_is_grpo():
    close(reinforce_pp([1, 0, 0, 0]), [0.75, -0.25, -0.25, -0.25])


def test_batch_normalize_worked_example():
    rows, metrics = batch_normalize(
        [np.array([0, 0, 0.75, 0.75]), np.array([0, -0.25, -0.25]), np.array([0, 0])]
    )
    close(rows[0], [0, 0, 0.99999998, 0.99999998], 1e-8)
    close(rows[1], [0, -0.99999998, -0.99999998], 1e-8)
    close(rows[2], [0, 0])
    assert metrics == pytest.approx(
        {"batch_adv_count": 4.0, "batch_adv_mean": 0.25, "batch_adv_std": 0.5}
    )


def test_batch_normalize_constant_values_are_only_centred():
    rows, _ = batch_normalize([np.array([0, 0.5, 0.5]), np.array([0.5])])
    assert [r.tolist() for r in rows] == [[0, 0, 0], [0]]


def test_batch_normalize_empty_and_all_zero():
    rows, metrics = batch_normalize([np.array([0.0, 0.0]), np.array([])])
    assert [r.tolist() for r in rows] == [[0.0, 0.0], []]
    assert metrics["batch_adv_count"] == 0


def test_huge_rewards_stay_finite():
    big = np.finfo(np.float64).max
    for fn in (grpo, maxrl):
        out = fn([big, -big, big / 2])
        assert np.all(np.isfinite(out))
    rows, metrics = batch_normalize([np.array([big, -big, 1.0])])
    assert np.all(np.isfinite(rows[0])) and all(np.isfinite(list(metrics.values())))


def test_non_finite_rewards_are_rejected():
    with pytest.raises(ValueError, match="finite"):
        grpo([1.0, float("nan")])
