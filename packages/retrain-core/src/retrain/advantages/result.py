"""What the advantage pipeline returns: per-group token advantages, token statistics and
metrics, plus the step-level merge of group metrics.

Metric names follow the reference's metrics.jsonl: `exec_surprisal_mean`, `plan_*`,
`post_exec_*`, the legacy `exec_entropy_*` aliases, `entropy_mask_*`, `dg_*`, `hard_dg_*`,
`discover_*`. A key a group has no data for is absent rather than zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrain.advantages.ragged import FLOAT_MAX, Floats, Ints, Ragged

#: The largest spread of token advantages within one completion (`token_spread`) that still
#: counts as one advantage per completion, what a backend without token advantages trains on
SCALAR_TOLERANCE = 1e-6

STAT_KEYS = frozenset(
    [
        f"{n}_surprisal_{m}"
        for n in ("exec", "plan", "post_exec", "post_plan")
        for m in ("mean", "var")
    ]
    + [f"{n}_entropy_{m}" for n in ("exec", "plan") for m in ("mean", "var")]
)


def _finite(v: float) -> float:
    if math.isfinite(v):
        return v
    return 0.0 if math.isnan(v) else math.copysign(FLOAT_MAX, v)


def finite_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Metrics as finite floats (an overflowed diagnostic saturates; NaN becomes 0)."""
    return {k: _finite(float(v)) for k, v in metrics.items()}


@dataclass(frozen=True, slots=True)
class Moments:
    """Count, mean and population variance of a set of token values."""

    count: int = 0
    mean: float = 0.0
    var: float = 0.0

    @classmethod
    def of(cls, values: Floats) -> Moments:
        if values.size == 0:
            return cls()
        mean = float(values.mean())
        return cls(int(values.size), mean, float(np.mean((values - mean) ** 2)))

    @classmethod
    def split(cls, values: Floats, plan: Ints) -> tuple[Moments, Moments]:
        """(moments of the values outside `plan`, moments of those at `plan`).

        One pass over all values plus a pass over the (sparse) planning indices; the variance
        is E[x^2] - mean^2, exact enough for clamped uncertainties used as diagnostics."""
        n = values.size
        planned = values[plan]
        inside = cls.of(planned)
        count = n - planned.size
        if count == 0:
            return cls(), inside
        total = float(values.sum()) - float(planned.sum())
        squares = float(np.dot(values, values)) - float(np.dot(planned, planned))
        mean = total / count
        return cls(count, mean, max(squares / count - mean * mean, 0.0)), inside

    @classmethod
    def pooled(cls, parts: Sequence[Moments]) -> Moments:
        """Exact moments of the union of the parts' value sets."""
        total = sum(p.count for p in parts)
        if total == 0:
            return cls()
        mean = sum(p.count * p.mean for p in parts) / total
        var = sum(p.count * (p.var + (p.mean - mean) ** 2) for p in parts) / total
        return cls(total, mean, var)


@dataclass(frozen=True, slots=True)
class TokenStats:
    """Uncertainty moments of execution (mask 0) and planning (mask 1) tokens, before and
    after the uncertainty transform (SEPA). Values are clamped at 50."""

    exec_: Moments = Moments()
    plan: Moments = Moments()
    post_exec: Moments = Moments()
    post_plan: Moments = Moments()

    @classmethod
    def of(cls, pre: Floats, post: Floats | None, mask: Floats) -> TokenStats:
        plan = np.flatnonzero(mask > 0)
        exec_, planned = Moments.split(pre, plan)
        if post is None:
            return cls(exec_, planned, exec_, planned)
        return cls(exec_, planned, *Moments.split(post, plan))

    @classmethod
    def pooled(cls, parts: Sequence[TokenStats]) -> TokenStats:
        return cls(
            *(
                Moments.pooled([getattr(p, f) for p in parts])
                for f in ("exec_", "plan", "post_exec", "post_plan")
            )
        )

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, m in (
            ("exec", self.exec_),
            ("plan", self.plan),
            ("post_exec", self.post_exec),
            ("post_plan", self.post_plan),
        ):
            if m.count:
                out[f"{name}_surprisal_mean"] = m.mean
                out[f"{name}_surprisal_var"] = m.var
                if name in ("exec", "plan"):
                    out[f"{name}_entropy_mean"] = m.mean
                    out[f"{name}_entropy_var"] = m.var
        return out


@dataclass(frozen=True, slots=True)
class GroupAdvantages:
    """Token advantages of one prompt group.

    `tokens` holds every completion's token advantages back to back; `offsets[i]:offsets[i+1]`
    is completion i (`completions()` gives the per-completion views). `episode` is each
    completion's scalar advantage before the token transform.
    """

    episode: Floats
    tokens: Floats
    offsets: Ints
    metrics: dict[str, float] = field(default_factory=dict)
    stats: TokenStats | None = None

    @classmethod
    def build(
        cls,
        layout: Ragged,
        episode: Floats,
        tokens: Floats,
        metrics: dict[str, float],
        stats: TokenStats | None = None,
    ) -> GroupAdvantages:
        full = dict(metrics)
        if stats is not None:
            full.update(stats.metrics())
        return cls(episode, tokens, layout.offsets, finite_metrics(full), stats)

    def completions(self) -> list[Floats]:
        """Per-completion token advantages (views into `tokens`)."""
        return (
            np.split(self.tokens, self.offsets[1:-1].tolist()) if self.offsets.shape[0] > 1 else []
        )

    @property
    def lengths(self) -> Ints:
        return np.diff(self.offsets)

    def token_spread(self) -> Floats:
        """max - min token advantage per completion (0 for empty ones)."""
        return Ragged(self.lengths).spread(self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "episode": self.episode.tolist(),
            "token_advantages": [c.tolist() for c in self.completions()],
            "metrics": dict(self.metrics),
        }


def merge_metrics(groups: Sequence[GroupAdvantages]) -> dict[str, float]:
    """Step-level metrics: token statistics pooled exactly over the groups' tokens, every
    other key averaged over the groups that report it (so `dg_eta` is the mean group eta)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for g in groups:
        for key, value in g.metrics.items():
            if key in STAT_KEYS:
                continue
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    out = finite_metrics({k: sums[k] / counts[k] for k in sums})
    stats = [g.stats for g in groups if g.stats is not None]
    if stats:
        out.update(TokenStats.pooled(stats).metrics())
    return out
