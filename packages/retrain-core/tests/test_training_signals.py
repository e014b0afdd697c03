"""Reward ties, uniform-group dispositions and the advantage cap (spec algorithms.md §7)."""

import numpy as np
import pytest

from retrain.training.signals import (
    apply_advantage_cap,
    check_scalar_advantages,
    correct_count,
    group_disposition,
    summarize_reward_ties,
    tie_metrics,
)


def test_tie_worked_examples():
    t = summarize_reward_ties([1, 1 + 5e-7, 0, 0.5])
    assert (t.unique_count, t.tied_pairs, t.total_pairs) == (3, 1, 6)
    assert t.has_tie and not t.is_uniform
    assert (
        summarize_reward_ties([0, 6e-7, 1.2e-6]).unique_count == 2
    )  # the anchor rule: no chaining
    single = summarize_reward_ties([1.0])
    assert not single.eligible and not single.is_uniform


def test_tie_metrics():
    groups = [summarize_reward_ties(r) for r in ([1, 1], [1, 0, 0], [0.3], [1, 0])]
    m = tie_metrics(groups)
    assert m["reward_tie_eligible_groups"] == 3
    assert m["reward_tie_groups"] == 2 and m["reward_uniform_groups"] == 1
    assert m["reward_tie_group_rate"] == pytest.approx(2 / 3)
    assert m["reward_uniform_group_rate"] == pytest.approx(1 / 3)
    assert m["reward_tie_pair_rate"] == pytest.approx((1 + 1 + 0) / (1 + 3 + 1))
    assert m["reward_unique_fraction_mean"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert tie_metrics([])["reward_tie_group_rate"] == 0.0


def test_dispositions():
    uniform_right = summarize_reward_ties([1.0, 1.0])
    assert group_disposition(uniform_right, [1.0, 1.0]).label == "skipped (all correct)"
    assert not group_disposition(uniform_right, [1.0, 1.0]).train
    assert (
        group_disposition(summarize_reward_ties([0.0, 0.0]), [0.0, 0.0]).label
        == "skipped (all same)"
    )
    assert group_disposition(uniform_right, [1.0, 1.0], tl_grpo=True).train
    assert "ECHO" in group_disposition(uniform_right, [1.0, 1.0], echo=True).label
    assert group_disposition(uniform_right, [1.0, 1.0], plugin_advantage=True).train
    assert group_disposition(summarize_reward_ties([1.0, 0.0]), [1.0, 0.0]).train
    assert group_disposition(summarize_reward_ties([1.0]), [1.0]).train  # never skipped as uniform


def test_correct_count_is_strict():
    assert correct_count([0.5, 0.51, 1.0, 0.0]) == 2


def test_cap_worked_example():
    rows, m = apply_advantage_cap([[0, 3, -0.5], [0, -6]], 2.0)
    assert [r.tolist() for r in rows] == [[0, 2, -0.5], [0, -2]]
    assert m["adv_cap_fraction"] == pytest.approx(2 / 3)
    assert m["adv_cap_magnitude"] == pytest.approx(4.5)


def test_cap_off():
    rows, m = apply_advantage_cap([np.array([5.0])], 0.0)
    assert rows[0].tolist() == [5.0] and m == {}


def test_scalar_check():
    check_scalar_advantages([[0.5, 0.5 + 1e-7], []])
    with pytest.raises(ValueError, match="token-varying"):
        check_scalar_advantages([[0.5, 0.6]])
