"""GTPO, HICRA, SEPA pooling / amplification and the entropy mask (spec algorithms.md §4.3-4.6)."""

import numpy as np
import pytest

from retrain.advantages import credit
from retrain.advantages.ragged import Ragged


def one(values):
    return Ragged.of([values])


def gtpo1(a, u, beta):
    layout, flat = one(u)
    return credit.gtpo(layout, np.array([a], dtype=float), flat, beta).tolist()


def close(actual, expected, tol=1e-6):
    assert list(actual) == pytest.approx(expected, abs=tol)


def test_gtpo_worked_examples():
    close(gtpo1(1, [0.5, 1.0, 1.5], 0.1), [0.95, 1.0, 1.05], 2e-9)
    close(gtpo1(-0.5, [0.5, 1.0, 1.5], 0.1), [-0.475, -0.5, -0.525], 2e-9)
    close(gtpo1(1, [0.1, 1.0, 1.9], 2), [0.0, 1.0, 2.8])
    close(gtpo1(1, [100, 0], 0.1), [1.1, 0.9])


def test_gtpo_edges():
    assert gtpo1(1, [], 0.1) == []
    assert gtpo1(2, [0.3, 3.0], 0.0) == [2, 2]
    assert gtpo1(2, [0.0, 0.0], 0.5) == [2, 2]  # mean below the floor -> uniform
    assert gtpo1(0, [0.5, 2.0], 0.5) == [0, 0]


def test_hicra_worked_examples():
    close(credit.hicra(np.array([0.95, 1.0, 1.05]), np.array([0, 1, 1.0]), 0.2), [0.95, 1.2, 1.26])
    close(credit.hicra(np.array([-0.5, -0.5]), np.array([0, 1.0]), 0.2), [-0.5, -0.4])
    with pytest.raises(ValueError):
        credit.hicra(np.array([1.0]), np.array([0.0, 1.0]), 0.2)


U = [0.2, 1.0, 2.0, 0.6]
M = np.array([0, 1, 0, 0], dtype=float)


def test_sepa_worked_examples():
    layout, u = one(U)
    close(credit.sepa_pool(layout, u, M, 0.5), [0.566667, 1.0, 1.466667, 0.766667])
    close(credit.sepa_amp(layout, u, M, 0.5), [-0.166667, 1.0, 2.533333, 0.433333])
    close(credit.sepa_amp(layout, u, M, 1.0, clamp=True), [0.0, 1.0, 3.066667, 0.266667])


def test_sepa_pool_keeps_the_execution_mean_and_shrinks_variance():
    layout, u = one(U)
    pooled = credit.sepa_pool(layout, u, M, 0.3)
    ex = M == 0
    assert pooled[ex].mean() == pytest.approx(u[ex].mean())
    assert pooled[ex].var() == pytest.approx(u[ex].var() * 0.7**2)


def test_sepa_edges():
    layout, u = one(U)
    assert credit.sepa_pool(layout, u, M, 0.0).tolist() == U
    all_plan = np.ones(4)
    assert credit.sepa_pool(layout, u, all_plan, 0.9).tolist() == U  # no execution tokens
    close(
        credit.sepa_pool(layout, u, M, 7.0), credit.sepa_pool(layout, u, M, 1.0)
    )  # lambda clamped


def test_mask_threshold():
    u = np.array([0.2, 1.0, 2.0, 0.6, 0.5, 1.5])
    assert credit.mask_threshold(u, 0.5) == 1.0
    assert credit.mask_threshold(u, 1.0) == -np.inf
    assert credit.mask_threshold(np.array([]), 0.5) == 0.0
    assert credit.mask_threshold(u, 0.01) == 2.0  # at least one token


def test_entropy_mask_off_and_ties():
    tok = np.array([1.0, 2.0, 3.0])
    out, metrics = credit.entropy_mask(tok, np.array([1.0, 1.0, 0.5]), 0.0)
    assert out.tolist() == [1.0, 2.0, 3.0] and metrics == {}
    out, metrics = credit.entropy_mask(tok, np.array([1.0, 1.0, 0.5]), 0.34)
    assert out.tolist() == [1.0, 2.0, 0.0]  # both tokens tied at the threshold are kept
    assert metrics["entropy_mask_fraction"] == pytest.approx(1 / 3)


def test_predictive_variance_worked_example():
    from retrain.advantages.uncertainty import predictive_variance, resolve_uncertainty, surprisal

    u = predictive_variance(np.array([-0.2, -1.0, -2.0, -0.6]))
    close(u, [0.148411, 0.232544, 0.117020, 0.247617])
    assert surprisal(np.array([-0.5, -80.0])).tolist() == [0.5, 50.0]
    assert resolve_uncertainty(" Bernoulli_Variance ").name == "predictive_variance"
    with pytest.raises(ValueError, match="unknown uncertainty_kind"):
        resolve_uncertainty("varentropy")
