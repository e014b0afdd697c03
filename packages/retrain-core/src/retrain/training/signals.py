"""Trainer-side signal handling: reward ties and uniform groups, the advantage cap, the
correct rate, and the one-advantage-per-completion check of scalar backends."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from retrain.advantages.episode import TIE_EPS, robust_mean
from retrain.advantages.ragged import Floats
from retrain.advantages.result import SCALAR_TOLERANCE

CORRECT_THRESHOLD = 0.5


@dataclass(frozen=True)
class RewardTies:
    """How a group's rewards tie. Buckets are built greedily over the sorted rewards, each
    anchored at its first (smallest) value, so ties do not chain beyond eps."""

    size: int
    unique_count: int
    tied_pairs: int

    @property
    def eligible(self) -> bool:
        """Groups of one are never counted (nor skipped) as uniform."""
        return self.size >= 2

    @property
    def total_pairs(self) -> int:
        return self.size * (self.size - 1) // 2

    @property
    def has_tie(self) -> bool:
        return self.eligible and self.unique_count < self.size

    @property
    def is_uniform(self) -> bool:
        return self.eligible and self.unique_count == 1


def summarize_reward_ties(rewards: Sequence[float] | Floats, eps: float = TIE_EPS) -> RewardTies:
    values = sorted(float(r) for r in np.asarray(rewards, dtype=np.float64).reshape(-1))
    sizes: list[int] = []
    anchor = -math.inf
    for v in values:
        if sizes and abs(v - anchor) <= eps:
            sizes[-1] += 1
        else:
            sizes.append(1)
            anchor = v
    return RewardTies(len(values), len(sizes), sum(s * (s - 1) // 2 for s in sizes))


def tie_metrics(groups: Sequence[RewardTies]) -> dict[str, float]:
    """Step aggregates over the eligible (size >= 2) groups."""
    eligible = [g for g in groups if g.eligible]
    n = len(eligible)
    ties = sum(g.has_tie for g in eligible)
    uniform = sum(g.is_uniform for g in eligible)
    pairs = sum(g.total_pairs for g in eligible)
    return {
        "reward_tie_eligible_groups": float(n),
        "reward_tie_groups": float(ties),
        "reward_uniform_groups": float(uniform),
        "reward_tie_group_rate": ties / n if n else 0.0,
        "reward_uniform_group_rate": uniform / n if n else 0.0,
        "reward_tie_pair_rate": sum(g.tied_pairs for g in eligible) / pairs if pairs else 0.0,
        "reward_unique_fraction_mean": (sum(g.unique_count / g.size for g in eligible) / n)
        if n
        else 0.0,
    }


@dataclass(frozen=True)
class Disposition:
    train: bool
    label: str = ""  # console note: "skipped (all correct)", "uniform (all same, kept for ECHO)"


def group_disposition(
    ties: RewardTies,
    rewards: Sequence[float] | Floats,
    *,
    tl_grpo: bool = False,
    echo: bool = False,
    plugin_advantage: bool = False,
    teacher: bool = False,
) -> Disposition:
    """Whether a group trains. A uniform group carries no signal under any built-in advantage
    mode (they return exact zeros), so it is skipped even when batch normalisation is on —
    the reference kept it "for batch norm", where it contributed nothing. It is kept under
    TL-GRPO (turn-level signal), multi-turn ECHO (observation tokens), advantage plugins
    (which may give a uniform group signal) and distillation (the teacher's per-token term)."""
    if not ties.is_uniform:
        return Disposition(True)
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    what = "all correct" if float(r[0]) > CORRECT_THRESHOLD else "all same"
    if tl_grpo:
        return Disposition(True, f"uniform ({what}, kept for TL-GRPO)")
    if echo:
        return Disposition(True, f"uniform ({what}, kept for ECHO)")
    if plugin_advantage:
        return Disposition(True, f"uniform ({what}, kept for the advantage plugin)")
    if teacher:
        return Disposition(True, f"uniform ({what}, kept for the teacher)")
    return Disposition(False, f"skipped ({what})")


def correct_count(rewards: Sequence[float] | Floats) -> int:
    """Completions with reward > 0.5 (strict)."""
    return int((np.asarray(rewards, dtype=np.float64) > CORRECT_THRESHOLD).sum())


def apply_advantage_cap(
    rows: Sequence[ArrayLike], cap: float
) -> tuple[list[Floats], dict[str, float]]:
    """Clamp every non-zero token advantage to [-cap, cap] (cap <= 0: off). Exact zeros are
    untouched and not counted. Runs after batch normalisation."""
    arrays = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rows]
    if cap <= 0:
        return [a.copy() for a in arrays], {}
    nonzero = sum(int(np.count_nonzero(a)) for a in arrays)
    capped_values = [np.abs(a[np.abs(a) > cap]) for a in arrays]
    capped = sum(int(c.size) for c in capped_values)
    magnitude = robust_mean(np.concatenate(capped_values)) if capped else 0.0
    out = [np.where(a != 0, np.clip(a, -cap, cap), a) for a in arrays]
    return out, {"adv_cap_fraction": capped / max(nonzero, 1), "adv_cap_magnitude": magnitude}


def check_scalar_advantages(rows: Sequence[ArrayLike], tolerance: float = SCALAR_TOLERANCE) -> None:
    """Raise when a completion's token advantages differ by more than `tolerance` (backends
    that keep one advantage per completion). Pass completion tokens only."""
    for i, row in enumerate(rows):
        a = np.asarray(row, dtype=np.float64).reshape(-1)
        if a.size and float(a.max() - a.min()) > tolerance:
            raise ValueError(
                f"completion {i} has token-varying advantages (spread "
                f"{float(a.max() - a.min()):.3g}) but the backend keeps one advantage "
                "per completion"
            )
