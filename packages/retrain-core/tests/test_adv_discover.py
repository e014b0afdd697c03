"""TTT-Discover entropic advantages (spec algorithms.md §6.1)."""

import numpy as np
import pytest

from retrain.advantages.algorithm import discover_entropic


def run(rewards, **params):
    return discover_entropic(np.asarray(rewards, dtype=float), params)


def test_searched_beta_worked_example():
    adv, m = run([1, 0, 0, 0])
    assert m["discover_beta"] == pytest.approx(1.287481, abs=1e-6)
    assert m["discover_kl"] == pytest.approx(0.2, abs=1e-6)
    assert adv.tolist() == pytest.approx([1.188309, -0.396103, -0.396103, -0.396103], abs=1e-6)
    assert m["discover_reward_max"] == 1.0 and m["discover_reward_mean"] == 0.25


def test_fixed_beta_worked_example():
    adv, m = run([1, 0, 0, 0], beta=1)
    assert adv.tolist() == pytest.approx([0.901468, -0.300489, -0.300489, -0.300489], abs=1e-6)
    assert m["discover_kl"] == pytest.approx(0.117993, abs=1e-6)


def test_three_rewards_worked_example():
    adv, m = run([0.3, 0.5, 0.9])
    assert m["discover_beta"] == pytest.approx(2.551913, abs=1e-6)
    assert adv.tolist() == pytest.approx([-0.588444, -0.314377, 0.902821], abs=1e-6)


def test_flat_and_degenerate_groups():
    assert run([1, 1])[0].tolist() == [0.0, 0.0]
    assert run([3.0])[0].tolist() == [0.0]
    assert run([1, 0], target_kl=0)[1]["discover_beta"] == 0.0
    adv, m = run([1, 0, 0, 0], beta_max=0.5)
    assert m["discover_beta"] == 0.5  # KL(beta_max) within target
    assert abs(adv.sum()) < 1e-12


def test_bool_beta_is_not_a_fixed_beta():
    assert run([1, 0, 0, 0], beta=True)[1]["discover_beta"] == pytest.approx(1.287481, abs=1e-6)


def test_through_the_pipeline():
    from retrain.advantages.pipeline import build_pipeline
    from retrain.config.schema import AlgorithmConfig, TrainConfig

    p = build_pipeline(
        TrainConfig(
            algorithm=AlgorithmConfig(algorithm_mode="ttt_discover_entropic", params={"beta": 1})
        )
    )
    result = p.compute_group([1, 0, 0, 0], [[-0.5, -0.1], [-1.0], [], [-0.3]])
    assert result.completions()[0].tolist() == pytest.approx([0.901468] * 2, abs=1e-6)
    assert not p.token_varying
