"""What a policy loss (`[training] policy_loss_mode`) is: one record per objective that says
what config validation and the backends ask of it, and computes its per-token loss.

Objectives are a pluggable kind like advantage modes: the built-ins live in
`retrain.backends.objectives` (one module each), a distribution adds one under the
`retrain.objectives` entry-point group, and a dotted path names one in a plugin module. Every
rule about an objective (its clip band, whether it picks tokens over the whole batch and so
needs one process, whether it takes sequence-level ratios, which `[training]` keys it reads)
is read from its record here, by validation and by the backends' run-time checks alike.

The loss is written against `xp`, the tensor library of the backend that computes it (torch
for the local and Unsloth backends), so the record imports no tensor library itself and
validation runs where none is installed. A backend whose capabilities say `tensor_objectives`
computes any objective this way; a remote service computes those it lists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: (clip_eps, clip_eps_high) -> the (lo, hi) band the ratio is clipped to, or None for no clip
Band = Callable[[float, float], "tuple[float, float] | None"]


@dataclass(frozen=True)
class LossTerms:
    """The tensors of one micro-batch's N action tokens, each [N]. `ratio` and `log_ratio` are
    the token's (the sequence's at `importance_sampling_level = "sequence"`), with gradient;
    `selected` marks the tokens the objective picked over the whole batch (all False when it
    picks none); (lo, hi) is its band, (0, inf) when it does not clip."""

    xp: Any  # the tensor library (torch)
    new_lp: Any
    old_lp: Any
    adv: Any
    ratio: Any
    log_ratio: Any
    delta: Any  # new_lp - old_lp per token, whatever the ratio's level
    selected: Any
    lo: float
    hi: float


@dataclass(frozen=True)
class SelectTerms:
    """All N action tokens of an update, without gradient, in float32: what a selecting
    objective picks from before any micro-batch's backward."""

    xp: Any
    new_lp: Any
    old_lp: Any
    adv: Any
    lo: float
    hi: float
    generator: Any  # the backend's seeded generator for random picks (None: the global one)


@dataclass(frozen=True)
class Objective:
    """One policy loss. `loss(settings, terms)` returns the [N] per-token loss with gradient;
    `settings` carries the `[training]` values (clip_eps, kl_cov_coef, ... as attributes)."""

    name: str
    loss: Callable[[Any, LossTerms], Any]
    summary: str = ""
    #: its clip band; None when it does not clip (then clip_eps and clip_eps_high are unread)
    band: Band | None = None
    #: reads clip_eps = 0 as "no lower bound" rather than "no clip" (clip_eps_high alone is allowed)
    clip_eps_optional: bool = False
    #: its loss is a ratio times -A, which clip_ratio_c caps for negative advantages
    dual_clip: bool = False
    #: picks tokens over the whole batch before the backward: (settings, terms) -> bool mask [N].
    #: It then needs token-level ratios and one training process.
    select: Callable[[Any, SelectTerms], Any] | None = None
    #: the picked tokens count as clipped in `clip_fraction` (Clip-Cov cuts their gradient)
    selection_clips: bool = False
    #: `[training]` keys only this objective reads (unread, so warned about, under another)
    reads: tuple[str, ...] = ()
    #: extra config rules: (settings) -> [(key under [training], message, hint)]
    check: Callable[[Any], list[tuple[str, str, str]]] | None = None
    #: takes token-level ratios only, though it selects nothing (a selecting one always does)
    token_ratios_only: bool = False

    @property
    def token_only(self) -> bool:
        """Refuses `importance_sampling_level = "sequence"`."""
        return self.token_ratios_only or self.select is not None

    def clip_band(self, clip_eps: float, clip_eps_high: float) -> tuple[float, float] | None:
        return self.band(clip_eps, clip_eps_high) if self.band is not None else None

    def several_processes_refusal(self) -> str | None:
        """Why it cannot train on several processes, or None."""
        return "its token selection spans the whole batch" if self.select is not None else None


class NotAnObjective(LookupError):
    """A name that resolves to something other than an Objective."""


def objective_of(name: str, search_paths: Sequence[str] = ("plugins",)) -> Objective:
    """The objective `name` names: a built-in, a registered name, an entry point of
    `retrain.objectives`, or a dotted path. Raises UnknownComponent, PluginError or
    NotAnObjective with the reason."""
    from retrain.registry.core import lookup

    found = lookup("objective", name, search_paths)
    if not isinstance(found.obj, Objective):
        raise NotAnObjective(f"policy loss {name!r} ({found.origin}) is not a retrain.backends.objective.Objective")
    return found.obj


def clip_band(mode: str, clip_eps: float, clip_eps_high: float) -> tuple[float, float] | None:
    """(lo, hi) of the ratio's clip under objective `mode`, or None when it does not clip."""
    return objective_of(mode).clip_band(clip_eps, clip_eps_high)


def clipped_pg(terms: LossTerms) -> Any:
    """-min(r A, clip(r, lo, hi) A): PPO's clipped surrogate, per token."""
    xp, r, adv = terms.xp, terms.ratio, terms.adv
    return xp.maximum(-r * adv, -r.clamp(terms.lo, terms.hi) * adv)


def covariance(new_lp: Any, adv: Any) -> Any:
    """Each token's centred product of advantage and new log-probability (KL-Cov, Clip-Cov)."""
    return (adv - adv.mean()) * (new_lp - new_lp.mean())
