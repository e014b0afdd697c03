"""Modes: algorithm selectors are built-in names, registered entry points, or dotted paths;
the uncertainty kind is canonicalised and reconciled with per-transform overrides."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from retrain.advantages.uncertainty import SELECTOR_KEYS
from retrain.config.errors import ConfigIssue, did_you_mean
from retrain.config.schema import AlgorithmConfig, TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.registry import builtin
from retrain.registry.entry_points import names as entry_point_names


def runtime_names(group: str) -> list[str]:
    """Names given at run time with `registry.register` to the kind that reads `group`."""
    from retrain.registry.core import registered

    return [name for kind, g in builtin.ENTRY_POINT_GROUPS.items() if g == group for name in registered(kind)]


def check_selector(value: str, builtins: Sequence[str], group: str | None, key: str,
                   what: str) -> ConfigIssue | None:
    """None when `value` names a built-in, an entry point of `group`, or a dotted path."""
    if value in builtins or is_dotted(value):
        return None
    registered = [*entry_point_names(group), *runtime_names(group)] if group else []
    if value in registered:
        return None
    known = [*builtins, *registered]
    return ConfigIssue(f"unknown {what} {value!r}", key=key, hint=available_hint(value, known))


def available_hint(value: str, known: Sequence[str], *, dotted: bool = True,
                   guesses: Sequence[str] = ()) -> str:
    """'did you mean X? available: a, b, c' — the list is always there, the guess (among
    `guesses`, default `known`) when one is close."""
    guess = did_you_mean(value, guesses or known)
    listing = f"available: {', '.join(dict.fromkeys(known))}" + ("; or a dotted path pkg.module.attr" if dotted else "")
    return f"{guess} {listing}" if guess else listing


def canonical_uncertainty(value: str) -> str | None:
    """The canonical kind, the value itself for a dotted path, or None when unknown."""
    canon = builtin.canonical_uncertainty(value)
    if canon is not None:
        return canon
    return value.strip() if is_dotted(value.strip()) else None


def _kind_hint(value: str) -> str:
    return available_hint(value.strip().lower(), builtin.UNCERTAINTY_KINDS, guesses=list(builtin.UNCERTAINTY_ALIASES))


def check_modes(c: TrainConfig) -> tuple[TrainConfig, list[ConfigIssue]]:
    """The algorithm with its uncertainty kind canonical (in every table that overrides it too)."""
    a = c.algorithm
    issues = _selectors(a)
    kind = canonical_uncertainty(a.uncertainty_kind)
    if kind is None:
        issues.append(ConfigIssue(
            f"unknown uncertainty kind {a.uncertainty_kind!r}", key="[algorithm] uncertainty_kind",
            hint=_kind_hint(a.uncertainty_kind)))
        return c, issues
    transform_params, algorithm_params, holders, table_issues = _override_tables(a)
    issues += table_issues
    override, override_issues = _canonical_overrides(holders)
    issues += override_issues
    kind, kind_issues = _reconcile(a, kind, override)
    issues += kind_issues
    algorithm = msgspec.structs.replace(a, uncertainty_kind=kind, transform_params=transform_params,
                                        params=algorithm_params)
    return msgspec.structs.replace(c, algorithm=algorithm), issues


def _selectors(a: AlgorithmConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    groups = builtin.ENTRY_POINT_GROUPS
    if a.algorithm_mode and (problem := check_selector(a.algorithm_mode, builtin.ALGORITHM_MODES, None,
                                                       "[algorithm] algorithm_mode", "algorithm_mode")):
        issues.append(problem)
    for value, names, group, key in (
        (a.advantage_mode, builtin.ADVANTAGE_MODES, groups["advantage_mode"], "advantage_mode"),
        (a.transform_mode, builtin.TRANSFORM_MODES, groups["transform_mode"], "transform_mode"),
    ):
        if problem := check_selector(value, names, group, f"[algorithm] {key}", key):
            issues.append(problem)
    return issues


_Holders = list[tuple[str, dict[str, Any]]]


def _override_tables(a: AlgorithmConfig) -> tuple[dict[str, Any], dict[str, Any], _Holders, list[ConfigIssue]]:
    """Copies of the transform and algorithm params, and the (label, table) pairs among them
    that may override the uncertainty kind: the transform params, and with an algorithm_mode
    its params; a nested params.transform_params table either way."""
    issues: list[ConfigIssue] = []
    transform_params = dict(a.transform_params)
    algorithm_params = dict(a.params)
    nested = algorithm_params.get("transform_params")
    if nested is not None and not isinstance(nested, dict):
        issues.append(ConfigIssue("must be a table", key="[algorithm.params] transform_params"))
        nested = None
    holders: _Holders = [("[algorithm.transform_params]", transform_params)]
    if a.algorithm_mode:
        holders.append(("[algorithm.params]", algorithm_params))
    if isinstance(nested, dict):
        nested = dict(nested)
        algorithm_params["transform_params"] = nested
        holders.append(("[algorithm.params.transform_params]", nested))
    return transform_params, algorithm_params, holders, issues


def _canonical_overrides(holders: _Holders) -> tuple[tuple[str, str] | None, list[ConfigIssue]]:
    """Canonicalise each override in place; the first one as (label, kind), or None."""
    issues: list[ConfigIssue] = []
    override: tuple[str, str] | None = None
    for where, table in holders:
        for sel in SELECTOR_KEYS:
            if sel not in table:
                continue
            raw = table[sel]
            canon = canonical_uncertainty(raw) if isinstance(raw, str) else None
            if canon is None:
                issues.append(ConfigIssue(f"unknown uncertainty kind {raw!r}", key=f"{where} {sel}",
                                          hint=_kind_hint(str(raw))))
                continue
            table[sel] = canon
            if override is not None and override[1] != canon:
                issues.append(ConfigIssue(
                    f"conflicting uncertainty kinds: {override[0]} says {override[1]!r}, "
                    f"{where} {sel} says {canon!r}", key=f"{where} {sel}"))
            override = override or (f"{where} {sel}", canon)
    return override, issues


def _reconcile(a: AlgorithmConfig, kind: str, override: tuple[str, str] | None) -> tuple[str, list[ConfigIssue]]:
    """An override wins over the default kind (surprisal, as written); any other kind must agree."""
    if override is None or override[1] == kind:
        return kind, []
    if kind == "surprisal" and a.uncertainty_kind.strip().lower() == "surprisal":
        return override[1], []
    return kind, [ConfigIssue(
        f"conflicting uncertainty kinds: [algorithm] uncertainty_kind = {kind!r} but "
        f"{override[0]} = {override[1]!r}", key="[algorithm] uncertainty_kind", hint="set it in one place")]
