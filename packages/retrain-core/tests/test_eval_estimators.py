"""pass@k (unbiased, Chen et al. 2021) against brute force, its stability, and maj@k."""

from __future__ import annotations

import itertools
import math

import pytest

from retrain.evaluation.estimators import majority_passes, pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    """The share of all k-subsets of n samples (the first c passing) holding a pass."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_equals_brute_force_for_every_n_c_k_up_to_10() -> None:
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_1_is_the_pass_rate() -> None:
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_stable_for_n_1000() -> None:
    """Where the binomials have hundreds of digits, the product form matches the exact value
    (computed with integers) and stays within [0, 1] and monotone in k."""
    n = 1000
    for c in (0, 1, 7, 100, 500, 999, 1000):
        previous = -1.0
        for k in (1, 2, 10, 100, 500, 990, 1000):
            got = pass_at_k(n, c, k)
            exact = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
            assert 0.0 <= got <= 1.0 and math.isfinite(got)
            assert got == pytest.approx(exact, rel=1e-9, abs=1e-12), (c, k)
            assert got >= previous
            previous = got


def test_rejects_impossible_counts() -> None:
    for n, c, k in ((4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_majority_vote() -> None:
    # "5" wins 2-1; a sample giving it passed
    assert majority_passes(["5", "4", "5"], [False, False, True])
    # "4" wins 2-1; no sample giving it passed
    assert not majority_passes(["4", "5", "4"], [False, True, False])
    # a tie goes to the answer seen first; empty answers do not vote
    assert majority_passes(["", "", "7", "8"], [False, False, True, False])
    assert not majority_passes(["8", "7", "", ""], [False, True, False, False])
    assert not majority_passes(["", ""], [False, False])
