"""The composable advantage computation: rewards + sampled-token logprobs -> token advantages.

For one group, in order (spec algorithms.md §4.2):
1. episode advantages A_i from the advantage mode (validated: G finite floats);
2. a context transform (Delight family, plugins) computes every token advantage and stops;
3. `none` broadcasts A_i to every token;
4. otherwise, per completion: uncertainty u -> optional uncertainty transform (SEPA) ->
   GTPO weighting -> optional HICRA; then the group post-process (entropy mask).
Every output is finite and has one value per sampled token.

`build_pipeline(config)` resolves the modes once (plugins import here, bad params raise
here); `compute_group` is then called per prompt group with the step's SEPA lambda.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from retrain.advantages import credit
from retrain.advantages.algorithm import (
    AlgorithmContext,
    AlgorithmPlugin,
    Recipe,
    discover_entropic,
)
from retrain.advantages.algorithm import plugin_from_object as algorithm_plugin
from retrain.advantages.delight.transform import parse_params as parse_delight
from retrain.advantages.episode import (
    AdvantageContext,
    AdvantageSpec,
    check_episode_output,
)
from retrain.advantages.ragged import Floats, Ragged
from retrain.advantages.result import GroupAdvantages, TokenStats, merge_metrics
from retrain.advantages.transform import (
    DELIGHT_DEFAULT_NORM,
    GroupTokens,
    StepInputs,
    Transform,
    mask_rho,
    token_output,
)
from retrain.advantages.transform import from_object as transform_from_object
from retrain.advantages.uncertainty import (
    SELECTOR_KEYS,
    Uncertainty,
    resolve_uncertainty,
    surprisal,
)
from retrain.config.schema import TrainConfig
from retrain.plugins.signature import call_with_params, from_factory, takes_context
from retrain.registry.core import lookup

EpisodeStage = Callable[[Floats, int], tuple[Floats, dict[str, float]]]


@dataclass(frozen=True)
class GroupInput:
    """One prompt group: G rewards and G per-completion token arrays (any may be empty)."""

    rewards: Sequence[float] | Floats
    logprobs: Sequence[ArrayLike]
    planning_masks: Sequence[ArrayLike] | None = None
    entropies: Sequence[ArrayLike] | None = None


def _builtin_episode(fn: Callable[[Floats], Floats]) -> EpisodeStage:
    def run(r: Floats, step: int) -> tuple[Floats, dict[str, float]]:
        return fn(r), {}

    return run


def _plugin_episode(obj: Any, name: str, params: dict[str, Any]) -> EpisodeStage:
    made = from_factory(obj, AdvantageSpec)
    fn = made.compute if isinstance(made, AdvantageSpec) else made
    if not callable(fn):
        raise TypeError(f"advantage plugin {name!r} is not callable")
    where = f"advantage plugin {name!r}"

    def run(r: Floats, step: int) -> tuple[Floats, dict[str, float]]:
        rewards = r.tolist()
        if takes_context(fn):
            raw = fn(AdvantageContext(rewards, dict(params), step))
        else:
            raw = call_with_params(fn, rewards, dict(params))
        return check_episode_output(raw, r.shape[0], where)

    return run


def _discover_episode(params: dict[str, Any]) -> EpisodeStage:
    def run(r: Floats, step: int) -> tuple[Floats, dict[str, float]]:
        return discover_entropic(r, params)

    return run


def _episode_stage(
    name: str, params: dict[str, Any], algorithm_params: dict[str, Any], search_paths: Sequence[str]
) -> tuple[EpisodeStage, str]:
    if name == "discover_entropic":
        return _discover_episode(algorithm_params), "builtin"
    found = lookup("advantage_mode", name, search_paths)
    if found.source == "builtin":
        return _builtin_episode(found.obj), "builtin"
    return _plugin_episode(found.obj, name, params), f"{found.source}:{found.origin}"


def _transform(name: str, search_paths: Sequence[str]) -> Transform:
    found = lookup("transform_mode", name, search_paths)
    if isinstance(found.obj, Transform):
        return found.obj
    return transform_from_object(found.obj, name, f"{found.source}:{found.origin}")


def _check_logprobs(lp: Floats) -> None:
    if np.isnan(lp).any() or (lp == np.inf).any():
        raise ValueError("logprobs must not be NaN or +inf")


class AdvantagePipeline:
    """One configured advantage computation (see the module docstring for the order)."""

    def __init__(
        self,
        *,
        condition: str,
        advantage: str,
        transform: Transform | None,
        episode: EpisodeStage | None,
        episode_source: str,
        uncertainty: Uncertainty,
        params: dict[str, Any],
        beta: float,
        alpha: float,
        batch_normalize: bool,
        algorithm: AlgorithmPlugin | None = None,
    ) -> None:
        self.condition = condition
        self.advantage = advantage
        self.transform = transform
        self.episode_stage = episode
        self.episode_source = episode_source
        self.uncertainty = uncertainty
        self.params = params
        self.beta = beta
        self.alpha = alpha
        self.batch_normalize = batch_normalize
        self.algorithm = algorithm

    # ------------------------------------------------------------ what the trainer asks

    @property
    def needs_planning(self) -> bool:
        """Planning masks are used; compute them (and only then) from the token strings."""
        if self.algorithm is not None:
            return self.algorithm.needs_planning
        return self.transform is not None and self.transform.needs_planning

    @property
    def uses_sepa_controller(self) -> bool:
        if self.algorithm is not None:
            return self.algorithm.uses_sepa_controller
        return self.transform is not None and self.transform.uses_sepa_controller

    @property
    def token_varying(self) -> bool:
        """Token advantages may differ within a completion (needs a token-preserving backend)."""
        if self.algorithm is not None:
            return self.algorithm.token_varying
        return self.transform is not None and self.transform.token_varying

    @property
    def needs_entropies(self) -> bool:
        """Per-token entropies from the sampler are required (shannon_entropy)."""
        t = self.transform
        return (
            self.algorithm is None
            and t is not None
            and t.use_gtpo
            and t.context is None
            and self.uncertainty.needs_entropies
        )

    def describe(self) -> dict[str, Any]:
        return {
            "condition": self.condition,
            "advantage_mode": self.advantage,
            "advantage_source": self.episode_source,
            "transform_mode": self.transform.name if self.transform else "",
            "transform_source": self.transform.source if self.transform else "",
            "algorithm_plugin": self.algorithm.source if self.algorithm else "",
            "uncertainty_kind": self.uncertainty.name,
            "needs_planning": self.needs_planning,
            "uses_sepa_controller": self.uses_sepa_controller,
            "token_varying": self.token_varying,
            "needs_entropies": self.needs_entropies,
            "batch_normalize": self.batch_normalize,
            "gtpo_beta": self.beta,
            "hicra_alpha": self.alpha,
        }

    # ------------------------------------------------------------ computation

    def compute_group(
        self,
        rewards: Sequence[float] | Floats,
        logprobs: Sequence[ArrayLike],
        *,
        planning_masks: Sequence[ArrayLike] | None = None,
        entropies: Sequence[ArrayLike] | None = None,
        sepa_lambda: float = 0.0,
        step: int = 0,
        delight_eta_prev: float | None = None,
    ) -> GroupAdvantages:
        """Token advantages of one prompt group.

        `logprobs[i]` are completion i's sampled-token logprobs (may be empty). Planning masks
        are required when `needs_planning`; entropies when `needs_entropies`.
        """
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(r)):
            raise ValueError("rewards must be finite")
        if len(logprobs) != r.shape[0]:
            raise ValueError(f"{r.shape[0]} rewards but {len(logprobs)} completions")
        layout, lp = Ragged.of(logprobs)
        _check_logprobs(lp)
        if planning_masks is not None:
            mask = layout.flatten(planning_masks, what="planning_masks")
        elif self.needs_planning:
            raise ValueError(f"{self.condition} needs planning masks (pipeline.needs_planning)")
        else:
            mask = np.zeros(layout.total)
        ent = layout.flatten(entropies, what="entropies") if entropies is not None else None
        step_in = StepInputs(
            sepa_lambda=float(sepa_lambda), step=int(step), delight_eta_prev=delight_eta_prev
        )
        if self.algorithm is not None:
            return self._algorithm_group(layout, r, lp, mask, ent, step_in)
        assert self.episode_stage is not None and self.transform is not None
        episode, metrics = self.episode_stage(r, step_in.step)
        group = GroupTokens(layout, episode, lp, mask, ent, r)
        tok, stats, more = self._tokens(group, step_in)
        metrics.update(more)
        if not np.isfinite(tok.sum()) and not np.all(np.isfinite(tok)):
            raise ValueError(f"{self.condition} produced a non-finite token advantage")
        return GroupAdvantages.build(layout, episode, tok, metrics, stats)

    def _tokens(
        self, g: GroupTokens, s: StepInputs
    ) -> tuple[Floats, TokenStats | None, dict[str, float]]:
        t = self.transform
        assert t is not None
        if t.context is not None:
            tok, metrics = t.context(g, s, self.params, self.beta, self.alpha)
            return tok, None, metrics
        if not t.use_gtpo:
            return (
                g.layout.expand(g.episode),
                TokenStats.of(surprisal(g.logprobs), None, g.mask),
                {},
            )
        raw_u = self.uncertainty.values(g.layout, g.logprobs, g.entropies, g.mask, self.params)
        u = raw_u
        if t.uncertainty_transform is not None:
            u = t.uncertainty_transform(g.layout, raw_u, g.mask, s.sepa_lambda)
        stats = TokenStats.of(raw_u, u if t.uncertainty_transform else None, g.mask)
        tok = credit.gtpo(g.layout, g.episode, u, self.beta)
        if t.apply_hicra:
            tok = credit.hicra(tok, g.mask, self.alpha)
        extra: dict[str, float] = {}
        if t.post_process is not None:
            tok, extra = t.post_process(g.layout, tok, raw_u, self.params)
        return tok, stats, extra

    def _algorithm_group(
        self, layout: Ragged, r: Floats, lp: Floats, mask: Floats, ent: Floats | None, s: StepInputs
    ) -> GroupAdvantages:
        plugin = self.algorithm
        assert plugin is not None
        ctx = AlgorithmContext(
            rewards=r.tolist(),
            logprobs=[x.tolist() for x in layout.split(lp)],
            planning_masks=[[int(m) for m in x.tolist()] for x in layout.split(mask)],
            params=dict(self.params),
            step=s.step,
            sepa_lambda=s.sepa_lambda,
            gtpo_beta=self.beta,
            hicra_alpha=self.alpha,
            precomputed_entropies=None if ent is None else [x.tolist() for x in layout.split(ent)],
        )
        tok, metrics = token_output(plugin.fn(ctx), layout, f"algorithm plugin {plugin.name!r}")
        episode, _ = layout.mean(tok)
        return GroupAdvantages.build(layout, episode, tok, metrics)

    def compute_groups(
        self,
        groups: Sequence[GroupInput],
        *,
        sepa_lambda: float = 0.0,
        step: int = 0,
        delight_eta_prev: float | None = None,
    ) -> tuple[list[GroupAdvantages], dict[str, float]]:
        """Every group of a step, plus the step-level merge of their metrics."""
        out = [
            self.compute_group(
                g.rewards,
                g.logprobs,
                planning_masks=g.planning_masks,
                entropies=g.entropies,
                sepa_lambda=sepa_lambda,
                step=step,
                delight_eta_prev=delight_eta_prev,
            )
            for g in groups
        ]
        return out, merge_metrics(out)


# ---------------------------------------------------------------- construction


def _transform_params(
    config: TrainConfig, table: Mapping[str, Any], rho_source: Mapping[str, Any]
) -> dict[str, Any]:
    """Post-process defaults (uncertainty kind, mask rho) overwritten by the transform's table.

    Either rho key in `table` wins over the top-level value (the reference let the top-level
    default shadow a table's legacy `entropy_mask_rho`).
    """
    a = config.algorithm
    rho = a.surprisal_mask_rho
    for source in (rho_source, table):
        for key in ("entropy_mask_rho", "surprisal_mask_rho"):
            if source.get(key) is not None:
                rho = float(source[key])
    merged: dict[str, Any] = {"uncertainty_kind": a.uncertainty_kind}
    merged.update(table)
    merged["surprisal_mask_rho"] = rho
    merged["entropy_mask_rho"] = rho
    return merged


def _uncertainty_name(config: TrainConfig, params: Mapping[str, Any]) -> str:
    for key in SELECTOR_KEYS:
        value = params.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return config.algorithm.uncertainty_kind


def _check_params(
    transform: Transform, params: Mapping[str, Any], beta: float, alpha: float
) -> None:
    if beta < 0:
        raise ValueError(f"[gtpo] beta must be >= 0, got {beta}")
    if not 0 <= alpha <= 1:
        raise ValueError(
            f"[hicra] alpha must be in [0, 1] (above 1 HICRA flips negative credit), got {alpha}"
        )
    rho = mask_rho(params)
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"surprisal_mask_rho must be in [0, 1], got {rho}")
    if transform.name in DELIGHT_DEFAULT_NORM and transform.source == "builtin":
        parse_delight(params, default_norm=DELIGHT_DEFAULT_NORM[transform.name])


def build_pipeline(config: TrainConfig) -> AdvantagePipeline:
    """The advantage pipeline a config describes; raises ValueError/PluginError with the reason."""
    a = config.algorithm
    search = config.plugins.search_paths
    beta, alpha = config.gtpo.beta, config.hicra.alpha
    algorithm_params = dict(a.params)
    if a.algorithm_mode:
        found = lookup("algorithm_mode", a.algorithm_mode, search)
        if not isinstance(found.obj, Recipe):
            plugin = algorithm_plugin(found.obj, a.algorithm_mode, f"{found.source}:{found.origin}")
            params = _algorithm_plugin_params(config)
            return AdvantagePipeline(
                condition=a.algorithm_mode,
                advantage="",
                transform=None,
                episode=None,
                episode_source="",
                uncertainty=resolve_uncertainty(a.uncertainty_kind, search),
                params=params,
                beta=beta,
                alpha=alpha,
                batch_normalize=config.training.batch_advantage_norm,
                algorithm=plugin,
            )
        advantage, transform_name = found.obj.advantage, found.obj.transform
        nested = algorithm_params.get("transform_params")
        table = {**a.transform_params, **(nested if isinstance(nested, dict) else {})}
        params = _transform_params(config, table, algorithm_params)
        condition = a.algorithm_mode
    else:
        advantage, transform_name = a.advantage_mode, a.transform_mode
        params = _transform_params(config, a.transform_params, {})
        condition = f"{advantage}+{transform_name}"
    transform = _transform(transform_name, search)
    _check_params(transform, params, beta, alpha)
    adv_params = {**a.advantage_params}
    for key, value in (
        ("algorithm_mode", a.algorithm_mode),
        ("advantage_mode", advantage),
        ("transform_mode", transform_name),
    ):
        adv_params.setdefault(key, value)
    episode, source = _episode_stage(advantage, adv_params, algorithm_params, search)
    return AdvantagePipeline(
        condition=condition,
        advantage=advantage,
        transform=transform,
        episode=episode,
        episode_source=source,
        uncertainty=resolve_uncertainty(_uncertainty_name(config, params), search),
        params=params,
        beta=beta,
        alpha=alpha,
        batch_normalize=config.training.batch_advantage_norm or advantage == "reinforce_pp",
    )


def _algorithm_plugin_params(config: TrainConfig) -> dict[str, Any]:
    a = config.algorithm
    params = dict(a.params)
    nested = params.get("transform_params")
    transform_params = {**a.transform_params, **(nested if isinstance(nested, dict) else {})}
    transform_params.setdefault("uncertainty_kind", a.uncertainty_kind)
    for key, value in (
        ("advantage_mode", a.advantage_mode),
        ("transform_mode", a.transform_mode),
        ("advantage_params", dict(a.advantage_params)),
        ("transform_params", transform_params),
        ("uncertainty_kind", a.uncertainty_kind),
        ("surprisal_mask_rho", a.surprisal_mask_rho),
        ("entropy_mask_rho", a.surprisal_mask_rho),
        ("gtpo_beta", config.gtpo.beta),
        ("hicra_alpha", config.hicra.alpha),
    ):
        params.setdefault(key, value)
    return params
