"""Token-credit transforms: the built-in table and the plugin protocol.

A transform is either declarative (GTPO weighting, optionally after an uncertainty
transform such as SEPA pooling and followed by HICRA and a group post-process) or a context
transform that computes every token advantage itself (the Delight family, most plugins).

Plugins (`transform_mode = "pkg.mod.attr"`) may be:
- a `TransformSpec` (declarative; its hooks work per completion on plain lists),
- a zero-argument factory returning a spec or a callable,
- a callable `f(TransformContext)` returning `TransformOutput`, an object with
  `token_advs`, or `list[list[float]]`; attributes `needs_planning` / `uses_sepa_controller`
  on the callable are honoured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from retrain.advantages import credit
from retrain.advantages.delight import transform as dg
from retrain.advantages.delight.scale import NormMode
from retrain.advantages.ragged import Floats, Ragged
from retrain.plugins.signature import declared_param_keys, from_factory

#: (layout, u, planning mask, lambda) -> transformed u
UncertaintyTransform = Callable[[Ragged, Floats, Floats, float], Floats]
#: (layout, token advantages, raw u, params) -> (token advantages, metrics)
PostProcess = Callable[[Ragged, Floats, Floats, Mapping[str, Any]], tuple[Floats, dict[str, float]]]


@dataclass(frozen=True)
class GroupTokens:
    """One group's token-level inputs, flat over its completions."""

    layout: Ragged
    episode: Floats
    logprobs: Floats
    mask: Floats
    entropies: Floats | None
    rewards: Floats


@dataclass(frozen=True)
class StepInputs:
    """What is fixed for the whole step."""

    sepa_lambda: float = 0.0
    step: int = 0
    delight_eta_prev: float | None = None


#: (group, step inputs, params, beta, alpha) -> (token advantages, metrics)
ContextFn = Callable[
    [GroupTokens, StepInputs, Mapping[str, Any], float, float], tuple[Floats, dict[str, float]]
]


@dataclass(frozen=True)
class Transform:
    """A resolved transform as the pipeline runs it."""

    name: str
    use_gtpo: bool = True
    needs_planning: bool = False
    uses_sepa_controller: bool = False
    apply_hicra: bool = False
    token_varying: bool = True
    uncertainty_transform: UncertaintyTransform | None = None
    post_process: PostProcess | None = None
    context: ContextFn | None = None
    source: str = "builtin"
    #: the keys of the transform params it reads (besides the uncertainty selectors, which the
    #: pipeline reads for every GTPO transform); None: a plugin that does not say
    param_keys: frozenset[str] | None = frozenset()


def _entropy_mask(
    layout: Ragged, tok: Floats, raw_u: Floats, params: Mapping[str, Any]
) -> tuple[Floats, dict[str, float]]:
    return credit.entropy_mask(tok, raw_u, mask_rho(params))


#: the params keys `mask_rho` reads
MASK_RHO_KEYS = frozenset({"surprisal_mask_rho", "entropy_mask_rho"})


def mask_rho(params: Mapping[str, Any]) -> float:
    """rho from params: surprisal_mask_rho, else the legacy entropy_mask_rho, else 0."""
    for key in ("surprisal_mask_rho", "entropy_mask_rho"):
        if params.get(key) is not None:
            return float(params[key])
    return 0.0


def _amp(layout: Ragged, u: Floats, mask: Floats, lam: float) -> Floats:
    return credit.sepa_amp(layout, u, mask, lam)


def _amp_c(layout: Ragged, u: Floats, mask: Floats, lam: float) -> Floats:
    return credit.sepa_amp(layout, u, mask, lam, clamp=True)


def _delight(
    g: GroupTokens, s: StepInputs, params: Mapping[str, Any], beta: float, alpha: float
) -> tuple[Floats, dict[str, float]]:
    p = dg.parse_params(params, default_norm="none")
    return dg.delight(
        g.layout, g.episode, g.logprobs, p, sepa_lambda=None, eta_prev=s.delight_eta_prev
    )


def _delight_sepa(
    g: GroupTokens, s: StepInputs, params: Mapping[str, Any], beta: float, alpha: float
) -> tuple[Floats, dict[str, float]]:
    p = dg.parse_params(params, default_norm="scale")
    return dg.delight(
        g.layout, g.episode, g.logprobs, p, sepa_lambda=s.sepa_lambda, eta_prev=s.delight_eta_prev
    )


def _hard_delight(
    g: GroupTokens, s: StepInputs, params: Mapping[str, Any], beta: float, alpha: float
) -> tuple[Floats, dict[str, float]]:
    p = dg.parse_params(params, default_norm="none")
    return dg.hard_delight(g.layout, g.episode, g.logprobs, p, sepa_lambda=s.sepa_lambda)


BUILTIN_TRANSFORMS: dict[str, Transform] = {
    t.name: t
    for t in (
        Transform("none", use_gtpo=False, token_varying=False),
        Transform("gtpo"),
        Transform("entropy_mask", post_process=_entropy_mask, param_keys=MASK_RHO_KEYS),
        Transform("gtpo_hicra", needs_planning=True, apply_hicra=True),
        Transform(
            "gtpo_sepa",
            needs_planning=True,
            uses_sepa_controller=True,
            uncertainty_transform=credit.sepa_pool,
        ),
        Transform(
            "gtpo_sepa_amp",
            needs_planning=True,
            uses_sepa_controller=True,
            uncertainty_transform=_amp,
        ),
        Transform(
            "gtpo_sepa_amp_c",
            needs_planning=True,
            uses_sepa_controller=True,
            uncertainty_transform=_amp_c,
        ),
        Transform("delight", use_gtpo=False, context=_delight, param_keys=frozenset(dg.PARAM_KEYS)),
        Transform("delight_sepa", use_gtpo=False, uses_sepa_controller=True, context=_delight_sepa,
                  param_keys=frozenset(dg.PARAM_KEYS)),
        Transform("hard_delight", use_gtpo=False, uses_sepa_controller=True, context=_hard_delight,
                  param_keys=frozenset(dg.PARAM_KEYS)),
    )
}

#: Which params-parser each built-in context transform uses (validated once at build time).
DELIGHT_DEFAULT_NORM: dict[str, NormMode] = {
    "delight": "none",
    "delight_sepa": "scale",
    "hard_delight": "none",
}


# ---------------------------------------------------------------- plugin protocol


def _one(values: Sequence[float]) -> tuple[Ragged, Floats]:
    return Ragged.of([values])


def _listed(x: Floats) -> list[float]:
    out: list[float] = x.tolist()
    return out


@dataclass(frozen=True)
class TransformContext:
    """One group as a transform plugin sees it (plain lists), with the built-in helpers."""

    episode_advantages: list[float]
    logprobs: list[list[float]]
    planning_masks: list[list[int]]
    sepa_lambda: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    gtpo_beta: float = 0.1
    hicra_alpha: float = 0.2
    entropies: list[list[float]] | None = None
    rewards: list[float] = field(default_factory=list)

    def gtpo(
        self, advantage: float, uncertainty: Sequence[float], beta: float | None = None
    ) -> list[float]:
        layout, u = _one(uncertainty)
        b = self.gtpo_beta if beta is None else beta
        return _listed(credit.gtpo(layout, np.array([advantage], dtype=np.float64), u, b))

    def hicra(
        self, token_advs: Sequence[float], mask: Sequence[int], alpha: float | None = None
    ) -> list[float]:
        a = self.hicra_alpha if alpha is None else alpha
        return _listed(
            credit.hicra(
                np.asarray(token_advs, dtype=np.float64), np.asarray(mask, dtype=np.float64), a
            )
        )

    def sepa_pool(
        self, uncertainty: Sequence[float], mask: Sequence[int], lam: float | None = None
    ) -> list[float]:
        layout, u = _one(uncertainty)
        lam_ = self.sepa_lambda if lam is None else lam
        return _listed(credit.sepa_pool(layout, u, np.asarray(mask, dtype=np.float64), lam_))

    def sepa_amp(
        self, uncertainty: Sequence[float], mask: Sequence[int], lam: float | None = None
    ) -> list[float]:
        layout, u = _one(uncertainty)
        lam_ = self.sepa_lambda if lam is None else lam
        return _listed(credit.sepa_amp(layout, u, np.asarray(mask, dtype=np.float64), lam_))


@dataclass(frozen=True)
class TransformOutput:
    token_advs: Sequence[Sequence[float]]
    has_stats: bool = False
    stats: Any = None
    extra_metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TransformSpec:
    """A declarative transform plugin. Hooks work per completion on plain lists:
    `entropy_transform(u, mask, lam) -> u'` and, on the whole group,
    `post_process(token_advs, raw_u, params) -> (token_advs, metrics)`; `context_fn` makes it
    a context transform instead."""

    name: str
    use_gtpo: bool = True
    needs_planning: bool = False
    uses_sepa_controller: bool = False
    apply_hicra: bool = False
    entropy_transform: Callable[[list[float], list[int], float], Sequence[float]] | None = None
    post_process: Callable[..., Any] | None = None
    context_fn: Callable[[TransformContext], Any] | None = None
    token_varying: bool = True


def context_of(
    g: GroupTokens, s: StepInputs, params: Mapping[str, Any], beta: float, alpha: float
) -> TransformContext:
    return TransformContext(
        episode_advantages=g.episode.tolist(),
        logprobs=[r.tolist() for r in g.layout.split(g.logprobs)],
        planning_masks=[[int(m) for m in r.tolist()] for r in g.layout.split(g.mask)],
        sepa_lambda=s.sepa_lambda,
        params=dict(params),
        step=s.step,
        gtpo_beta=beta,
        hicra_alpha=alpha,
        entropies=None
        if g.entropies is None
        else [r.tolist() for r in g.layout.split(g.entropies)],
        rewards=g.rewards.tolist(),
    )


def token_output(raw: Any, layout: Ragged, where: str) -> tuple[Floats, dict[str, float]]:
    """Validate a plugin's token advantages (shape and finiteness) and its extra metrics."""
    extra: dict[str, float] = {}
    if isinstance(raw, TransformOutput) or hasattr(raw, "token_advs"):
        extra = {str(k): float(v) for k, v in (getattr(raw, "extra_metrics", None) or {}).items()}
        raw = raw.token_advs
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise TypeError(
            f"{where} must return token advantages per completion, got {type(raw).__name__}"
        )
    flat = layout.flatten(list(raw), what=where)
    if not np.all(np.isfinite(flat)):
        raise ValueError(f"{where} returned a non-finite token advantage")
    return flat, extra


def _wrap_context(fn: Callable[[TransformContext], Any], where: str) -> ContextFn:
    def run(
        g: GroupTokens, s: StepInputs, params: Mapping[str, Any], beta: float, alpha: float
    ) -> tuple[Floats, dict[str, float]]:
        return token_output(fn(context_of(g, s, params, beta, alpha)), g.layout, where)

    return run


def _wrap_entropy(
    fn: Callable[[list[float], list[int], float], Sequence[float]], where: str
) -> UncertaintyTransform:
    def run(layout: Ragged, u: Floats, mask: Floats, lam: float) -> Floats:
        rows = [
            fn(r.tolist(), [int(m) for m in mr.tolist()], lam)
            for r, mr in zip(layout.split(u), layout.split(mask), strict=True)
        ]
        return layout.flatten(rows, what=where)

    return run


def _wrap_post(fn: Callable[..., Any], where: str) -> PostProcess:
    def run(
        layout: Ragged, tok: Floats, raw_u: Floats, params: Mapping[str, Any]
    ) -> tuple[Floats, dict[str, float]]:
        out = fn(
            [r.tolist() for r in layout.split(tok)],
            [r.tolist() for r in layout.split(raw_u)],
            dict(params),
        )
        rows, metrics = out if isinstance(out, tuple) else (out, {})
        flat, _ = token_output(rows, layout, where)
        return flat, {str(k): float(v) for k, v in (metrics or {}).items()}

    return run


def from_spec(spec: TransformSpec, source: str) -> Transform:
    where = f"transform {spec.name!r}"
    return Transform(
        name=spec.name,
        use_gtpo=spec.use_gtpo and spec.context_fn is None,
        needs_planning=spec.needs_planning,
        uses_sepa_controller=spec.uses_sepa_controller,
        apply_hicra=spec.apply_hicra,
        token_varying=spec.token_varying,
        uncertainty_transform=_wrap_entropy(spec.entropy_transform, where)
        if spec.entropy_transform
        else None,
        post_process=_wrap_post(spec.post_process, where) if spec.post_process else None,
        context=_wrap_context(spec.context_fn, where) if spec.context_fn else None,
        source=source,
        param_keys=None,
    )


def from_object(obj: Any, name: str, source: str) -> Transform:
    """A Transform from whatever a plugin path, entry point or registration points at, with
    the params keys the object says it reads (`declared_param_keys`)."""
    if isinstance(obj, Transform):
        return obj
    return replace(_from_object(obj, name, source), param_keys=declared_param_keys(obj))


def _from_object(obj: Any, name: str, source: str) -> Transform:
    obj = from_factory(obj, TransformSpec)
    if isinstance(obj, TransformSpec):
        return from_spec(obj, source)
    if not callable(obj):
        raise TypeError(f"transform plugin {name!r} is neither a TransformSpec nor callable")
    spec = TransformSpec(
        name=name,
        use_gtpo=False,
        needs_planning=bool(getattr(obj, "needs_planning", False)),
        uses_sepa_controller=bool(getattr(obj, "uses_sepa_controller", False)),
        context_fn=obj,
        token_varying=bool(getattr(obj, "token_varying", True)),
    )
    return from_spec(spec, source)
