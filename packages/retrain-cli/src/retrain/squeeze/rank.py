"""LoRA-Squeeze rank math (arXiv 2602.10993), per adapted module, never forming B·A.

With A = lora_Aᵀ (in x r) and B = lora_Bᵀ (r x out), the update is ΔWᵀ = scale · A·B:
1. QR(A) = Q_A R_A and QR(Bᵀ) = Q_B R_B (reduced; R's are at most r x r);
2. M = R_A R_Bᵀ, small; SVD(M) = U S Vᵀ, so A·B = (Q_A U) S (Q_B V)ᵀ and S are the
   singular values of ΔW / scale;
3. V(k) = Σ_{i<k} s_i² / Σ s_i² is the share of the update's energy rank k keeps (1 when ΔW = 0);
4. rank k keeps A' = Q_A U_k √S_k and B' = √S_k V_kᵀ Q_Bᵀ: A'·B' is the best rank-k
   approximation of A·B (Eckart-Young), split evenly between the factors.

The recommended rank is the smallest target rank whose mean V over modules reaches the
threshold (else the source rank). Target ranks default to the powers of two below the source
rank plus the source rank itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Factors:
    """One module's decomposition: A·B = left · diag(s) · right (left in x n, right n x out)."""

    s: np.ndarray  # (n,) singular values, descending
    left: np.ndarray  # (in, n) = Q_A U
    right: np.ndarray  # (n, out) = (Q_B V)ᵀ


def decompose(lora_a: np.ndarray, lora_b: np.ndarray) -> Factors:
    """lora_a: lora_A.weight (r x in); lora_b: lora_B.weight (out x r)."""
    a = np.asarray(lora_a, dtype=np.float64).T  # (in, r)
    bt = np.asarray(lora_b, dtype=np.float64)  # Bᵀ = lora_B.weight: (out, r)
    q_a, r_a = np.linalg.qr(a)  # (in, p), (p, r)
    q_b, r_b = np.linalg.qr(bt)  # (out, q), (q, r)
    u, s, vt = np.linalg.svd(r_a @ r_b.T)  # M: (p, q)
    n = s.shape[0]
    return Factors(s, q_a @ u[:, :n], vt[:n] @ q_b.T)


def retained(s: np.ndarray, k: int) -> float:
    energy = s.astype(np.float64) ** 2
    total = float(energy.sum())
    return 1.0 if total == 0.0 else float(energy[:k].sum() / total)


def default_targets(source_rank: int) -> list[int]:
    ranks, k = [], 1
    while k < source_rank:
        ranks.append(k)
        k *= 2
    return [*ranks, source_rank]


def recommend(mean_by_rank: dict[int, float], threshold: float, source_rank: int) -> int:
    return next((k for k in sorted(mean_by_rank) if mean_by_rank[k] >= threshold), source_rank)


def truncate(f: Factors, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(lora_A' (k x in), lora_B' (out x k)), zero-padded when the module has fewer than k
    non-trivial directions (every module of a PEFT adapter has the same rank)."""
    n = min(k, f.s.shape[0])
    root = np.sqrt(f.s[:n])
    a_new = np.zeros((k, f.left.shape[0]))
    b_new = np.zeros((f.right.shape[1], k))
    a_new[:n] = (f.left[:, :n] * root).T  # A'ᵀ
    b_new[:, :n] = (root[:, None] * f.right[:n]).T  # B'ᵀ
    return a_new, b_new


def lora_scale(alpha: float, rank: int, rslora: bool) -> float:
    """PEFT's scaling of B·A: alpha / r, or alpha / √r with rsLoRA."""
    return alpha / (rank**0.5 if rslora else rank)


def rescaled_alpha(alpha: float, source_rank: int, target: int, rslora: bool) -> int:
    """The integer alpha at the target rank whose scale is closest to the source's."""
    ratio = (target / source_rank) ** 0.5 if rslora else target / source_rank
    return max(1, round(alpha * ratio))


def mean_min_max(values: Sequence[float]) -> tuple[float, float, float]:
    return float(np.mean(values)), float(np.min(values)), float(np.max(values))
