"""Per-token uncertainty signals used by the GTPO-family transforms.

Built-ins (all clamped to at most `MAX_SURPRISAL`):
- `surprisal`: -logprob of the sampled token;
- `predictive_variance`: p(1 - p) with p = exp(max(logprob, -50)) clamped to [0, 1];
- `shannon_entropy`: the sampler's per-token entropy of the full distribution.
A dotted path names a plugin: an `UncertaintySpec`, a zero-argument factory returning one,
or `f(UncertaintyContext) -> list[float]` (called once per completion).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrain.advantages.ragged import Floats, Ragged
from retrain.plugins.resolve import resolve
from retrain.plugins.signature import from_factory
from retrain.registry import builtin

MAX_SURPRISAL = 50.0
#: the params keys that name the uncertainty kind (in the transform params, or under an
#: algorithm_mode in its params), read by the pipeline for every GTPO transform
SELECTOR_KEYS = ("uncertainty_kind", "uncertainty_metric", "token_uncertainty")


def surprisal(logprobs: Floats) -> Floats:
    u = np.negative(logprobs)
    return np.minimum(u, MAX_SURPRISAL, out=u)


def clamped(u: Floats) -> Floats:
    """u with values above MAX_SURPRISAL clamped (no copy when none are)."""
    if u.size and float(u.max()) > MAX_SURPRISAL:
        return np.minimum(u, MAX_SURPRISAL)
    return u


def predictive_variance(logprobs: Floats) -> Floats:
    p = np.clip(np.exp(np.maximum(logprobs, -MAX_SURPRISAL)), 0.0, 1.0)
    return p * (1.0 - p)


@dataclass(frozen=True)
class UncertaintyContext:
    """One completion, as an uncertainty plugin sees it."""

    logprobs: list[float]
    token_distributions: list[list[float]] | None = None
    precomputed_entropy: list[float] | None = None
    planning_mask: list[int] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UncertaintySpec:
    name: str
    compute: Callable[[UncertaintyContext], Sequence[float]]
    needs_distributions: bool = False


@dataclass(frozen=True)
class Uncertainty:
    """A resolved uncertainty kind; `values` works on a whole group at once."""

    name: str
    needs_entropies: bool = False
    plugin: UncertaintySpec | None = None

    def values(
        self,
        layout: Ragged,
        logprobs: Floats,
        entropies: Floats | None,
        mask: Floats,
        params: dict[str, Any],
    ) -> Floats:
        if self.plugin is not None:
            where = f"uncertainty plugin {self.name!r}"
            ent_rows = layout.split(entropies) if entropies is not None else [None] * layout.n
            rows = [
                list(
                    self.plugin.compute(
                        UncertaintyContext(
                            logprobs=lp.tolist(),
                            precomputed_entropy=None if ent is None else ent.tolist(),
                            planning_mask=[int(m) for m in flags.tolist()],
                            params=params,
                        )
                    )
                )
                for lp, ent, flags in zip(
                    layout.split(logprobs), ent_rows, layout.split(mask), strict=True
                )
            ]
            out: Floats = layout.flatten(rows, what=where)
            if not np.all(np.isfinite(out)):
                raise ValueError(f"{where} returned a non-finite value")
            return np.minimum(out, MAX_SURPRISAL)
        if self.name == "surprisal":
            return surprisal(logprobs)
        if self.name == "predictive_variance":
            return predictive_variance(logprobs)
        if entropies is None:
            raise ValueError(
                "uncertainty_kind 'shannon_entropy' needs per-token entropies from the "
                "sampler (the pytorch inference engine provides them)"
            )
        return np.minimum(entropies, MAX_SURPRISAL)


def resolve_uncertainty(kind: str, search_paths: Sequence[str] = ("plugins",)) -> Uncertainty:
    """The uncertainty kind named by `kind` (an alias, a canonical name or a dotted path)."""
    canon = builtin.canonical_uncertainty(kind)
    if canon is not None:
        return Uncertainty(canon, needs_entropies=canon == "shannon_entropy")
    if "." not in kind and ":" not in kind:
        raise ValueError(
            f"unknown uncertainty_kind {kind!r}; one of: "
            f"{', '.join(builtin.UNCERTAINTY_KINDS)}, or a dotted path"
        )
    obj, _ = resolve(kind, search_paths)
    obj = from_factory(obj, UncertaintySpec)
    if isinstance(obj, UncertaintySpec):
        spec = obj
    elif callable(obj):
        spec = UncertaintySpec(kind, obj)
    else:
        raise TypeError(f"uncertainty plugin {kind!r} is not callable")
    return Uncertainty(spec.name or kind, needs_entropies=spec.needs_distributions, plugin=spec)
