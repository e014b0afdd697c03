"""The policy loss: `[training] policy_loss_mode` names an objective (a built-in, a registered
one, an entry point of `retrain.objectives`, or a dotted path), and every rule about it is
read from its record (retrain.backends.objective)."""

from __future__ import annotations

from retrain.backends.objective import NotAnObjective, Objective, objective_of
from retrain.config.errors import ConfigIssue, did_you_mean
from retrain.config.schema import POLICY_LOSS_MODES, TrainConfig
from retrain.plugins.resolve import PluginError, is_dotted
from retrain.registry import builtin
from retrain.registry.core import UnknownComponent
from retrain.registry.entry_points import names as entry_point_names
from retrain.validation.built import NOT_BUILT_TEXT
from retrain.validation.mode import runtime_names

KEY = "[training] policy_loss_mode"


def objective_in(c: TrainConfig) -> Objective | None:
    """The config's objective, None when its name does not resolve (check_objective says why)."""
    try:
        return objective_of(c.training.policy_loss_mode, c.plugins.search_paths)
    except (UnknownComponent, PluginError, NotAnObjective):
        return None


def _unknown(c: TrainConfig) -> list[ConfigIssue]:
    name = c.training.policy_loss_mode
    try:
        objective_of(name, c.plugins.search_paths)
    except UnknownComponent:
        group = builtin.ENTRY_POINT_GROUPS["objective"]
        known = [*POLICY_LOSS_MODES, *entry_point_names(group), *runtime_names(group)]
        return [ConfigIssue(f"{name!r}: must be one of {', '.join(dict.fromkeys(known))}, or a dotted path "
                            "pkg.module.attr", key=KEY, hint=did_you_mean(name, known))]
    except NotAnObjective as exc:
        return [ConfigIssue(str(exc), key=KEY)]
    except PluginError as exc:  # a dotted path that does not import is check_plugins' issue
        return [] if is_dotted(name) else [ConfigIssue(str(exc), key=KEY)]
    return []


def check_objective(c: TrainConfig) -> list[ConfigIssue]:
    """The objective exists, and the clip, ratio-level and own rules its record states."""
    t = c.training
    objective = objective_in(c)
    if objective is None:
        return _unknown(c)
    issues: list[ConfigIssue] = []
    if t.clip_eps_high > 0 and t.clip_eps <= 0 and not objective.clip_eps_optional:
        issues.append(ConfigIssue("needs clip_eps > 0", key="[training] clip_eps_high", hint="clip_eps = 0.2"))
    for key, message, hint in objective.check(t) if objective.check is not None else ():
        issues.append(ConfigIssue(message, key=f"[training] {key}", hint=hint))
    if t.importance_sampling_level == "sequence" and objective.token_only:
        sequence = [name for name in POLICY_LOSS_MODES if not objective_of(name).token_only]
        why = " (it picks tokens by their own ratio)" if objective.select is not None else ""
        issues.append(ConfigIssue(
            f"'sequence' with policy_loss_mode = {t.policy_loss_mode!r} is {NOT_BUILT_TEXT}{why}; sequence "
            f"ratios work with {', '.join(sequence[:-1])} and {sequence[-1]}",
            key="[training] importance_sampling_level", hint='importance_sampling_level = "token"'))
    return issues
