"""pass@k and maj@k over the samples of one problem.

pass@k is the unbiased estimator of Chen et al. (2021): with n samples of which c pass, the
probability that k of them drawn without replacement include a pass,
1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1..n} (1 - k/i): a product of terms in
[0, 1) that stays exact to rounding for n in the thousands, where the binomials overflow.
"""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def majority_passes(answers: Sequence[str], passed: Sequence[bool]) -> bool:
    """maj@k of one problem: the most frequent extracted answer (empty answers do not vote;
    a tie goes to the answer seen first) is correct when a sample giving it passed."""
    counts: dict[str, int] = {}
    for a in answers:
        if a:
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        return False
    top = max(counts.values())
    voted = next(a for a in counts if counts[a] == top)
    return any(p for a, p in zip(answers, passed, strict=True) if a == voted)
